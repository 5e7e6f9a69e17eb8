package controlplane_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

func TestAPIServerService(t *testing.T) {
	tests := []struct {
		name         string
		exposure     v1alpha1.ExposureSpec
		wantType     corev1.ServiceType
		wantNodePort int32
	}{
		{name: "default", wantType: corev1.ServiceTypeClusterIP},
		{name: "ClusterIP", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureClusterIP}, wantType: corev1.ServiceTypeClusterIP},
		{name: "ClusterIP ignores a node port", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureClusterIP, NodePort: ptr.To[int32](31443)}, wantType: corev1.ServiceTypeClusterIP},
		{name: "NodePort picked by the host", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort}, wantType: corev1.ServiceTypeNodePort},
		{name: "NodePort fixed", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort, NodePort: ptr.To[int32](31443)}, wantType: corev1.ServiceTypeNodePort, wantNodePort: 31443},
		{name: "LoadBalancer", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureLoadBalancer}, wantType: corev1.ServiceTypeLoadBalancer},
		{name: "LoadBalancer with node port", exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureLoadBalancer, NodePort: ptr.To[int32](30001)}, wantType: corev1.ServiceTypeLoadBalancer, wantNodePort: 30001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vc := newVC(func(vc *v1alpha1.VirtualCluster) { vc.Spec.ControlPlane.Exposure = tt.exposure })
			svc := controlplane.APIServerService(vc)
			if svc.Name != "tenant-apiserver" || svc.Namespace != cpNS {
				t.Errorf("Service %s/%s, want %s/tenant-apiserver", svc.Namespace, svc.Name, cpNS)
			}
			if svc.Spec.Type != tt.wantType {
				t.Errorf("type = %q, want %q", svc.Spec.Type, tt.wantType)
			}
			if len(svc.Spec.Ports) != 1 {
				t.Fatalf("ports = %+v, want one", svc.Spec.Ports)
			}
			p := svc.Spec.Ports[0]
			if p.Port != controlplane.APIServerPort || p.NodePort != tt.wantNodePort || p.Protocol != corev1.ProtocolTCP {
				t.Errorf("port = %+v, want %d (node port %d)", p, controlplane.APIServerPort, tt.wantNodePort)
			}
			want := naming.For(vc.Name).Labels(naming.ComponentControlPlane)
			if len(svc.Spec.Selector) != len(want) || svc.Spec.Selector[naming.LabelComponent] != naming.ComponentControlPlane ||
				svc.Spec.Selector[naming.LabelVirtualCluster] != vc.Name {
				t.Errorf("selector = %v, want %v", svc.Spec.Selector, want)
			}
		})
	}
}

func TestEtcdServices(t *testing.T) {
	vc := newVC()
	peer := controlplane.EtcdPeerService(vc)
	if peer.Name != "tenant-etcd-peer" || peer.Spec.ClusterIP != corev1.ClusterIPNone || !peer.Spec.PublishNotReadyAddresses {
		t.Errorf("peer Service %s: clusterIP %q, publishNotReady %v; want headless, publishing unready members",
			peer.Name, peer.Spec.ClusterIP, peer.Spec.PublishNotReadyAddresses)
	}
	client := controlplane.EtcdClientService(vc)
	if client.Name != "tenant-etcd" || client.Spec.ClusterIP == corev1.ClusterIPNone || !client.Spec.PublishNotReadyAddresses {
		t.Errorf("client Service %s: clusterIP %q, publishNotReady %v; want a ClusterIP of every member that listens",
			client.Name, client.Spec.ClusterIP, client.Spec.PublishNotReadyAddresses)
	}
	if len(client.Spec.Ports) != 1 || client.Spec.Ports[0].Port != controlplane.EtcdClientPort {
		t.Errorf("client Service ports = %+v", client.Spec.Ports)
	}
	for _, svc := range []*corev1.Service{peer, client} {
		if svc.Spec.Selector[naming.LabelComponent] != naming.ComponentEtcd || svc.Spec.Selector[naming.LabelVirtualCluster] != vc.Name {
			t.Errorf("%s selector = %v, want the tenant's etcd pods", svc.Name, svc.Spec.Selector)
		}
	}
	// The StatefulSet's service name is the peer Service, which its pods' DNS names need.
	if sts := controlplane.EtcdStatefulSet(vc, controlplane.DefaultSettings(), ""); sts.Spec.ServiceName != peer.Name {
		t.Errorf("StatefulSet serviceName = %q, want %q", sts.Spec.ServiceName, peer.Name)
	}
}

