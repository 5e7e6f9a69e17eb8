package clustertree

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
)

// statusOnlyClient is the tenant client virtual-kubelet is given. virtual-kubelet writes a
// tenant pod's status with UpdateStatus of the whole pod the provider last reported, with the
// resourceVersion the tenant pod has now; and pods/status writes labels, annotations and
// finalizers too. So a label the tenant set after that report was undone, and the provider's
// view of a pod (tenantView's marker annotation) was written into the tenant pod. Through this
// client a pod status update writes the status only: the metadata is the tenant pod's own, as
// the tenant pod informer has it (resourceVersion included, so a pod changed since is a
// conflict, and virtual-kubelet writes the status again).
//
// It also lists and watches the tenant's ConfigMaps and Secrets by their metadata only
// (metadataOnly), so virtual-kubelet's caches of them, which hold every one of the tenant's,
// hold no data: a tenant with gigabytes of them would otherwise have them all in the
// operator's memory, and every tenant's shared node would stop with the operator. What a host
// copy needs is read from the tenant when it is made (sync.go).
type statusOnlyClient struct {
	kubernetes.Interface
	// meta lists and watches the tenant's objects by their metadata.
	meta metadata.Interface
	// pods is the tenant pod informer's lister, set once virtual-kubelet made it.
	pods corev1listers.PodLister
}

func (c *statusOnlyClient) CoreV1() typedcorev1.CoreV1Interface {
	return statusOnlyCoreV1{CoreV1Interface: c.Interface.CoreV1(), client: c}
}

type statusOnlyCoreV1 struct {
	typedcorev1.CoreV1Interface
	client *statusOnlyClient
}

func (c statusOnlyCoreV1) Pods(namespace string) typedcorev1.PodInterface {
	return statusOnlyPods{PodInterface: c.CoreV1Interface.Pods(namespace), namespace: namespace, client: c.client}
}

func (c statusOnlyCoreV1) ConfigMaps(namespace string) typedcorev1.ConfigMapInterface {
	return metadataOnlyConfigMaps{ConfigMapInterface: c.CoreV1Interface.ConfigMaps(namespace),
		meta: c.client.meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(namespace)}
}

func (c statusOnlyCoreV1) Secrets(namespace string) typedcorev1.SecretInterface {
	return metadataOnlySecrets{SecretInterface: c.CoreV1Interface.Secrets(namespace),
		meta: c.client.meta.Resource(corev1.SchemeGroupVersion.WithResource("secrets")).Namespace(namespace)}
}

func (c statusOnlyCoreV1) Services(namespace string) typedcorev1.ServiceInterface {
	return slimServices{c.CoreV1Interface.Services(namespace)}
}

// slimServices lists and watches Services without their annotations and managed fields,
// which nothing of clustertree reads.
type slimServices struct{ typedcorev1.ServiceInterface }

func (c slimServices) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ServiceList, error) {
	l, err := c.ServiceInterface.List(ctx, opts)
	if err == nil {
		for i := range l.Items {
			_, _ = withoutAnnotations(&l.Items[i])
		}
	}
	return l, err
}

func (c slimServices) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.ServiceInterface.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if e.Type != watch.Bookmark { // a bookmark's annotation ends a watch-list's initial events
			_, _ = withoutAnnotations(e.Object)
		}
		return e, true
	}), nil
}

// withoutAnnotations drops a tenant object's annotations and managed fields (an informer
// transform): up to 256 KiB each, which nothing of clustertree reads of Services and
// EndpointSlices, and which a tenant's thousands would otherwise hold in the operator.
func withoutAnnotations(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetAnnotations(nil)
		m.SetManagedFields(nil)
	}
	return obj, nil
}

type metadataOnlyConfigMaps struct {
	typedcorev1.ConfigMapInterface
	meta metadata.ResourceInterface
}

func configMapOf(m metav1.ObjectMeta) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: slim(m)}
}

func (c metadataOnlyConfigMaps) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	items, lm, err := metadataOnly(ctx, c.meta, opts, configMapOf)
	return &corev1.ConfigMapList{ListMeta: lm, Items: items}, err
}

func (c metadataOnlyConfigMaps) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return metadataOnlyWatch(ctx, c.meta, opts, configMapOf)
}

type metadataOnlySecrets struct {
	typedcorev1.SecretInterface
	meta metadata.ResourceInterface
}

func secretOf(m metav1.ObjectMeta) *corev1.Secret { return &corev1.Secret{ObjectMeta: slim(m)} }

// slim is what clustertree reads of a tenant object's metadata: its name, identity and
// version, not its labels, annotations or managed fields (up to 256 KiB of annotations each,
// which a tenant's thousands of objects would otherwise hold in the operator's memory).
func slim(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp}
}

func (c metadataOnlySecrets) List(ctx context.Context, opts metav1.ListOptions) (*corev1.SecretList, error) {
	items, lm, err := metadataOnly(ctx, c.meta, opts, secretOf)
	return &corev1.SecretList{ListMeta: lm, Items: items}, err
}

func (c metadataOnlySecrets) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return metadataOnlyWatch(ctx, c.meta, opts, secretOf)
}

// metadataOnly lists by metadata, each item made into a T that carries it alone.
func metadataOnly[T any](ctx context.Context, meta metadata.ResourceInterface, opts metav1.ListOptions, of func(metav1.ObjectMeta) *T) ([]T, metav1.ListMeta, error) {
	list, err := meta.List(ctx, opts)
	if err != nil {
		return nil, metav1.ListMeta{}, err
	}
	items := make([]T, 0, len(list.Items))
	for i := range list.Items {
		items = append(items, *of(list.Items[i].ObjectMeta))
	}
	return items, list.ListMeta, nil
}

// metadataOnlyWatch watches by metadata, each object made into a T that carries it alone.
func metadataOnlyWatch[T interface {
	runtime.Object
	metav1.Object
}](ctx context.Context, meta metadata.ResourceInterface, opts metav1.ListOptions, of func(metav1.ObjectMeta) T) (watch.Interface, error) {
	w, err := meta.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		if m, ok := e.Object.(*metav1.PartialObjectMetadata); ok {
			o := of(m.ObjectMeta)
			if e.Type == watch.Bookmark { // its annotation ends a watch-list's initial events
				o.SetAnnotations(m.Annotations)
			}
			e.Object = o
		}
		return e, true
	}), nil
}

type statusOnlyPods struct {
	typedcorev1.PodInterface
	namespace string
	client    *statusOnlyClient
}

func (p statusOnlyPods) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	if p.client.pods != nil {
		current, err := p.client.pods.Pods(p.namespace).Get(pod.Name)
		if err != nil {
			return nil, err
		}
		pod = &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: *current.ObjectMeta.DeepCopy(), Spec: pod.Spec, Status: pod.Status}
	}
	return p.PodInterface.UpdateStatus(ctx, pod, opts)
}
