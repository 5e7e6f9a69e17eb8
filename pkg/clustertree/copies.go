package clustertree

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Host copies of the ConfigMaps and Secrets pods on the shared node refer to follow the
// tenant's changes as they happen, as a kubelet's watch would: a tenant object created,
// changed or deleted while a host pod refers to it is created, updated or deleted in the
// host (the host's kubelet then does with a deleted one what it does with any: an optional
// volume loses its files, a required one keeps them). The tenant's objects are watched by
// metadata only, and read when one that a host pod refers to changes. maintain's periodic pass
// stays as the safety net, for token renewals and for collecting copies no pod uses.

// indexRefs indexes host pods by the host copies they refer to ("ConfigMap/<name>",
// "Secret/<name>").
const indexRefs = "kubenest.io/refs"

func refsIndex(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	cms, secrets := map[string]bool{}, map[string]bool{}
	referencedBy(pod, cms, secrets)
	out := make([]string, 0, len(cms)+len(secrets))
	for n := range cms {
		out = append(out, kindConfigMap+"/"+n)
	}
	for n := range secrets {
		out = append(out, kindSecret+"/"+n)
	}
	return out, nil
}

const (
	kindConfigMap     = "ConfigMap"
	kindSecret        = "Secret"
	kindService       = "Service"
	kindEndpointSlice = "EndpointSlice"
)

// tenantRef names a tenant ConfigMap or Secret.
type tenantRef struct {
	kind      string
	namespace string
	name      string
}

// followTenantRefs keeps host copies in step with the tenant's ConfigMaps and Secrets until ctx
// ends. hostPods must be indexed by indexRefs and synced.
func (p *provider) followTenantRefs(ctx context.Context, tenant *rest.Config, resync time.Duration) error {
	mc, err := metadata.NewForConfig(tenant)
	if err != nil {
		return err
	}
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[tenantRef](),
		workqueue.TypedRateLimitingQueueConfig[tenantRef]{Name: "clustertree-copies"})
	defer queue.ShutDown()
	factory := metadatainformer.NewSharedInformerFactory(mc, resync)
	for kind, resource := range map[string]string{kindConfigMap: "configmaps", kindSecret: "secrets"} {
		enqueue := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			m, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return
			}
			// Only what a host pod refers to is copied: the rest of the tenant's objects
			// never leave it. Rate-limited (10 a second, bursts of 100, per tenant): a tenant
			// that rewrites an object without pause does not get as many host writes.
			if p.referenced(kind, HostName(p.tr.VirtualCluster, m.Namespace, m.Name)) {
				queue.AddRateLimited(tenantRef{kind: kind, namespace: m.Namespace, name: m.Name})
			}
		}
		informer := factory.ForResource(corev1.SchemeGroupVersion.WithResource(resource)).Informer()
		if err := informer.SetTransform(slimMetadata); err != nil {
			return err
		}
		_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue,
			UpdateFunc: func(old, obj any) {
				if o, n := old.(*metav1.PartialObjectMetadata), obj.(*metav1.PartialObjectMetadata); o.ResourceVersion != n.ResourceVersion {
					enqueue(obj)
				}
			},
			DeleteFunc: enqueue,
		})
		if err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	go func() {
		<-ctx.Done()
		queue.ShutDown()
	}()
	for {
		ref, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		if err := p.followRef(ctx, ref); err != nil && ctx.Err() == nil {
			p.log.Error(err, "updating the host copy of a tenant object", "kind", ref.kind, "namespace", ref.namespace, "name", ref.name)
			queue.AddRateLimited(ref)
		} else {
			queue.Forget(ref)
		}
		queue.Done(ref)
	}
}

// slimMetadata keeps of a tenant object's metadata what clustertree reads (slim).
func slimMetadata(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: slim(m.ObjectMeta)}, nil
	}
	return obj, nil
}

// referenced says whether a host pod refers to the host copy of that kind and name.
func (p *provider) referenced(kind, hostName string) bool {
	pods, err := p.hostPodIndex.ByIndex(indexRefs, kind+"/"+hostName)
	return err == nil && len(pods) > 0
}

// followRef brings the host copy of one tenant object in step with it.
func (p *provider) followRef(ctx context.Context, ref tenantRef) error {
	hostName := HostName(p.tr.VirtualCluster, ref.namespace, ref.name)
	var err error
	switch ref.kind {
	case kindConfigMap:
		var cm *corev1.ConfigMap
		if cm, err = p.tenant.CoreV1().ConfigMaps(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{}); err == nil {
			return p.upsertConfigMap(ctx, cm)
		}
	case kindSecret:
		var s *corev1.Secret
		if s, err = p.tenant.CoreV1().Secrets(ref.namespace).Get(ctx, ref.name, metav1.GetOptions{}); err == nil {
			return p.upsertSecret(ctx, p.copyMeta(s.ObjectMeta), s.Type, s.Data)
		}
	}
	if apierrors.IsNotFound(err) {
		return p.deleteCopy(ctx, ref, hostName)
	}
	return err
}

// deleteCopy deletes the host copy of a tenant object deleted in the tenant; a host object of
// that name that is not the copy stays.
func (p *provider) deleteCopy(ctx context.Context, ref tenantRef, hostName string) error {
	var current metav1.Object
	var err error
	var remove func(context.Context, string, metav1.DeleteOptions) error
	switch ref.kind {
	case kindConfigMap:
		client := p.host.CoreV1().ConfigMaps(p.tr.HostNamespace)
		current, err = client.Get(ctx, hostName, metav1.GetOptions{})
		remove = client.Delete
	case kindSecret:
		client := p.host.CoreV1().Secrets(p.tr.HostNamespace)
		current, err = client.Get(ctx, hostName, metav1.GetOptions{})
		remove = client.Delete
	default:
		return fmt.Errorf("unknown kind %q", ref.kind)
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	ann := current.GetAnnotations()
	if current.GetLabels()[LabelOrigin] != OriginClusterTree || current.GetLabels()[naming.LabelVirtualCluster] != p.tr.VirtualCluster || ann[AnnotationTenantNamespace] != ref.namespace ||
		ann[AnnotationTenantName] != ref.name || ann[annotationRefreshAfter] != "" {
		return nil
	}
	uid := current.GetUID()
	err = remove(ctx, hostName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting host %s %s, whose tenant object is gone: %w", ref.kind, hostName, err)
	}
	if err == nil || apierrors.IsNotFound(err) {
		p.copies.release(ref.kind, hostName)
	}
	p.log.V(1).Info("deleted a host copy whose tenant object is gone", "kind", ref.kind, "name", hostName)
	return nil
}