func TestResolveExposure(t *testing.T) {
	vc := newVC()
	svc := func(typ corev1.ServiceType, nodePort int32, ingress ...corev1.LoadBalancerIngress) *corev1.Service {
		s := &corev1.Service{Spec: corev1.ServiceSpec{
			Type:      typ,
			ClusterIP: "10.96.0.20",
			Ports:     []corev1.ServicePort{{Port: controlplane.APIServerPort, NodePort: nodePort}},
		}}
		s.Status.LoadBalancer.Ingress = ingress
		return s
	}
	tests := []struct {
		name        string
		svc         *corev1.Service
		nodeAddress string
		want        controlplane.Exposure
		wantWaiting bool
	}{
		{
			name: "ClusterIP",
			svc:  svc(corev1.ServiceTypeClusterIP, 0),
			want: controlplane.Exposure{ClusterIP: "10.96.0.20", Endpoint: "https://tenant-apiserver.kubenest-cp-tenants.svc:6443"},
		},
		{
			name:        "ClusterIP ignores a node address",
			svc:         svc(corev1.ServiceTypeClusterIP, 0),
			nodeAddress: "192.0.2.10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20", Endpoint: "https://tenant-apiserver.kubenest-cp-tenants.svc:6443"},
		},
		{
			name:        "NodePort without a node address",
			svc:         svc(corev1.ServiceTypeNodePort, 31443),
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantWaiting: true,
		},
		{
			name:        "NodePort without an allocated port",
			svc:         svc(corev1.ServiceTypeNodePort, 0),
			nodeAddress: "192.0.2.10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantWaiting: true,
		},
		{
			name:        "NodePort without ports",
			svc:         &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.20"}},
			nodeAddress: "192.0.2.10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantWaiting: true,
		},
		{
			name:        "NodePort on IPv4",
			svc:         svc(corev1.ServiceTypeNodePort, 31443),
			nodeAddress: "192.0.2.10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "192.0.2.10", Endpoint: "https://192.0.2.10:31443"},
		},
		{
			name:        "NodePort on IPv6",
			svc:         svc(corev1.ServiceTypeNodePort, 31443),
			nodeAddress: "fd00::10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "fd00::10", Endpoint: "https://[fd00::10]:31443"},
		},
		{
			name:        "LoadBalancer without ingress",
			svc:         svc(corev1.ServiceTypeLoadBalancer, 30001),
			nodeAddress: "192.0.2.10",
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantWaiting: true,
		},
		{
			name:        "LoadBalancer with an empty ingress",
			svc:         svc(corev1.ServiceTypeLoadBalancer, 30001, corev1.LoadBalancerIngress{}),
			want:        controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantWaiting: true,
		},
		{
			name: "LoadBalancer with an IP",
			svc:  svc(corev1.ServiceTypeLoadBalancer, 30001, corev1.LoadBalancerIngress{IP: "203.0.113.7"}),
			want: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "203.0.113.7", Endpoint: "https://203.0.113.7:6443"},
		},
		{
			name: "LoadBalancer with a host name",
			svc:  svc(corev1.ServiceTypeLoadBalancer, 30001, corev1.LoadBalancerIngress{Hostname: "lb-1.elb.example.com"}),
			want: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "lb-1.elb.example.com", Endpoint: "https://lb-1.elb.example.com:6443"},
		},
		{
			name: "LoadBalancer with an IPv6 address",
			svc:  svc(corev1.ServiceTypeLoadBalancer, 30001, corev1.LoadBalancerIngress{IP: "2001:db8::7"}),
			want: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "2001:db8::7", Endpoint: "https://[2001:db8::7]:6443"},
		},
		{
			name: "LoadBalancer prefers the IP, skips empty ingresses",
			svc: svc(corev1.ServiceTypeLoadBalancer, 30001, corev1.LoadBalancerIngress{},
				corev1.LoadBalancerIngress{IP: "203.0.113.7", Hostname: "lb-1.elb.example.com"},
				corev1.LoadBalancerIngress{IP: "203.0.113.8"}),
			want: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "203.0.113.7", Endpoint: "https://203.0.113.7:6443"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := controlplane.ResolveExposure(vc, tt.svc, tt.nodeAddress)
			if tt.wantWaiting != (got.Waiting != "") {
				t.Errorf("Waiting = %q, want a message: %v", got.Waiting, tt.wantWaiting)
			}
			got.Waiting = ""
			if got != tt.want {
				t.Errorf("ResolveExposure = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPickNodeAddress(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	node := func(name string, created metav1.Time, ready corev1.ConditionStatus, addrs ...corev1.NodeAddress) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: created}}
		if ready != "" {
			n.Status.Conditions = []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: ready},
			}
		}
		n.Status.Addresses = addrs
		return n
	}
	internal := func(a string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
	}
	external := func(a string) corev1.NodeAddress {
		return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a}
	}
	hostname := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeHostName, Address: a} }
	unschedulable := func(n corev1.Node) corev1.Node { n.Spec.Unschedulable = true; return n }

	lending := func(n corev1.Node) corev1.Node {
		n.Spec.Unschedulable = true
		n.Annotations = map[string]string{v1alpha1.AnnotationCordoned: "true"}
		return n
	}

	tests := []struct {
		name    string
		nodes   []corev1.Node
		current string
		want    string
	}{
		{name: "no nodes", want: ""},
		{
			name: "the current address stays while its node is cordoned",
			nodes: []corev1.Node{
				node("a", t0, corev1.ConditionTrue, internal("10.0.0.1")),
				unschedulable(node("b", t1, corev1.ConditionTrue, internal("10.0.0.2"))),
			},
			current: "10.0.0.2",
			want:    "10.0.0.2",
		},
		{
			name: "the current address goes with its node being lent",
			nodes: []corev1.Node{
				node("a", t1, corev1.ConditionTrue, internal("10.0.0.1")),
				lending(node("b", t0, corev1.ConditionTrue, internal("10.0.0.2"))),
			},
			current: "10.0.0.2",
			want:    "10.0.0.1",
		},
		{
			name: "the current address goes with its node NotReady",
			nodes: []corev1.Node{
				node("a", t1, corev1.ConditionTrue, internal("10.0.0.1")),
				node("b", t0, corev1.ConditionFalse, internal("10.0.0.2")),
			},
			current: "10.0.0.2",
			want:    "10.0.0.1",
		},
		{
			name:    "an address no node has any more",
			nodes:   []corev1.Node{node("a", t1, corev1.ConditionTrue, internal("10.0.0.1"))},
			current: "10.0.0.9",
			want:    "10.0.0.1",
		},
		{name: "one ready node", nodes: []corev1.Node{node("a", t0, corev1.ConditionTrue, internal("10.0.0.1"))}, want: "10.0.0.1"},
		{
			name:  "external before internal",
			nodes: []corev1.Node{node("a", t0, corev1.ConditionTrue, hostname("a"), internal("10.0.0.1"), external("192.0.2.1"), external("192.0.2.2"))},
			want:  "192.0.2.1",
		},
		{
			name:  "first internal when no external",
			nodes: []corev1.Node{node("a", t0, corev1.ConditionTrue, hostname("a"), internal("10.0.0.1"), internal("10.0.0.2"))},
			want:  "10.0.0.1",
		},
		{
			name:  "empty external skipped",
			nodes: []corev1.Node{node("a", t0, corev1.ConditionTrue, external(""), internal("10.0.0.1"))},
			want:  "10.0.0.1",
		},
		{
			name: "skips NotReady",
			nodes: []corev1.Node{
				node("a", t0, corev1.ConditionFalse, internal("10.0.0.1")),
				node("b", t1, corev1.ConditionTrue, internal("10.0.0.2")),
			},
			want: "10.0.0.2",
		},
		{
			name: "skips unknown readiness and nodes without a Ready condition",
			nodes: []corev1.Node{
				node("a", t0, corev1.ConditionUnknown, internal("10.0.0.1")),
				node("b", t0, "", internal("10.0.0.2")),
				node("c", t1, corev1.ConditionTrue, internal("10.0.0.3")),
			},
			want: "10.0.0.3",
		},
		{
			name: "skips unschedulable",
			nodes: []corev1.Node{
				unschedulable(node("a", t0, corev1.ConditionTrue, internal("10.0.0.1"))),
				node("b", t1, corev1.ConditionTrue, internal("10.0.0.2")),
			},
			want: "10.0.0.2",
		},
		{
			name: "skips nodes without an address",
			nodes: []corev1.Node{
				node("a", t0, corev1.ConditionTrue, hostname("a")),
				node("b", t1, corev1.ConditionTrue, internal("10.0.0.2")),
			},
			want: "10.0.0.2",
		},
		{
			name: "oldest wins",
			nodes: []corev1.Node{
				node("a", t1, corev1.ConditionTrue, internal("10.0.0.1")),
				node("b", t0, corev1.ConditionTrue, internal("10.0.0.2")),
				node("c", t1, corev1.ConditionTrue, external("192.0.2.3")),
			},
			want: "10.0.0.2",
		},
		{
			name: "by name on a tie",
			nodes: []corev1.Node{
				node("c", t0, corev1.ConditionTrue, internal("10.0.0.3")),
				node("a", t0, corev1.ConditionTrue, internal("10.0.0.1")),
				node("b", t0, corev1.ConditionTrue, internal("10.0.0.2")),
			},
			want: "10.0.0.1",
		},
		{
			name: "none usable",
			nodes: []corev1.Node{
				node("a", t0, corev1.ConditionFalse, internal("10.0.0.1")),
				unschedulable(node("b", t0, corev1.ConditionTrue, internal("10.0.0.2"))),
				node("c", t0, corev1.ConditionTrue),
			},
			want: "",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := controlplane.PickNodeAddress(tt.nodes, tt.current); got != tt.want {
				t.Errorf("PickNodeAddress = %q, want %q", got, tt.want)
			}
			// The choice does not depend on the order the nodes are listed in.
			reversed := make([]corev1.Node, len(tt.nodes))
			for i, n := range tt.nodes {
				reversed[len(tt.nodes)-1-i] = n
			}
			if got := controlplane.PickNodeAddress(reversed, tt.current); got != tt.want {
				t.Errorf("PickNodeAddress of the reversed list = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWakeEndpointSlice(t *testing.T) {
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "tenants", UID: "u"}}
	for _, ip := range []string{"10.244.1.7", "fd00::7"} {
		s := controlplane.WakeEndpointSlice(vc, ip, 40123)
		// What the API server would refuse.
		for k, v := range s.Labels {
			if errs := validation.IsQualifiedName(k); len(errs) > 0 {
				t.Errorf("label key %q: %v", k, errs)
			}
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				t.Errorf("label %s value %q: %v", k, v, errs)
			}
		}
		// Next to the apiserver Service, in the control-plane namespace.
		if s.Labels[discoveryv1.LabelServiceName] != "team-a-apiserver" || s.Namespace != "kubenest-cp-tenants" ||
			s.Namespace != controlplane.APIServerService(vc).Namespace {
			t.Errorf("slice %s/%s labels %v: not the apiserver Service's", s.Namespace, s.Name, s.Labels)
		}
		want := discoveryv1.AddressTypeIPv4
		if ip == "fd00::7" {
			want = discoveryv1.AddressTypeIPv6
		}
		svcPort := controlplane.APIServerService(vc).Spec.Ports[0]
		if s.AddressType != want || *s.Ports[0].Port != 40123 || *s.Ports[0].Name != svcPort.Name || s.Endpoints[0].Addresses[0] != ip {
			t.Errorf("slice for %s: %+v", ip, s)
		}
	}
}

