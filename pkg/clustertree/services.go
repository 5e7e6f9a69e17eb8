package clustertree

import (
	"context"
	"fmt"
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
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/kubenest-io/kubenest/internal/iphold"
)

// Tenant Services in the host. Pods on the shared node are host pods, so the tenant's Services
// must work in the host's data plane: each tenant Service with a ClusterIP gets a host copy with
// the same ClusterIP (the tenant's Service range is registered in the host as a ServiceCIDR)
// and no selector, and the tenant's EndpointSlices are copied next to it. The endpoints are
// tenant pod IPs, which are host pod IPs on the shared node and routable pod IPs on lent nodes,
// so one copy serves pods wherever they run. Headless and ExternalName Services need no copy:
// the tenant's DNS answers them.

// managedBy marks host EndpointSlices as clustertree's, so the host's controllers leave them.
const managedBy = "clustertree.kubenest.io"

// Service translates a tenant Service into its host copy; nil when it needs none or may have
// none, refused saying why for the latter. A copy takes the tenant's ClusterIPs in the host, so
// it is made only when every one is in the tenant's own Service range: any other address is
// the host's or another tenant's (the tenant's apiserver refuses them too; this does not rely
// on it). Without a range, nothing is copied (and nothing refused: there is nothing to say to
// the tenant).
func (t Translator) Service(tenant *corev1.Service) (copied *corev1.Service, refused string) {
	if !t.ServiceCIDR.IsValid() || tenant.Spec.Type == corev1.ServiceTypeExternalName || tenant.Spec.ClusterIP == "" ||
		tenant.Spec.ClusterIP == corev1.ClusterIPNone {
		return nil, ""
	}
	// The apiserver keeps clusterIP the first of clusterIPs; both are copied, so both are looked at.
	var fields, ips []string
	for i, ip := range tenant.Spec.ClusterIPs {
		fields, ips = append(fields, fmt.Sprintf("spec.clusterIPs[%d]", i)), append(ips, ip)
	}
	if !slices.Contains(ips, tenant.Spec.ClusterIP) {
		fields, ips = append(fields, "spec.clusterIP"), append(ips, tenant.Spec.ClusterIP)
	}
	for i, ip := range ips {
		// Unmap: an IPv4-mapped IPv6 address is the IPv4 address to the host.
		if addr, err := netip.ParseAddr(ip); err != nil || !t.ServiceCIDR.Contains(addr.Unmap()) {
			return nil, fmt.Sprintf("%s %s is outside this tenant's Service range %s: the Service is not reachable from pods on the shared node", fields[i], ip, t.ServiceCIDR)
		}
	}
	ports := make([]corev1.ServicePort, 0, len(tenant.Spec.Ports))
	for _, p := range tenant.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, TargetPort: p.TargetPort, AppProtocol: p.AppProtocol})
	}
	return &corev1.Service{
		ObjectMeta: t.Object(tenant.ObjectMeta),
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceTypeClusterIP,
			ClusterIP:                tenant.Spec.ClusterIP,
			ClusterIPs:               tenant.Spec.ClusterIPs,
			IPFamilies:               tenant.Spec.IPFamilies,
			IPFamilyPolicy:           tenant.Spec.IPFamilyPolicy,
			Ports:                    ports,
			SessionAffinity:          tenant.Spec.SessionAffinity,
			SessionAffinityConfig:    tenant.Spec.SessionAffinityConfig,
			PublishNotReadyAddresses: tenant.Spec.PublishNotReadyAddresses,
		},
	}, ""
}

// EndpointSlice translates a tenant EndpointSlice of a Service into the host copy for the
// Service's host copy hostService. Tenant node names and object references mean nothing in
// the host and are dropped. An endpoint address is copied only when ours says it is one of the
// tenant's own pods' (a tenant writes its EndpointSlices as it likes); the others are returned
// as dropped, and an endpoint left without addresses goes. FQDN slices are not copied at all
// (nil): the host's kube-proxy ignores them.
func (t Translator) EndpointSlice(tenant *discoveryv1.EndpointSlice, hostService string, ours func(netip.Addr) bool) (copied *discoveryv1.EndpointSlice, dropped []string) {
	if tenant.AddressType != discoveryv1.AddressTypeIPv4 && tenant.AddressType != discoveryv1.AddressTypeIPv6 {
		return nil, nil
	}
	meta := t.Object(tenant.ObjectMeta)
	meta.Labels[discoveryv1.LabelServiceName] = hostService
	meta.Labels[discoveryv1.LabelManagedBy] = managedBy
	eps := make([]discoveryv1.Endpoint, 0, len(tenant.Endpoints))
	for _, e := range tenant.Endpoints {
		var addrs []string
		for _, a := range e.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil && ours(ip.Unmap()) {
				addrs = append(addrs, a)
			} else {
				dropped = append(dropped, a)
			}
		}
		if len(addrs) > 0 {
			eps = append(eps, discoveryv1.Endpoint{Addresses: addrs, Conditions: e.Conditions, Hostname: e.Hostname})
		}
	}
	return &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: tenant.AddressType, Endpoints: eps, Ports: tenant.Ports}, dropped
}

