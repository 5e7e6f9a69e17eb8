package clustertree

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/naming"
)

func TestServiceCopy(t *testing.T) {
	svc := func(mutate func(*corev1.Service)) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: trNS, Labels: map[string]string{"app": "web", "kubenest.io/component": "etcd"}},
			Spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeNodePort, ClusterIP: "10.254.0.42", ClusterIPs: []string{"10.254.0.42"},
				Selector: map[string]string{"app": "web"},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80,
					TargetPort: intstr.FromInt32(8080), NodePort: 31080}},
				SessionAffinity: corev1.ServiceAffinityClientIP,
			},
		}
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	tr := testTranslator()

	host, refused := tr.Service(svc(nil))
	if host == nil {
		t.Fatalf("a ClusterIP Service is not copied: %s", refused)
	}
	if host.Name != hn("web") || host.Namespace != trHostNS {
		t.Errorf("copy is %s/%s, want %s/%s", host.Namespace, host.Name, trHostNS, hn("web"))
	}
	if host.Spec.ClusterIP != "10.254.0.42" || host.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("copy: type %s, ClusterIP %s; want ClusterIP with the tenant's address", host.Spec.Type, host.Spec.ClusterIP)
	}
	if host.Spec.Selector != nil {
		t.Errorf("copy has a selector %v: its endpoints are the tenant's, copied", host.Spec.Selector)
	}
	if p := host.Spec.Ports; len(p) != 1 || p[0].NodePort != 0 || p[0].Port != 80 || p[0].Name != "http" {
		t.Errorf("ports %+v: want the tenant's without node ports", p)
	}
	if host.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Errorf("session affinity %q not kept", host.Spec.SessionAffinity)
	}
	if host.Labels["kubenest.io/component"] != "" || host.Labels[naming.LabelVirtualCluster] != trVC || host.Labels[LabelOrigin] != OriginClusterTree {
		t.Errorf("labels %v: tenant kubenest.io/ keys dropped, the tenant's own added", host.Labels)
	}
	if host.Annotations[AnnotationTenantName] != "web" || host.Annotations[AnnotationTenantNamespace] != trNS {
		t.Errorf("annotations %v do not name the tenant Service", host.Annotations)
	}

	for name, s := range map[string]*corev1.Service{
		"headless": svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, nil }),
		"ExternalName": svc(func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ClusterIP, s.Spec.ExternalName = corev1.ServiceTypeExternalName, "", "example.com"
		}),
	} {
		if host, refused := tr.Service(s); host != nil || refused != "" {
			t.Errorf("%s: copied (%v) or refused (%q), want no copy needed (the tenant's DNS serves it)", name, host != nil, refused)
		}
	}
	// kubernetes.default.svc is the tenant apiserver's ClusterIP for every pod, those on the
	// shared node too (the apiserver's own endpoints are its control-plane pods', which the
	// EndpointSlice copy allows).
	kube := svc(func(s *corev1.Service) { s.Namespace, s.Name = metav1.NamespaceDefault, "kubernetes" })
	if host, refused := tr.Service(kube); host == nil || refused != "" || host.Spec.ClusterIP != kube.Spec.ClusterIP {
		t.Errorf("the tenant's kubernetes Service: copied %v, refused %q; want a copy at its ClusterIP", host != nil, refused)
	}

	if host, refused := (Translator{VirtualCluster: trVC, HostNamespace: trHostNS}).Service(svc(nil)); host != nil || refused != "" {
		t.Errorf("no Service range known: copied %v, refused %q; want none copied, and nothing said to the tenant", host != nil, refused)
	}
}