// TestNamespace: a new tenant's control plane goes to KubeNest's namespace for its namespace;
// only one an earlier release made, as its status says, stays in its own; no other value of
// the status is ever used.
func TestNamespace(t *testing.T) {
	ready := []metav1.Condition{{Type: v1alpha1.ConditionAPIServerReady, Status: metav1.ConditionTrue, Reason: "Ready"}}
	for _, tt := range []struct {
		name   string
		status v1alpha1.VirtualClusterStatus
		want   string
	}{
		{"new: empty status", v1alpha1.VirtualClusterStatus{}, cpNS},
		{"new, status written", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: cpNS, Conditions: ready}, cpNS},
		{"an earlier release's, status written", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: vcNS, Conditions: ready}, vcNS},
		{"an earlier release's, status written, no conditions", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: vcNS}, vcNS},
		{"an earlier release's, before the operator wrote the field", v1alpha1.VirtualClusterStatus{Conditions: ready}, vcNS},
		{"another namespace", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: "kube-system"}, cpNS},
		{"another namespace, with conditions", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: "kube-system", Conditions: ready}, cpNS},
		{"another namespace's control-plane namespace", v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: "kubenest-cp-others", Conditions: ready}, cpNS},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vc := newVC(func(vc *v1alpha1.VirtualCluster) { vc.Status = tt.status })
			if got := controlplane.Namespace(vc); got != tt.want {
				t.Errorf("Namespace = %q, want %q", got, tt.want)
			}
		})
	}
	if got := naming.ControlPlaneNamespace(vcNS); got != cpNS {
		t.Errorf("naming.ControlPlaneNamespace(%q) = %q, want %q", vcNS, got, cpNS)
	}
	// The longest namespace name still has a control-plane namespace of its own, a valid
	// namespace name.
	long := strings.Repeat("n", validation.DNS1123LabelMaxLength)
	vc := newVC(func(vc *v1alpha1.VirtualCluster) { vc.Namespace = long })
	got := controlplane.Namespace(vc)
	if errs := validation.IsDNS1123Label(got); len(errs) > 0 || got == long || !strings.HasPrefix(got, naming.ControlPlaneNamespacePrefix) {
		t.Errorf("Namespace of a tenant of namespace %s = %q: %v", long, got, errs)
	}
	if other := naming.ControlPlaneNamespace(long[1:]); other == got {
		t.Errorf("namespaces %s and %s share the control-plane namespace %s", long, long[1:], got)
	}
}
