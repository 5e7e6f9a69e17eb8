package clustertree

import (
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

	host, ok := tr.Service(svc(nil))
	if !ok {
		t.Fatal("a ClusterIP Service is not copied")
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
		"the tenant's kubernetes Service": svc(func(s *corev1.Service) { s.Namespace, s.Name = metav1.NamespaceDefault, "kubernetes" }),
	} {
		if _, ok := tr.Service(s); ok {
			t.Errorf("%s: copied, want no copy (the tenant's DNS or the apiserver's own Service serve it)", name)
		}
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
	host := testTranslator().EndpointSlice(tenant, hn("web"))
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
}
