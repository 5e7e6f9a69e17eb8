package controlplane

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// EtcdPeerService is the headless Service that gives each etcd member a DNS name
// (<pod>.<service>.<namespace>.svc) before it is ready, so members can find each other.
func EtcdPeerService(vc *v1alpha1.VirtualCluster) *corev1.Service {
	names := naming.For(vc.Name)
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: objectMeta(vc, names.EtcdPeerService(), naming.ComponentEtcd),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 names.Labels(naming.ComponentEtcd),
			Ports: []corev1.ServicePort{
				servicePort("client", EtcdClientPort),
				servicePort("peer", EtcdPeerPort),
			},
		},
	}
}

// EtcdClientService is the Service the apiserver reaches etcd through. It publishes members
// that are not Ready yet: a member accepts connections as soon as it listens and answers them
// once it has joined the cluster, so the apiserver, which starts alongside etcd, connects
// without waiting for etcd's readiness probe, the EndpointSlice update and its client's
// back-off (about 2 s of a tenant's creation). A member that is not listening refuses the
// connection, and the client tries again.
func EtcdClientService(vc *v1alpha1.VirtualCluster) *corev1.Service {
	names := naming.For(vc.Name)
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: objectMeta(vc, names.EtcdClientService(), naming.ComponentEtcd),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			PublishNotReadyAddresses: true,
			Selector:                 names.Labels(naming.ComponentEtcd),
			Ports:                    []corev1.ServicePort{servicePort("client", EtcdClientPort)},
		},
	}
}

// APIServerService publishes the tenant's apiserver as the VirtualCluster's exposure asks.
func APIServerService(vc *v1alpha1.VirtualCluster) *corev1.Service {
	names := naming.For(vc.Name)
	exp := vc.Spec.ControlPlane.Exposure
	port := servicePort("https", APIServerPort)
	typ := corev1.ServiceType(exp.Type)
	if typ == "" {
		typ = corev1.ServiceTypeClusterIP
	}
	if typ != corev1.ServiceTypeClusterIP && exp.NodePort != nil {
		port.NodePort = *exp.NodePort
	}
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: objectMeta(vc, names.APIServerService(), naming.ComponentControlPlane),
		Spec: corev1.ServiceSpec{
			Type:     typ,
			Selector: names.Labels(naming.ComponentControlPlane),
			Ports:    []corev1.ServicePort{port},
		},
	}
}

// WakeEndpointSlice leads the apiserver Service, with its selector removed, to the operator's
// wake gateway at ip:port while the tenant sleeps (see package wakegate).
func WakeEndpointSlice(vc *v1alpha1.VirtualCluster, ip string, port int32) *discoveryv1.EndpointSlice {
	names := naming.For(vc.Name)
	meta := objectMeta(vc, names.APIServerService()+"-wake", naming.ComponentControlPlane)
	meta.Labels[discoveryv1.LabelServiceName] = names.APIServerService()
	meta.Labels[discoveryv1.LabelManagedBy] = WakeSliceManager
	addressType := discoveryv1.AddressTypeIPv4
	if net.ParseIP(ip).To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		TypeMeta:    typeMeta("discovery.k8s.io/v1", "EndpointSlice"),
		ObjectMeta:  meta,
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
}

// WakeSliceManager manages the wake gateway's EndpointSlices (their managed-by label).
const WakeSliceManager = "wake-gateway.kubenest.io"

