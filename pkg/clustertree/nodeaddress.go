package clustertree

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	discoveryclient "k8s.io/client-go/kubernetes/typed/discovery/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/iphold"
	"github.com/kubenest-io/kubenest/internal/nodeports"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// The shared node's address. A node's InternalIP is where the tenant's NodePort Services
// answer, and where its apiserver reaches its kubelet API. The shared node is not a machine,
// and the operator's pod, which serves its kubelet API, is every tenant's: its address cannot
// hold one tenant's NodePorts. So the shared node's address is a ClusterIP of the tenant's own
// Service range (SharedNodeAddress), held in the tenant by the Service
// kube-system/kubenest-shared-node (sharednode.AddressService) so that its apiserver gives it
// to no other Service, and kept by clustertree with the same ports and endpoints in the host
// (where the tenant's pods on the shared node and its apiserver are) and in the tenant (whose
// kube-proxy serves its lent nodes):
//   - port "kubelet" (10250) leads to the virtual node's kubelet API, on the operator's pod;
//   - each NodePort ("tcp-30080") leads to the same port of the tenant's control-plane pods,
//     where nest-controlplane controllers passes it on to the Service's ClusterIP
//     (package nodeports), so the Service's own routing and session affinity apply.
//
// What the tenant writes is never an endpoint: the ports come from its Services' NodePorts
// (those that would lead to a port a control-plane container uses for itself are left out),
// the endpoints from what clustertree holds (its own listener, the control-plane pods in the
// host), and a tenant edit of these objects is undone.

// The kubelet API's port at the node's address: a kubelet's usual one, which tools (and the
// conformance suite's node proxy) assume, whichever port the operator's listener has.
const (
	kubeletPortName = "kubelet"
	KubeletPort     = 10250
)

var sharedNodeKey = cache.ObjectName{Namespace: sharednode.AddressServiceNamespace, Name: sharednode.AddressService}

// SharedNodeAddress is the shared node's address in a tenant whose Service range is cidr: its
// second address (the first is the "kubernetes" Service's). The apiserver gives Services
// addresses from the upper part of a range first, so a tenant Service has it only when the
// tenant asked for it.
func SharedNodeAddress(cidr netip.Prefix) netip.Addr {
	return cidr.Masked().Addr().Next().Next()
}

// nodeAddress keeps the shared node's address Service in the host and in the tenant.
type nodeAddress struct {
	tr           Translator
	owner        metav1.OwnerReference
	addr         netip.Addr
	kubelet      netip.AddrPort
	host, tenant kubernetes.Interface
	held         *iphold.Range                        // the tenant's Service range in the host
	services     corelisters.ServiceLister            // the tenant's
	tenantSlices discoverylisters.EndpointSliceLister // the tenant's
	controlPlane corelisters.PodLister                // the tenant's control-plane pods in the host
	log          klog.Logger
	// skipped are the NodePorts left out, with why, as last said.
	skipped string
}

// reserve makes sure the tenant's Service holds the shared node's address; an error says the
// address cannot be the node's.
func (n *nodeAddress) reserve(ctx context.Context) error {
	current, err := hostService(ctx, n.tenant, sharedNodeKey.Namespace, sharedNodeKey.Name)
	if err != nil {
		return err
	}
	_, err = applyService(ctx, n.tenant, nil, current, n.service(nil))
	return err
}

