package ssa

import (
	"context"
	"crypto/sha256"
	"fmt"
	"reflect"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Applier applies as Apply does, but skips an apply that cannot change anything: the body is
// the one it last applied to that object, and the object its client reads (the informer
// cache) is still the one that apply returned, same UID and resourceVersion, so nobody has
// written it since. Anything else is applied: a new body; an object someone changed or
// deleted (its watch wakes the reconcile that applies it again); a cache that has not caught
// up. It is only for kinds the client's cache watches and only for objects that cache
// selects; for others every call applies. The zero value is ready to use.
//
// What it skips are requests, not checks: a controller reconciling a tenant again after its
// pods changed applies a dozen unchanged objects, each a server-side apply the host's
// apiserver would compute, admit and find a no-op.
type Applier struct {
	mu   sync.Mutex
	last map[types.NamespacedName]map[objectKey]lastApply
}

type objectKey struct {
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

type lastApply struct {
	body            [sha256.Size]byte
	uid             types.UID
	resourceVersion string
}

// Apply applies obj for owner (the object whose reconcile builds it; Forget drops what is
// remembered for it) unless the apply would change nothing. Either way obj then holds the
// object as the server returned it or as the cache has it.
func (a *Applier) Apply(ctx context.Context, c client.Client, owner types.NamespacedName, obj client.Object, fieldOwner string) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	u, err := applied(obj)
	if err != nil {
		return err
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	body := sha256.Sum256(raw)
	key := objectKey{gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()}

	if last, ok := a.lookup(owner, key); ok && last.body == body {
		current := obj.DeepCopyObject().(client.Object)
		err := c.Get(ctx, client.ObjectKey{Namespace: key.namespace, Name: key.name}, current)
		switch {
		case err == nil && current.GetUID() == last.uid && current.GetResourceVersion() == last.resourceVersion:
			reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(current).Elem())
			obj.GetObjectKind().SetGroupVersionKind(gvk)
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading %s %s from the cache: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	if err := Apply(ctx, c, obj, fieldOwner); err != nil {
		return err
	}
	a.remember(owner, key, lastApply{body: body, uid: obj.GetUID(), resourceVersion: obj.GetResourceVersion()})
	return nil
}

// Forget drops what is remembered of owner's applies: its objects are applied again next
// time, and a deleted owner leaves nothing behind.
func (a *Applier) Forget(owner types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.last, owner)
}

func (a *Applier) lookup(owner types.NamespacedName, key objectKey) (lastApply, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, ok := a.last[owner][key]
	return last, ok
}

func (a *Applier) remember(owner types.NamespacedName, key objectKey, last lastApply) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[types.NamespacedName]map[objectKey]lastApply{}
	}
	if a.last[owner] == nil {
		a.last[owner] = map[objectKey]lastApply{}
	}
	a.last[owner][key] = last
}