// ResolveExposure reads where the apiserver Service was published. nodeAddress is a host
// node's address for a NodePort Service (see PickNodeAddress); svc is the Service as the host
// cluster returned it, with its ClusterIP, node port and load-balancer status filled in.
func ResolveExposure(vc *v1alpha1.VirtualCluster, svc *corev1.Service, nodeAddress string) Exposure {
	exp := Exposure{ClusterIP: svc.Spec.ClusterIP}
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
		if nodeAddress == "" {
			exp.Waiting = "no host node has an address to reach the NodePort on"
			return exp
		}
		if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
			exp.Waiting = "the host has not allocated a node port yet"
			return exp
		}
		exp.Address = nodeAddress
		exp.Endpoint = httpsURL(nodeAddress, svc.Spec.Ports[0].NodePort)
	case corev1.ServiceTypeLoadBalancer:
		for _, in := range svc.Status.LoadBalancer.Ingress {
			addr := in.IP
			if addr == "" {
				addr = in.Hostname
			}
			if addr != "" {
				exp.Address = addr
				exp.Endpoint = httpsURL(addr, APIServerPort)
				return exp
			}
		}
		exp.Waiting = "the host's load balancer has not published an address yet"
	default:
		exp.Endpoint = InClusterEndpoint(vc)
	}
	return exp
}

// PickNodeAddress chooses the host node address a NodePort endpoint uses. The current one
// stays while its node is Ready and not being lent: a cordon for maintenance must not move the
// endpoint, which every kubeconfig already handed out names and the serving certificate is
// issued for. Otherwise it is the first address, ExternalIP before InternalIP, of the oldest
// Ready and schedulable node (by name on a tie).
func PickNodeAddress(nodes []corev1.Node, current string) string {
	var best *corev1.Node
	for i := range nodes {
		n := &nodes[i]
		if !nodeReady(n) || nodeAddress(n) == "" {
			continue
		}
		if current != "" && nodeAddress(n) == current && n.Annotations[v1alpha1.AnnotationCordoned] == "" {
			return current
		}
		if n.Spec.Unschedulable {
			continue
		}
		if best == nil || n.CreationTimestamp.Before(&best.CreationTimestamp) ||
			(n.CreationTimestamp.Equal(&best.CreationTimestamp) && n.Name < best.Name) {
			best = n
		}
	}
	if best == nil {
		return ""
	}
	return nodeAddress(best)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeAddress(n *corev1.Node) string {
	for _, t := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

func httpsURL(host string, port int32) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
}

func servicePort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{
		Name:       name,
		Protocol:   corev1.ProtocolTCP,
		Port:       port,
		TargetPort: intstr.FromString(name),
	}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// Namespace is the host namespace of vc's control plane: KubeNest's own (see
// naming.ControlPlaneNamespace), or vc's own namespace for a VirtualCluster an earlier release
// made: status.controlPlaneNamespace says so, or, before the operator first wrote it, a status
// without it. Only the operator writes the status; no other value is ever used.
func Namespace(vc *v1alpha1.VirtualCluster) string {
	switch cp := vc.Status.ControlPlaneNamespace; {
	case vc.Namespace == "":
	case cp == vc.Namespace, cp == "" && len(vc.Status.Conditions) > 0:
		return vc.Namespace
	}
	return naming.ControlPlaneNamespace(vc.Namespace)
}

// objectMeta names an object of vc's control plane and labels it. In vc's own namespace
// vc is its controlling owner, so that the host's garbage collector removes it with vc; in
// the control-plane namespace (where an owner in another namespace would count as absent) it
// names vc's namespace by label, and the operator removes it when vc goes.
func objectMeta(vc *v1alpha1.VirtualCluster, name, component string) metav1.ObjectMeta {
	ns := Namespace(vc)
	if ns == vc.Namespace {
		return tenantObjectMeta(vc, name, component)
	}
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: memberLabels(vc, component)}
}

// tenantObjectMeta names an object in vc's own namespace (its admin kubeconfig), labels it and
// makes vc its controlling owner.
func tenantObjectMeta(vc *v1alpha1.VirtualCluster, name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:      name,
		Namespace: vc.Namespace,
		Labels:    naming.For(vc.Name).Labels(component),
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion:         v1alpha1.GroupVersion.String(),
			Kind:               "VirtualCluster",
			Name:               vc.Name,
			UID:                vc.UID,
			Controller:         ptr.To(true),
			BlockOwnerDeletion: ptr.To(true),
		}},
	}
}