// sync makes the Service and its EndpointSlices what they should be, in the host (read from
// its API) and in the tenant (read from the mirror's caches).
func (n *nodeAddress) sync(ctx context.Context) error {
	list, err := n.services.List(labels.Everything())
	if err != nil {
		return err
	}
	targets, _ := nodeports.Targets(list, n.tr.ServiceCIDR)
	pods, err := n.controlPlane.List(labels.Everything())
	if err != nil {
		return err
	}
	ports, skipped := nodePorts(targets, pods)
	if skipped != n.skipped && skipped != "" {
		n.log.Info("NodePorts not served at the shared node's address", "skipped", skipped)
	}
	n.skipped = skipped
	endpoints := controlPlaneEndpoints(pods)

	want := n.service(ports)
	want.ObjectMeta = n.tr.Object(want.ObjectMeta)
	want.OwnerReferences = []metav1.OwnerReference{n.owner}
	current, err := hostService(ctx, n.host, want.Namespace, want.Name)
	if err != nil {
		return err
	}
	if current != nil && current.Labels[LabelOrigin] != OriginClusterTree {
		return fmt.Errorf("host Service %s exists and is not clustertree's; not touching it", want.Name)
	}
	hostSvc, err := applyService(ctx, n.host, n.held, current, want)
	if err != nil {
		return err
	}
	currentSlices, err := hostSlices(ctx, n.host, hostSvc.Namespace, hostSvc.Name)
	if err != nil {
		return err
	}
	if err := applySlices(ctx, n.host.DiscoveryV1().EndpointSlices(hostSvc.Namespace), currentSlices, n.slices(hostSvc, ports, endpoints)); err != nil {
		return fmt.Errorf("the shared node's address in the host: %w", err)
	}

	current, err = n.services.Services(sharedNodeKey.Namespace).Get(sharedNodeKey.Name)
	if apierrors.IsNotFound(err) {
		current = nil
	} else if err != nil {
		return err
	}
	tenantSvc, err := applyService(ctx, n.tenant, nil, current, n.service(ports))
	if err != nil {
		return err
	}
	if currentSlices, err = n.tenantSlices.EndpointSlices(sharedNodeKey.Namespace).List(managedSlices(sharedNodeKey.Name)); err != nil {
		return err
	}
	if err := applySlices(ctx, n.tenant.DiscoveryV1().EndpointSlices(sharedNodeKey.Namespace), currentSlices, n.slices(tenantSvc, ports, endpoints)); err != nil {
		return fmt.Errorf("the shared node's address in the tenant: %w", err)
	}
	return nil
}

// service is the address's Service with ports (the kubelet's and the NodePorts).
func (n *nodeAddress) service(nodePorts []corev1.ServicePort) *corev1.Service {
	ports := append([]corev1.ServicePort{{Name: kubeletPortName, Protocol: corev1.ProtocolTCP,
		Port: KubeletPort, TargetPort: intstr.FromInt32(int32(n.kubelet.Port()))}}, nodePorts...)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: sharedNodeKey.Namespace, Name: sharedNodeKey.Name},
		Spec: corev1.ServiceSpec{
			Type:      corev1.ServiceTypeClusterIP,
			ClusterIP: n.addr.String(), ClusterIPs: []string{n.addr.String()},
			Ports: ports,
			// A client stays with one control-plane pod, so a NodePort Service's own session
			// affinity, applied there, holds with several.
			SessionAffinity: corev1.ServiceAffinityClientIP,
		},
	}
}

