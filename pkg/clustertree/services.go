package clustertree

import (
	"context"
	"fmt"
	"maps"
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
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
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

// Service translates a tenant Service into its host copy; false when it needs none.
func (t Translator) Service(tenant *corev1.Service) (*corev1.Service, bool) {
	if tenant.Spec.Type == corev1.ServiceTypeExternalName || tenant.Spec.ClusterIP == "" ||
		tenant.Spec.ClusterIP == corev1.ClusterIPNone ||
		(tenant.Namespace == metav1.NamespaceDefault && tenant.Name == "kubernetes") {
		return nil, false
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
	}, true
}

// EndpointSlice translates a tenant EndpointSlice of a Service into the host copy for the
// Service's host copy hostService. Tenant node names and object references mean nothing in
// the host and are dropped.
func (t Translator) EndpointSlice(tenant *discoveryv1.EndpointSlice, hostService string) *discoveryv1.EndpointSlice {
	meta := t.Object(tenant.ObjectMeta)
	meta.Labels[discoveryv1.LabelServiceName] = hostService
	meta.Labels[discoveryv1.LabelManagedBy] = managedBy
	eps := make([]discoveryv1.Endpoint, 0, len(tenant.Endpoints))
	for _, e := range tenant.Endpoints {
		eps = append(eps, discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions, Hostname: e.Hostname})
	}
	return &discoveryv1.EndpointSlice{ObjectMeta: meta, AddressType: tenant.AddressType, Endpoints: eps, Ports: tenant.Ports}
}

// serviceMirror keeps the host copies of one tenant's Services and EndpointSlices.
type serviceMirror struct {
	tr       Translator
	owner    metav1.OwnerReference
	host     kubernetes.Interface
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	log      klog.Logger
}