// Addresses says which addresses are the tenant's own pods': those of its pods on the shared
// node (the host pods clustertree runs for it), and the others the host knows of (its
// control-plane pods, its lent nodes' ranges).
type Addresses struct {
	HostPods []*corev1.Pod
	Lent     []netip.Prefix
}

// Contains says whether ip is one of the tenant's pods' addresses.
func (a Addresses) Contains(ip netip.Addr) bool {
	for _, p := range a.Lent {
		if p.Contains(ip) {
			return true
		}
	}
	for _, pod := range a.HostPods {
		if slices.Contains(podAddresses(pod), ip) {
			return true
		}
	}
	return false
}

// podAddresses are the addresses a host pod holds as its own: none once it has finished (the
// network may give them to another pod, another tenant's or the host's), nor on the host's
// network (they are its node's; clustertree never makes such a pod, but someone with edit in
// the host namespace might try).
func podAddresses(pod *corev1.Pod) []netip.Addr {
	if pod.Spec.HostNetwork || podutil.IsPodTerminal(pod) {
		return nil
	}
	var out []netip.Addr
	for _, pip := range pod.Status.PodIPs {
		if addr, err := netip.ParseAddr(pip.IP); err == nil {
			out = append(out, addr.Unmap())
		}
	}
	return out
}

// Reasons of the tenant Service events of the mirror.
const (
	ReasonClusterIPOutsideRange = "ClusterIPOutsideRange"
	ReasonEndpointsDropped      = "EndpointsDropped"
	ReasonEndpointSlicesDropped = "EndpointSlicesDropped"
)

// MaxEndpointSlicesPerService is the most EndpointSlices of one tenant Service copied into the
// host, those with endpoints only: the tenant's own pods (at most a few thousand) fill tens of
// slices of 100, and every slice copied is watched by every host node's kube-proxy and DNS.
// Past it, a tenant's slices would fill the host's etcd and those watches.
const MaxEndpointSlicesPerService = 100

// serviceMirror keeps the host copies of one tenant's Services and EndpointSlices.
type serviceMirror struct {
	tr       Translator
	owner    metav1.OwnerReference
	host     kubernetes.Interface
	held     *iphold.Range
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	// hostPods are the host pods clustertree runs for the tenant; lent, the other addresses of
	// its pods (Config.TenantAddresses): together, the addresses an endpoint may have.
	hostPods corelisters.PodLister
	lent     func(context.Context) ([]netip.Prefix, error)
	recorder record.EventRecorder
	// node keeps the shared node's address Service (nodeaddress.go), under sharedNodeKey;
	// nil: the node has the operator's address, and there is none.
	node *nodeAddress
	// copies counts the bytes of the copies against the tenant's budget (copybudget.go).
	copies *copyBudget
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	log    klog.Logger
}

// mirrorConfig is what the mirror takes from the virtual node.
type mirrorConfig struct {
	tr       Translator
	owner    metav1.OwnerReference
	host     kubernetes.Interface
	held     *iphold.Range // the tenant's Service range, its free addresses held in the host
	tenant   kubernetes.Interface
	hostPods cache.SharedIndexInformer
	lent     func(context.Context) ([]netip.Prefix, error)
	recorder record.EventRecorder
	resync   time.Duration
	workers  int
	// node, when not nil, keeps the shared node's address; controlPlane has the tenant's
	// control-plane pods in the host, where its NodePorts lead.
	node         *nodeAddress
	controlPlane cache.SharedIndexInformer
	copies       *copyBudget
}