// slices are the EndpointSlices of svc, the address's Service on one side: the kubelet API at clustertree's
// listener, the NodePorts at the control-plane pods.
func (n *nodeAddress) slices(svc *corev1.Service, ports []corev1.ServicePort, controlPlane []discoveryv1.Endpoint) []*discoveryv1.EndpointSlice {
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}
	slice := func(name string, eps []discoveryv1.Endpoint, ports []discoveryv1.EndpointPort) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{owner},
				Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: managedBy}},
			AddressType: addressType(n.addr),
			Endpoints:   eps,
			Ports:       ports,
		}
	}
	out := []*discoveryv1.EndpointSlice{slice(AddressSliceName(svc.Name, sharednode.SliceSuffixKubelet),
		[]discoveryv1.Endpoint{{Addresses: []string{n.kubelet.Addr().String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		[]discoveryv1.EndpointPort{{Name: ptr.To(kubeletPortName), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(n.kubelet.Port()))}})}
	if len(ports) > 0 && len(controlPlane) > 0 {
		eps := make([]discoveryv1.EndpointPort, 0, len(ports))
		for _, p := range ports {
			eps = append(eps, discoveryv1.EndpointPort{Name: ptr.To(p.Name), Protocol: ptr.To(p.Protocol), Port: ptr.To(p.Port)})
		}
		out = append(out, slice(AddressSliceName(svc.Name, sharednode.SliceSuffixNodePorts), controlPlane, eps))
	}
	return out
}

// AddressSliceName is the name of the address Service svc's EndpointSlice of one kind (a
// sharednode.SliceSuffix*): sharednode.AddressSliceKubelet and AddressSliceNodePorts in the
// tenant (svc is sharednode.AddressService); in the host, after the Service's host name, so
// that two tenants of one host namespace keep theirs apart, with a third "-x-" part, which
// HostName never gives a name, so that no copy of a tenant's EndpointSlice takes it.
func AddressSliceName(svc, suffix string) string {
	if svc == sharednode.AddressService {
		return svc + suffix
	}
	return naming.Shorten(svc+"-x"+suffix, naming.MaxLength)
}

func addressType(a netip.Addr) discoveryv1.AddressType {
	if a.Is4() {
		return discoveryv1.AddressTypeIPv4
	}
	return discoveryv1.AddressTypeIPv6
}

// nodePorts are the Service ports of the tenant's NodePorts, in order, and which were left out
// and why: those that are a port a control-plane container declares (the NodePort would lead
// to that container) or the kubelet API's.
func nodePorts(targets map[nodeports.Key]nodeports.Target, controlPlane []*corev1.Pod) ([]corev1.ServicePort, string) {
	used := map[nodeports.Key]bool{{Protocol: corev1.ProtocolTCP, Port: KubeletPort}: true}
	for _, pod := range controlPlane {
		for _, c := range pod.Spec.Containers {
			for _, p := range c.Ports {
				used[nodeports.Key{Protocol: cmpOr(p.Protocol, corev1.ProtocolTCP), Port: p.ContainerPort}] = true
			}
		}
	}
	keys := slices.SortedFunc(maps.Keys(targets), func(a, b nodeports.Key) int {
		return strings.Compare(a.String(), b.String())
	})
	var out []corev1.ServicePort
	var skipped []string
	for _, k := range keys {
		if used[k] {
			skipped = append(skipped, fmt.Sprintf("%s of %s (a port of the control plane)", k, targets[k].Service))
			continue
		}
		out = append(out, corev1.ServicePort{Name: fmt.Sprintf("%s-%d", strings.ToLower(string(k.Protocol)), k.Port),
			Protocol: k.Protocol, Port: k.Port, TargetPort: intstr.FromInt32(k.Port)})
	}
	return out, strings.Join(skipped, ", ")
}

func cmpOr[T comparable](v, or T) T {
	var zero T
	if v == zero {
		return or
	}
	return v
}

// controlPlaneEndpoints are the endpoints of the control-plane pods that run, ready as the pods
// are, in a stable order.
func controlPlaneEndpoints(pods []*corev1.Pod) []discoveryv1.Endpoint {
	var out []discoveryv1.Endpoint
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		out = append(out, discoveryv1.Endpoint{Addresses: []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(podutils.IsPodReady(p))}})
	}
	slices.SortFunc(out, func(a, b discoveryv1.Endpoint) int { return strings.Compare(a.Addresses[0], b.Addresses[0]) })
	return out
}

// applyService creates want, or makes current (nil: there is none) have want's ports,
// session affinity and ClusterIP (made again when it has another), and returns the Service.
// held, in the host, is the tenant's Service range whose addresses the host holds: a ClusterIP
// is released just before a Service takes it, and held again when its Service goes.
func applyService(ctx context.Context, client kubernetes.Interface, held *iphold.Range, current, want *corev1.Service) (*corev1.Service, error) {
	services := client.CoreV1().Services(want.Namespace)
	if current != nil && current.Spec.ClusterIP != want.Spec.ClusterIP {
		if err := deleteService(ctx, client, held, current); err != nil {
			return nil, err
		}
		current = nil
	}
	switch {
	case current == nil:
		created, err := createService(ctx, client, held, want)
		if err != nil {
			return nil, fmt.Errorf("creating Service %s/%s: %w", want.Namespace, want.Name, err)
		}
		return created, nil
	case equality.Semantic.DeepEqual(current.Spec.Ports, want.Spec.Ports) && current.Spec.SessionAffinity == want.Spec.SessionAffinity &&
		len(current.Spec.Selector) == 0:
		return current, nil
	}
	update := current.DeepCopy()
	update.Spec.Ports, update.Spec.SessionAffinity, update.Spec.Selector = want.Spec.Ports, want.Spec.SessionAffinity, nil
	updated, err := services.Update(ctx, update, metav1.UpdateOptions{FieldManager: fieldManager})
	if err != nil {
		return nil, fmt.Errorf("updating Service %s/%s: %w", want.Namespace, want.Name, err)
	}
	return updated, nil
}