// TestServiceRange: a Service is copied only with ClusterIPs of the tenant's own slice; the
// host's range or another tenant's slice would take their addresses in the host.
func TestServiceRange(t *testing.T) {
	tr := testTranslator()
	tr.ServiceCIDR = netip.MustParsePrefix("10.254.3.0/24")
	tests := []struct {
		name       string
		clusterIP  string
		clusterIPs []string
		refused    string // "": copied
	}{
		{name: "in the slice", clusterIP: "10.254.3.40", clusterIPs: []string{"10.254.3.40"}},
		{name: "first and last of the slice", clusterIP: "10.254.3.0", clusterIPs: []string{"10.254.3.0"}},
		{name: "clusterIP only", clusterIP: "10.254.3.255"},
		{name: "the host's range", clusterIP: "10.96.0.88", clusterIPs: []string{"10.96.0.88"},
			refused: "spec.clusterIPs[0] 10.96.0.88 is outside this tenant's Service range 10.254.3.0/24: the Service is not reachable from pods on the shared node"},
		{name: "another tenant's slice", clusterIP: "10.254.9.77", clusterIPs: []string{"10.254.9.77"},
			refused: "spec.clusterIPs[0] 10.254.9.77 is outside"},
		{name: "the slice's neighbour", clusterIP: "10.254.4.0", clusterIPs: []string{"10.254.4.0"}, refused: "spec.clusterIPs[0] 10.254.4.0 is outside"},
		{name: "a second family outside", clusterIP: "10.254.3.40", clusterIPs: []string{"10.254.3.40", "fd00::42"},
			refused: "spec.clusterIPs[1] fd00::42 is outside"},
		{name: "clusterIP apart from clusterIPs", clusterIP: "10.96.0.88", clusterIPs: []string{"10.254.3.40"},
			refused: "spec.clusterIP 10.96.0.88 is outside"},
		{name: "clusterIP only, outside", clusterIP: "10.96.0.88", refused: "spec.clusterIP 10.96.0.88 is outside"},
		{name: "IPv4-mapped host address", clusterIP: "::ffff:10.96.0.88", clusterIPs: []string{"::ffff:10.96.0.88"}, refused: "spec.clusterIPs[0] ::ffff:10.96.0.88 is outside"},
		{name: "leading zeros", clusterIP: "010.254.003.040", clusterIPs: []string{"010.254.003.040"}, refused: "is outside"},
		{name: "not an address", clusterIP: "not-an-ip", clusterIPs: []string{"not-an-ip"}, refused: "spec.clusterIPs[0] not-an-ip is outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: trNS},
				Spec: corev1.ServiceSpec{ClusterIP: tt.clusterIP, ClusterIPs: tt.clusterIPs, Ports: []corev1.ServicePort{{Port: 80}}}}
			host, refused := tr.Service(s)
			if tt.refused == "" {
				if host == nil || refused != "" || host.Spec.ClusterIP != tt.clusterIP || !slices.Equal(host.Spec.ClusterIPs, tt.clusterIPs) {
					t.Errorf("copied %+v, refused %q; want a copy at %s", host, refused, tt.clusterIP)
				}
				return
			}
			if host != nil || !strings.Contains(refused, tt.refused) || !strings.Contains(refused, "10.254.3.0/24") {
				t.Errorf("copied %v, refused %q; want refused with %q, naming the range", host != nil, refused, tt.refused)
			}
		})
	}
}

