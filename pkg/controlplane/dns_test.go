package controlplane_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

func TestTenantDNS(t *testing.T) {
	ip, err := controlplane.DNSServiceIP("10.254.3.0/24")
	if err != nil || !ip.Equal(net.ParseIP("10.254.3.10")) {
		t.Fatalf("DNS address %v, %v; want 10.254.3.10", ip, err)
	}
	svc := controlplane.TenantDNSService(ip)
	if svc.Namespace != "kube-system" || svc.Name != "kube-dns" || svc.Spec.ClusterIP != "10.254.3.10" || svc.Spec.Selector != nil {
		t.Errorf("Service %s/%s clusterIP %s selector %v", svc.Namespace, svc.Name, svc.Spec.ClusterIP, svc.Spec.Selector)
	}
	for _, p := range svc.Spec.Ports {
		if p.Port != 53 || p.TargetPort.IntValue() != controlplane.DNSPort {
			t.Errorf("port %+v: want 53 to %d", p, controlplane.DNSPort)
		}
	}
	slice := controlplane.TenantDNSEndpointSlice([]string{"10.244.2.9", "10.244.1.4"})
	var got []string
	for _, e := range slice.Endpoints {
		got = append(got, e.Addresses...)
	}
	if !slices.Equal(got, []string{"10.244.1.4", "10.244.2.9"}) {
		t.Errorf("endpoints %v, want both pods, sorted", got)
	}
	// Label values are checked by the API server only: check them here.
	for _, labels := range []map[string]string{svc.Labels, slice.Labels} {
		for k, v := range labels {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("label %s=%q: %s", k, v, strings.Join(errs, "; "))
			}
		}
	}
}