// createService creates want, first releasing its ClusterIP from held (nil: nothing is held).
// The operator holds every free address of the range again on each pass over the tenant, from
// its cache (package iphold): a pass between the release and the create takes the address back
// and the create is refused as already allocated. Such a hold is released and the create tried
// again within a second, a few times, rather than after the work queue's growing back-off; an
// address that no hold of the range has (another Service's) is refused at once, as before.
func createService(ctx context.Context, client kubernetes.Interface, held *iphold.Range, want *corev1.Service) (*corev1.Service, error) {
	create := func() (*corev1.Service, error) {
		return client.CoreV1().Services(want.Namespace).Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
	}
	ip, err := netip.ParseAddr(want.Spec.ClusterIP)
	if err != nil || held == nil {
		return create()
	}
	if _, err := held.Release(ctx, ip); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		created, err := create()
		if err == nil || attempt == createAttempts || !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "already allocated") {
			return created, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
		released, relErr := held.Release(ctx, ip)
		if relErr != nil {
			return nil, relErr
		}
		if !released {
			return nil, err
		}
	}
}

// createAttempts is how many times createService releases an address and creates the Service
// that takes it.
const createAttempts = 4

// deleteService deletes svc and holds its ClusterIP again in held (nil: nothing is held).
func deleteService(ctx context.Context, client kubernetes.Interface, held *iphold.Range, svc *corev1.Service) error {
	if err := client404(client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{})); err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && held != nil {
		return held.Hold(ctx, ip)
	}
	return nil
}

// applySlices makes current, the EndpointSlices of a Service that clustertree manages, the
// slices want: creates, updates, deletes.
func applySlices(ctx context.Context, client discoveryclient.EndpointSliceInterface, current []*discoveryv1.EndpointSlice, want []*discoveryv1.EndpointSlice) error {
	have := map[string]*discoveryv1.EndpointSlice{}
	for _, c := range current {
		have[c.Name] = c
	}
	for _, w := range want {
		cur, ok := have[w.Name]
		delete(have, w.Name)
		var err error
		switch {
		case !ok:
			_, err = client.Create(ctx, w, metav1.CreateOptions{FieldManager: fieldManager})
		case !equality.Semantic.DeepEqual(cur.Endpoints, w.Endpoints) || !equality.Semantic.DeepEqual(cur.Ports, w.Ports) ||
			!maps.Equal(cur.Labels, w.Labels):
			update := cur.DeepCopy()
			update.Endpoints, update.Ports, update.Labels = w.Endpoints, w.Ports, w.Labels
			_, err = client.Update(ctx, update, metav1.UpdateOptions{FieldManager: fieldManager})
		}
		if err != nil {
			return fmt.Errorf("EndpointSlice %s: %w", w.Name, err)
		}
	}
	for name := range have {
		if err := client404(client.Delete(ctx, name, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	return nil
}

// managedSlices selects the EndpointSlices of Service svc that clustertree manages.
func managedSlices(svc string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svc, discoveryv1.LabelManagedBy: managedBy})
}

// hostService and hostSlices read a Service (nil: none) and its managed EndpointSlices from
// the host's API.
func hostService(ctx context.Context, client kubernetes.Interface, ns, name string) (*corev1.Service, error) {
	svc, err := client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return svc, err
}

func hostSlices(ctx context.Context, client kubernetes.Interface, ns, svc string) ([]*discoveryv1.EndpointSlice, error) {
	list, err := client.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: managedSlices(svc).String()})
	if err != nil {
		return nil, err
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}