func TestEndpointSliceCopy(t *testing.T) {
	tenant := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-abcde", Namespace: trNS, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.1.7"},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			Hostname:   ptr.To("web-0"),
			NodeName:   ptr.To(trNode),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Name: "web-0", Namespace: trNS},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	all := func(netip.Addr) bool { return true }
	host, dropped := testTranslator().EndpointSlice(tenant, hn("web"), all)
	if len(dropped) != 0 {
		t.Errorf("dropped %v", dropped)
	}
	if host.Labels[discoveryv1.LabelServiceName] != hn("web") || host.Labels[discoveryv1.LabelManagedBy] != managedBy {
		t.Errorf("labels %v: want the host Service's name and clustertree as manager", host.Labels)
	}
	e := host.Endpoints[0]
	if e.Addresses[0] != "10.244.1.7" || !*e.Conditions.Ready || *e.Hostname != "web-0" {
		t.Errorf("endpoint %+v: addresses, conditions and hostname kept", e)
	}
	if e.NodeName != nil || e.TargetRef != nil {
		t.Errorf("endpoint %+v: the tenant's node name and object reference mean nothing in the host", e)
	}
	if *host.Ports[0].Port != 8080 {
		t.Errorf("ports %+v", host.Ports)
	}

	// Only the tenant's own pods' addresses: its shared-node pods' and its lent nodes'.
	ours := Addresses{
		HostPods: []*corev1.Pod{{Status: corev1.PodStatus{PodIP: "10.244.1.7", PodIPs: []corev1.PodIP{{IP: "10.244.1.7"}}}}},
		Lent:     []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("172.30.0.12/32")},
	}
	mixed := tenant.DeepCopy()
	mixed.Endpoints = []discoveryv1.Endpoint{
		{Addresses: []string{"10.244.1.7"}},  // its pod on the shared node
		{Addresses: []string{"10.244.2.33"}}, // its pod on a lent node
		{Addresses: []string{"10.96.0.1"}},   // the host's apiserver Service
		{Addresses: []string{"10.244.1.9"}},  // another tenant's pod on the same host node
		{Addresses: []string{"172.30.0.1"}},  // the host's control plane
		{Addresses: []string{"::ffff:10.244.1.9"}},
	}
	host, dropped = testTranslator().EndpointSlice(mixed, hn("web"), ours.Contains)
	var kept []string
	for _, e := range host.Endpoints {
		kept = append(kept, e.Addresses...)
	}
	if !slices.Equal(kept, []string{"10.244.1.7", "10.244.2.33"}) || !slices.Equal(dropped, []string{"10.96.0.1", "10.244.1.9", "172.30.0.1", "::ffff:10.244.1.9"}) {
		t.Errorf("kept %v, dropped %v", kept, dropped)
	}
	fqdn := tenant.DeepCopy()
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	if host, _ := testTranslator().EndpointSlice(fqdn, hn("web"), all); host != nil {
		t.Errorf("an FQDN slice is copied: %+v", host)
	}
}

// TestAddresses: the endpoint addresses a tenant may have in the host are its pods' only.
func TestAddresses(t *testing.T) {
	pod := func(phase corev1.PodPhase, hostNetwork bool, ips ...string) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{HostNetwork: hostNetwork}, Status: corev1.PodStatus{Phase: phase}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		return p
	}
	ours := Addresses{
		HostPods: []*corev1.Pod{
			pod(corev1.PodRunning, false, "10.244.1.7", "fd00:244:1::7"),
			pod(corev1.PodPending, false),
			pod(corev1.PodSucceeded, false, "10.244.1.8"),       // done: its address may be another pod's now
			pod(corev1.PodFailed, false, "10.244.1.9"),          // likewise
			pod(corev1.PodRunning, true, "172.30.0.11"),         // on the host's network: its node's address
			pod(corev1.PodPending, false, "10.244.1.10"),        // an address, not running yet
			pod(corev1.PodRunning, false, "::ffff:10.244.1.11"), // written mapped
		},
		Lent: []netip.Prefix{netip.MustParsePrefix("10.244.7.0/24"), netip.MustParsePrefix("172.30.0.12/32"), netip.MustParsePrefix("10.0.5.3/32")},
	}
	tests := []struct {
		ip   string
		want bool
	}{
		{"10.244.1.7", true},    // its pod on the shared node
		{"fd00:244:1::7", true}, // and that pod's second family
		{"10.244.1.10", true},
		{"10.244.1.11", true},
		{"10.244.7.33", true},  // its pod on a lent node
		{"172.30.0.12", true},  // a lent node's own address
		{"10.0.5.3", true},     // its control-plane pod
		{"10.96.0.1", false},   // the host's apiserver Service
		{"172.30.0.1", false},  // the host's control plane
		{"10.244.1.66", false}, // another tenant's pod on the same host node
		{"10.244.1.8", false},
		{"10.244.1.9", false},
		{"172.30.0.11", false},
		{"10.244.8.1", false},
		{"0.0.0.0", false},
	}
	for _, tt := range tests {
		if got := ours.Contains(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("Contains(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
	if (Addresses{}).Contains(netip.MustParseAddr("10.244.1.7")) {
		t.Errorf("no pods and nothing lent: an address is the tenant's")
	}
}
