//go:build e2e

package e2e

import (
	"context"
	"net/netip"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// The local cluster's load-balancer pool (test/e2e/local/layout.go).
var lbPoolFirst, lbPoolLast = netip.MustParseAddr("172.30.0.200"), netip.MustParseAddr("172.30.0.249")

// TestLoadBalancerExposure exposes a tenant's apiserver as a host Service of type
// LoadBalancer: the local cluster's load balancer gives it an address of its pool, the tenant
// is reached there from this machine, and deleting the tenant frees the address.
func TestLoadBalancerExposure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-lb")
	vc := newVC(ns, "lb", v1alpha1.ExposureLoadBalancer)
	start := time.Now()
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	got := waitReady(t, ctx, vc)
	t.Logf("%s Ready after %s at %s", vc.Name, time.Since(start).Round(100*time.Millisecond), got.Status.Endpoint)

	svc := &corev1.Service{}
	key := client.ObjectKey{Namespace: controlplane.Namespace(got), Name: naming.For(vc.Name).APIServerService()}
	if err := host.Get(ctx, key, svc); err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || len(svc.Status.LoadBalancer.Ingress) != 1 {
		t.Fatalf("apiserver Service %s: type %s, load-balancer status %+v; want one address", key, svc.Spec.Type, svc.Status.LoadBalancer)
	}
	ingress := svc.Status.LoadBalancer.Ingress[0]
	addr, err := netip.ParseAddr(ingress.IP)
	if err != nil || addr.Compare(lbPoolFirst) < 0 || addr.Compare(lbPoolLast) > 0 {
		t.Fatalf("load-balancer address %q is not one of the pool %s-%s", ingress.IP, lbPoolFirst, lbPoolLast)
	}
	if ingress.IPMode == nil || *ingress.IPMode != corev1.LoadBalancerIPModeProxy {
		t.Errorf("load-balancer ipMode %v, want Proxy", ingress.IPMode)
	}
	if want := "https://" + addr.String() + ":6443"; got.Status.Endpoint != want {
		t.Fatalf("status.endpoint %q, want %q", got.Status.Endpoint, want)
	}

	t.Run("kubectl reaches the tenant at the load-balancer address", func(t *testing.T) {
		kubeconfig := downloadKubeconfig(t, ctx, vc)
		cfg, err := clientcmd.LoadFromFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for name, cluster := range cfg.Clusters {
			if u, err := url.Parse(cluster.Server); err != nil || u.Hostname() != addr.String() {
				t.Errorf("kubeconfig cluster %s: server %s, want the load-balancer address %s", name, cluster.Server, addr)
			}
		}
		out := kubectl(t, "--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name")
		if !strings.Contains(out, "namespace/kube-system") {
			t.Errorf("kubectl get namespaces: %s", out)
		}
		t.Logf("kubectl get namespaces at %s: %s", got.Status.Endpoint, strings.Join(strings.Fields(out), " "))
	})

	t.Run("deleting the tenant frees the address", func(t *testing.T) {
		deleteAndCheckGone(t, ctx, vc)
		// Free: no Service holds it, and the load balancer no longer has it on the bridge.
		var holders []string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			svcs, err := hostCS.CoreV1().Services(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			holders = nil
			for _, s := range svcs.Items {
				for _, in := range s.Status.LoadBalancer.Ingress {
					if in.IP == addr.String() {
						holders = append(holders, s.Namespace+"/"+s.Name)
					}
				}
			}
			onBridge, err := exec.Command("ip", "-o", "addr", "show", "to", addr.String()+"/32").Output()
			if err != nil {
				return false, err
			}
			if a := strings.TrimSpace(string(onBridge)); a != "" {
				holders = append(holders, "address "+a)
			}
			return len(holders) == 0, nil
		})
		if err != nil {
			t.Fatalf("%s not freed: %v (still held: %s)", addr, err, strings.Join(holders, ", "))
		}
		t.Logf("%s freed: no Service holds it and it is on no interface", addr)
	})
}
