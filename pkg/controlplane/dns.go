package controlplane

import (
	"net"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/naming"
)

// The tenant's cluster DNS: CoreDNS (its kubernetes plugin reading the tenant's API) in every
// control-plane pod, published in the tenant as kube-system/kube-dns, a Service without a
// selector whose EndpointSlice the operator keeps pointing at the control-plane pods. Tenant
// pods reach it at the tenth address of the tenant's Service range, wherever they run.
const (
	ContainerDNS = "coredns"
	// DNSPort is where CoreDNS listens in the pod: unprivileged, so it needs no capability.
	// The Service maps port 53 to it.
	DNSPort = 5353
	// DNSServiceName and DNSServiceNamespace are the usual names of cluster DNS.
	DNSServiceName      = "kube-dns"
	DNSServiceNamespace = "kube-system"
	// dnsEndpointSliceName is the EndpointSlice the operator writes for it.
	dnsEndpointSliceName = "kube-dns-kubenest"
	// dnsManagedBy marks that EndpointSlice as the operator's, not the tenant's controllers'.
	dnsManagedBy = "operator.kubenest.io"
)

// corefile is the tenant CoreDNS's configuration: the tenant's cluster.local from its API
// (reached in the same pod), everything else forwarded to the host's resolver.
func corefile() string {
	return `.:5353 {
    errors
    kubernetes ` + TenantClusterDomain + ` in-addr.arpa ip6.arpa {
        kubeconfig ` + PKIDir + `/` + KeyDNSKubeconfig + `
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    forward . /etc/resolv.conf
    cache 5
}
`
}

func dnsContainer(s Settings, mounts []corev1.VolumeMount) corev1.Container {
	return corev1.Container{
		Name:            ContainerDNS,
		Image:           s.DNSImage,
		ImagePullPolicy: s.ImagePullPolicy,
		Args:            []string{"-conf", PKIDir + "/" + KeyCorefile},
		// CoreDNS starts once the apiserver in the same pod is ready (cmd/nest-dns): before,
		// its watches back off and it answers SERVFAIL for names it does not know yet.
		Env: []corev1.EnvVar{{Name: "NEST_DNS_WAIT_FOR_APISERVER", Value: PKIDir + "/" + KeyDNSKubeconfig}},
		Ports: []corev1.ContainerPort{
			{Name: "dns", ContainerPort: DNSPort, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", ContainerPort: DNSPort, Protocol: corev1.ProtocolTCP},
		},
		Resources:       withDefaultRequests(corev1.ResourceRequirements{}, "5m", "16Mi"),
		SecurityContext: containerSecurityContext(),
		VolumeMounts:    mounts,
	}
}

// TenantDNSService is the tenant's kube-system/kube-dns: no selector, since its endpoints are
// host pods the tenant does not know (see TenantDNSEndpointSlice).
func TenantDNSService(ip net.IP) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: metav1.ObjectMeta{Name: DNSServiceName, Namespace: DNSServiceNamespace, Labels: dnsLabels()},
		Spec: corev1.ServiceSpec{
			ClusterIP:  ip.String(),
			ClusterIPs: []string{ip.String()},
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(DNSPort)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(DNSPort)},
			},
		},
	}
}

// TenantDNSEndpointSlice points kube-dns at the control-plane pods' addresses (sorted, so an
// unchanged set is an unchanged object).
func TenantDNSEndpointSlice(podIPs []string) *discoveryv1.EndpointSlice {
	ips := slices.Sorted(slices.Values(podIPs))
	eps := make([]discoveryv1.Endpoint, 0, len(ips))
	for _, ip := range ips {
		eps = append(eps, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	labels := dnsLabels()
	labels[discoveryv1.LabelServiceName] = DNSServiceName
	labels[discoveryv1.LabelManagedBy] = dnsManagedBy
	return &discoveryv1.EndpointSlice{
		TypeMeta:    typeMeta("discovery.k8s.io/v1", "EndpointSlice"),
		ObjectMeta:  metav1.ObjectMeta{Name: dnsEndpointSliceName, Namespace: DNSServiceNamespace, Labels: labels},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("dns"), Port: ptr.To[int32](DNSPort), Protocol: ptr.To(corev1.ProtocolUDP)},
			{Name: ptr.To("dns-tcp"), Port: ptr.To[int32](DNSPort), Protocol: ptr.To(corev1.ProtocolTCP)},
		},
	}
}

func dnsLabels() map[string]string {
	return map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS", naming.LabelManagedBy: naming.ManagedByValue}
}