// runServiceMirror mirrors until ctx ends.
func runServiceMirror(ctx context.Context, tr Translator, owner metav1.OwnerReference, host, tenant kubernetes.Interface, resync time.Duration, workers int) error {
	factory := informers.NewSharedInformerFactory(tenant, resync)
	m := &serviceMirror{
		tr: tr, owner: owner, host: host,
		services: factory.Core().V1().Services().Lister(),
		slices:   factory.Discovery().V1().EndpointSlices().Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "clustertree-services"}),
		log: klog.FromContext(ctx).WithName("services"),
	}
	defer m.queue.ShutDown()
	enqueue := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *corev1.Service:
			m.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: o.Name})
		case *discoveryv1.EndpointSlice:
			if svc := o.Labels[discoveryv1.LabelServiceName]; svc != "" {
				m.queue.Add(cache.ObjectName{Namespace: o.Namespace, Name: svc})
			}
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue}
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
	// Copies whose tenant Service went while nothing watched are found by their annotations.
	existing, err := host.CoreV1().Services(tr.HostNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(HostSelector(tr.VirtualCluster)).String()})
	if err != nil {
		return fmt.Errorf("listing host copies of tenant Services: %w", err)
	}
	for _, s := range existing.Items {
		m.queue.Add(cache.ObjectName{Namespace: s.Annotations[AnnotationTenantNamespace], Name: s.Annotations[AnnotationTenantName]})
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

func (m *serviceMirror) next(ctx context.Context) bool {
	key, quit := m.queue.Get()
	if quit {
		return false
	}
	defer m.queue.Done(key)
	if err := m.sync(ctx, key); err != nil {
		m.log.Error(err, "mirroring a tenant Service into the host", "service", key.String())
		m.queue.AddRateLimited(key)
		return true
	}
	m.queue.Forget(key)
	return true
}

// sync makes the host copy of one tenant Service and its EndpointSlices match the tenant.
func (m *serviceMirror) sync(ctx context.Context, key cache.ObjectName) error {
	hostName := HostName(m.tr.VirtualCluster, key.Namespace, key.Name)
	services := m.host.CoreV1().Services(m.tr.HostNamespace)
	tenant, err := m.services.Services(key.Namespace).Get(key.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var want *corev1.Service
	ok := false
	if tenant != nil {
		want, ok = m.tr.Service(tenant)
	}
	current, err := services.Get(ctx, hostName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		current = nil
	}
	if current != nil && current.Labels[LabelOrigin] != OriginClusterTree {
		return fmt.Errorf("host Service %s exists and is not the copy of tenant Service %s; not touching it", hostName, key)
	}
	if !ok {
		if current == nil {
			return nil
		}
		// The host's garbage collector removes its EndpointSlices, which it owns.
		m.log.Info("removing the host copy of a tenant Service", "service", key.String(), "hostService", hostName)
		return client404(services.Delete(ctx, hostName, metav1.DeleteOptions{}))
	}
	want.OwnerReferences = []metav1.OwnerReference{m.owner}
	// A ClusterIP cannot change: a tenant Service made again with another one is copied again.
	if current != nil && current.Spec.ClusterIP != want.Spec.ClusterIP {
		if err := client404(services.Delete(ctx, hostName, metav1.DeleteOptions{})); err != nil {
			return err
		}
		current = nil
	}
	switch {
	case current == nil:
		if current, err = services.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("creating host Service %s: %w", hostName, err)
		}
		m.log.Info("copied a tenant Service into the host", "service", key.String(), "hostService", hostName, "clusterIP", want.Spec.ClusterIP)
	case !equality.Semantic.DeepEqual(current.Spec.Ports, want.Spec.Ports) || current.Spec.SessionAffinity != want.Spec.SessionAffinity ||
		current.Spec.PublishNotReadyAddresses != want.Spec.PublishNotReadyAddresses:
		current.Spec.Ports, current.Spec.SessionAffinity, current.Spec.PublishNotReadyAddresses =
			want.Spec.Ports, want.Spec.SessionAffinity, want.Spec.PublishNotReadyAddresses
		if current, err = services.Update(ctx, current, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
			return fmt.Errorf("updating host Service %s: %w", hostName, err)
		}
	}
	return m.syncSlices(ctx, key, current)
}

// syncSlices copies the tenant Service's EndpointSlices next to its host copy svc, owned by it,
// and removes copies of slices the tenant no longer has.
func (m *serviceMirror) syncSlices(ctx context.Context, key cache.ObjectName, svc *corev1.Service) error {
	tenantSlices, err := m.slices.EndpointSlices(key.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.Name}))
	if err != nil {
		return err
	}
	client := m.host.DiscoveryV1().EndpointSlices(m.tr.HostNamespace)
	hostSlices, err := client.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{
		discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: managedBy}).String()})
	if err != nil {
		return err
	}
	have := map[string]*discoveryv1.EndpointSlice{}
	for i := range hostSlices.Items {
		have[hostSlices.Items[i].Name] = &hostSlices.Items[i]
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Service", Name: svc.Name, UID: svc.UID}
	for _, ts := range tenantSlices {
		want := m.tr.EndpointSlice(ts, svc.Name)
		want.OwnerReferences = []metav1.OwnerReference{owner}
		cur, ok := have[want.Name]
		delete(have, want.Name)
		switch {
		case !ok:
			_, err = client.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		case !equality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) || !equality.Semantic.DeepEqual(cur.Ports, want.Ports) ||
			!maps.Equal(cur.Labels, want.Labels):
			cur.Endpoints, cur.Ports, cur.Labels = want.Endpoints, want.Ports, want.Labels
			_, err = client.Update(ctx, cur, metav1.UpdateOptions{FieldManager: fieldManager})
		}
		if err != nil {
			return fmt.Errorf("copying EndpointSlice %s/%s into the host: %w", ts.Namespace, ts.Name, err)
		}
	}
	for name := range have {
		if err := client404(client.Delete(ctx, name, metav1.DeleteOptions{})); err != nil {
			return err
		}
	}
	return nil
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