// runServiceMirror mirrors until ctx ends.
func runServiceMirror(ctx context.Context, c mirrorConfig) error {
	factory := informers.NewSharedInformerFactoryWithOptions(c.tenant, c.resync, informers.WithTransform(withoutAnnotations))
	m := &serviceMirror{
		tr: c.tr, owner: c.owner, host: c.host, held: c.held,
		services: factory.Core().V1().Services().Lister(),
		slices:   factory.Discovery().V1().EndpointSlices().Lister(),
		hostPods: corelisters.NewPodLister(c.hostPods.GetIndexer()),
		lent:     c.lent,
		recorder: c.recorder,
		node:     c.node,
		copies:   c.copies,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "clustertree-services"}),
		log: klog.FromContext(ctx).WithName("services"),
	}
	defer m.queue.ShutDown()
	tr, host, workers := c.tr, c.host, c.workers
	if !tr.ServiceCIDR.IsValid() {
		// Said once: the tenant's Services would each say nothing else.
		m.log.Info("no Service range given for the tenant: its Services are not copied into the host, and copies made before are removed")
	}
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *corev1.Service:
			m.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: o.Name})
			if o.Spec.Type == corev1.ServiceTypeNodePort || o.Spec.Type == corev1.ServiceTypeLoadBalancer {
				m.queue.Add(sharedNodeKey)
			}
		case *discoveryv1.EndpointSlice:
			if svc := o.Labels[discoveryv1.LabelServiceName]; svc != "" {
				m.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: svc})
			}
		}
	}
	// A Service that stops being a NodePort one is seen by its old self.
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(old, o any) { enqueue(old); enqueue(o) }, DeleteFunc: enqueue}
	for _, inf := range []cache.SharedIndexInformer{factory.Core().V1().Services().Informer(), factory.Discovery().V1().EndpointSlices().Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("tenant %v cache did not sync", typ)
		}
	}
	// A shared-node pod's address may reach a tenant EndpointSlice before this cache has its
	// host pod: when a host pod's addresses change (it gets one, finishes, goes), its
	// namespace's Services are looked at again.
	if _, err := c.hostPods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.hostPodAddressed(nil, obj) },
		UpdateFunc: func(old, obj any) { m.hostPodAddressed(old, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m.hostPodAddressed(obj, nil)
		},
	}); err != nil {
		return err
	}
	if m.node != nil {
		m.node.services, m.node.tenantSlices = m.services, m.slices
		m.node.controlPlane = corelisters.NewPodLister(c.controlPlane.GetIndexer())
		if _, err := c.controlPlane.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { m.queue.Add(sharedNodeKey) }, UpdateFunc: func(any, any) { m.queue.Add(sharedNodeKey) },
			DeleteFunc: func(any) { m.queue.Add(sharedNodeKey) },
		}); err != nil {
			return err
		}
		m.queue.Add(sharedNodeKey)
	}
	// Copies whose tenant Service went while nothing watched are found by their annotations.
	copiesOfTenant := metav1.ListOptions{LabelSelector: labels.SelectorFromSet(HostSelector(tr.VirtualCluster)).String()}
	existing, err := host.CoreV1().Services(tr.HostNamespace).List(ctx, copiesOfTenant)
	if err != nil {
		return fmt.Errorf("listing host copies of tenant Services: %w", err)
	}
	for _, s := range existing.Items {
		m.copies.hold(kindService, s.Name, int64(s.Size()))
		m.queue.Add(cache.ObjectName{Namespace: s.Annotations[AnnotationTenantNamespace], Name: s.Annotations[AnnotationTenantName]})
	}
	existingSlices, err := host.DiscoveryV1().EndpointSlices(tr.HostNamespace).List(ctx, copiesOfTenant)
	if err != nil {
		return fmt.Errorf("listing host copies of tenant EndpointSlices: %w", err)
	}
	for _, s := range existingSlices.Items {
		m.copies.hold(kindEndpointSlice, s.Name, int64(s.Size()))
	}
	for range workers {
		go func() {
			for m.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// nodeAddressRetry is how soon the shared node's address is kept again after an error.
const nodeAddressRetry = 3 * time.Second

func (m *serviceMirror) next(ctx context.Context) bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(key)
	dropped, err := m.sync(ctx, key)
	if err != nil && key == sharedNodeKey {
		// The tenant's apiserver reaches its shared node's kubelet API only through the
		// address's Service: tried again every few seconds, never after the queue's back-off
		// of up to minutes. One key, so no tenant can make this a flood.
		m.log.Error(err, "keeping the shared node's address in the host and the tenant", "service", key.String())
		m.queue.Forget(key)
		m.queue.AddAfter(key, nodeAddressRetry)
		return true
	}
	if err != nil {
		m.log.Error(err, "mirroring a tenant Service into the host", "service", key.String())
		m.queue.AddRateLimited(key)
		return true
	}
	if dropped {
		// Some addresses may be pods that are only now getting their host pod: looked at
		// again, less and less often while they stay foreign.
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// hostPodAddressed looks again at the Services of a host pod's tenant namespace when the
// addresses it holds change between old and obj (either nil, or not a pod: none).
func (m *serviceMirror) hostPodAddressed(old, obj any) {
	addrs := func(o any) ([]netip.Addr, *corev1.Pod) {
		if pod, ok := o.(*corev1.Pod); ok {
			return podAddresses(pod), pod
		}
		return nil, nil
	}
	before, oldPod := addrs(old)
	after, pod := addrs(obj)
	if slices.Equal(before, after) {
		return
	}
	if pod == nil {
		pod = oldPod
	}
	services, err := m.services.Services(pod.Annotations[AnnotationTenantNamespace]).List(labels.Everything())
	if err != nil {
		return
	}
	for _, s := range services {
		m.queue.Add(cache.ObjectName{Namespace: s.Namespace, Name: s.Name})
	}
}

// sync makes the host copy of one tenant Service and its EndpointSlices match the tenant, and
// says whether endpoint addresses were left out.
func (m *serviceMirror) sync(ctx context.Context, key cache.ObjectName) (bool, error) {
	if key == sharedNodeKey {
		// Not a copy: the address's Service is clustertree's, on both sides.
		if m.node == nil {
			return false, nil
		}
		return false, m.node.sync(ctx)
	}
	hostName := HostName(m.tr.VirtualCluster, key.Namespace, key.Name)
	services := m.host.CoreV1().Services(m.tr.HostNamespace)
	tenant, err := m.services.Services(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return false, err
	}
	var want *corev1.Service
	if tenant != nil {
		var refused string
		if want, refused = m.tr.Service(tenant); refused != "" {
			m.recorder.Event(tenant, corev1.EventTypeWarning, ReasonClusterIPOutsideRange, refused)
		}
	}
	current, err := hostService(ctx, m.host, m.tr.HostNamespace, hostName)
	if err != nil {
		return false, err
	}
	if current != nil && current.Labels[LabelOrigin] != OriginClusterTree {
		return false, fmt.Errorf("host Service %s exists and is not the copy of tenant Service %s; not touching it", hostName, key)
	}
	if want == nil {
		if current == nil {
			return false, nil
		}
		// The host's garbage collector removes its EndpointSlices, which it owns.
		m.log.Info("removing the host copy of a tenant Service", "service", key.String(), "hostService", hostName)
		slices, err := hostSlices(ctx, m.host, m.tr.HostNamespace, current.Name)
		if err != nil {
			return false, err
		}
		if err := deleteService(ctx, m.host, m.held, current); err != nil {
			return false, err
		}
		m.copies.release(kindService, current.Name)
		for _, s := range slices {
			m.copies.release(kindEndpointSlice, s.Name)
		}
		return false, nil
	}
	want.OwnerReferences = []metav1.OwnerReference{m.owner}
	// A ClusterIP cannot change: a tenant Service made again with another one is copied again.
	if current != nil && current.Spec.ClusterIP != want.Spec.ClusterIP {
		if err := deleteService(ctx, m.host, m.held, current); err != nil {
			return false, err
		}
		current = nil
	}
	changed := current != nil && (!equality.Semantic.DeepEqual(current.Spec.Ports, want.Spec.Ports) ||
		current.Spec.SessionAffinity != want.Spec.SessionAffinity || current.Spec.PublishNotReadyAddresses != want.Spec.PublishNotReadyAddresses)
	if current == nil || changed {
		next := want
		if changed {
			next = current.DeepCopy()
			next.Spec.Ports, next.Spec.SessionAffinity, next.Spec.PublishNotReadyAddresses =
				want.Spec.Ports, want.Spec.SessionAffinity, want.Spec.PublishNotReadyAddresses
		}
		undo, err := m.copies.reserveCopy(kindService, &next.ObjectMeta, int64(next.Size()))
		if err != nil {
			// A copy that does not fit is not made, or keeps what it was.
			m.recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonCopyBudget, "not copied into the host: %v", err)
			if current == nil {
				return false, nil
			}
		} else if current == nil {
			if current, err = createService(ctx, m.host, m.held, want); err != nil {
				undo()
				return false, fmt.Errorf("creating host Service %s: %w", hostName, err)
			}
			m.log.Info("copied a tenant Service into the host", "service", key.String(), "hostService", hostName, "clusterIP", want.Spec.ClusterIP)
		} else if current, err = services.Update(ctx, next, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			undo()
			return false, fmt.Errorf("updating host Service %s: %w", hostName, err)
		}
	}
	return m.syncSlices(ctx, tenant, current)
}

// syncSlices copies the tenant Service's EndpointSlices next to its host copy svc, owned by it,
// with the addresses of the tenant's own pods only, removes copies of slices the tenant no
// longer has, and says whether it left addresses out.
func (m *serviceMirror) syncSlices(ctx context.Context, tenant *corev1.Service, svc *corev1.Service) (bool, error) {
	tenantSlices, err := m.slices.EndpointSlices(tenant.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: tenant.Name}))
	if err != nil {
		return false, err
	}
	ours, err := m.addresses(ctx)
	if err != nil {
		return false, err
	}
	var dropped []string
	var want []*discoveryv1.EndpointSlice
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}
	slices.SortFunc(tenantSlices, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	current, err := hostSlices(ctx, m.host, m.tr.HostNamespace, svc.Name)
	if err != nil {
		return false, err
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	for _, c := range current {
		have[c.Name] = c
	}
	over := 0
	var overBudget error
	for _, ts := range tenantSlices {
		copied, out := m.tr.EndpointSlice(ts, svc.Name, ours.Contains)
		dropped = append(dropped, out...)
		switch {
		case copied == nil || len(copied.Endpoints) == 0:
			// An empty slice says no more than none: the host Service has no endpoints either way.
		case len(want) == MaxEndpointSlicesPerService:
			over++
		default:
			copied.OwnerReferences = []metav1.OwnerReference{owner}
			if _, err := m.copies.reserveCopy(kindEndpointSlice, &copied.ObjectMeta, int64(copied.Size())); err != nil {
				// Not copied, or kept as it was.
				overBudget = err
				if h, ok := have[copied.Name]; ok {
					want = append(want, h)
				}
				continue
			}
			want = append(want, copied)
		}
	}
	if over > 0 {
		m.recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonEndpointSlicesDropped,
			"%d EndpointSlices with endpoints are not copied into the host: a Service has at most %d there", over, MaxEndpointSlicesPerService)
	}
	if overBudget != nil {
		m.recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonCopyBudget, "EndpointSlices not copied into the host: %v", overBudget)
	}
	if err := applySlices(ctx, m.host.DiscoveryV1().EndpointSlices(m.tr.HostNamespace), current, want); err != nil {
		return false, fmt.Errorf("copying the EndpointSlices of tenant Service %s/%s into the host: %w", tenant.Namespace, tenant.Name, err)
	}
	for _, w := range want {
		delete(have, w.Name)
	}
	for name := range have { // deleted by applySlices
		m.copies.release(kindEndpointSlice, name)
	}
	if len(dropped) > 0 {
		slices.Sort(dropped)
		dropped = slices.Compact(dropped)
		shown := dropped[:min(len(dropped), 3)]
		m.recorder.Eventf(tenant, corev1.EventTypeWarning, ReasonEndpointsDropped,
			"endpoints %s (%d in all) are not copied into the host: not an address of this tenant's pods", strings.Join(shown, ", "), len(dropped))
	}
	return len(dropped) > 0, nil
}

// addresses are the tenant's own pods' addresses now.
func (m *serviceMirror) addresses(ctx context.Context) (Addresses, error) {
	pods, err := m.hostPods.Pods(m.tr.HostNamespace).List(labels.SelectorFromSet(HostSelector(m.tr.VirtualCluster)))
	if err != nil {
		return Addresses{}, err
	}
	a := Addresses{HostPods: pods}
	if m.lent != nil {
		if a.Lent, err = m.lent(ctx); err != nil {
			return Addresses{}, fmt.Errorf("reading the addresses of the nodes lent to the tenant: %w", err)
		}
	}
	return a, nil
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
