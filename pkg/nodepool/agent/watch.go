package agent

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// WatchPoolNode watches the PoolNode named node (only that one: a field selector) until ctx
// ends, and signals on the returned channel when it is created or goes, or what the agent acts
// on changes (its spec, or its quarantine): not on heartbeats, its own included. Signals are
// coalesced: the agent reads the PoolNode itself when it passes, so one pending signal says
// all there is. The informer relists and rewatches on its own after a broken connection.
func WatchPoolNode(ctx context.Context, c client.WithWatch, node string) <-chan struct{} {
	changed := make(chan struct{}, 1)
	notify := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	byName := client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", node)}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := &v1alpha1.PoolNodeList{}
			err := c.List(ctx, list, byName, &client.ListOptions{Raw: &opts})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, &v1alpha1.PoolNodeList{}, byName, &client.ListOptions{Raw: &opts})
		},
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &v1alpha1.PoolNode{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { notify() },
			UpdateFunc: func(old, cur any) {
				o, ok1 := old.(*v1alpha1.PoolNode)
				n, ok2 := cur.(*v1alpha1.PoolNode)
				if !ok1 || !ok2 || o.Generation != n.Generation || !equality.Semantic.DeepEqual(o.Status.Quarantine, n.Status.Quarantine) {
					notify()
				}
			},
			DeleteFunc: func(any) { notify() },
		},
	})
	go informer.RunWithContext(ctx)
	return changed
}
