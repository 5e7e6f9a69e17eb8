package ssa_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/internal/testenv"
)

// The Applier skips only what cannot change anything: whatever someone else does to an
// applied object is undone by the next apply of the same body, as with a plain apply.
func TestApplierUndoesOthersChanges(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// A client that reads a cache and writes to the server, as a controller's does.
	c, err := cache.New(env.Config, cache.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not start")
	}
	cached, err := client.New(env.Config, client.Options{Scheme: scheme.Scheme, Cache: &client.CacheOptions{Reader: c}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "none"}, &corev1.Secret{}); client.IgnoreNotFound(err) != nil {
		t.Fatal(err) // starts the Secret informer
	}

	owner := types.NamespacedName{Namespace: "default", Name: "tenant"}
	want := func() *corev1.Secret {
		return &corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "certs", Labels: map[string]string{"role": "etcd"}},
			Data:       map[string][]byte{"ca.crt": []byte("the CA")},
		}
	}
	a := &ssa.Applier{}
	apply := func(what string) *corev1.Secret {
		t.Helper()
		s := want()
		if err := a.Apply(ctx, cached, owner, s, "test"); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if string(s.Data["ca.crt"]) != "the CA" || s.UID == "" || s.ResourceVersion == "" {
			t.Fatalf("%s: the object read back is %+v", what, s)
		}
		return s
	}
	live := func() *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{}
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "certs"}, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Waits until the cache has seen resourceVersion rv of the Secret.
	cacheSees := func(rv string) {
		t.Helper()
		err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			s := &corev1.Secret{}
			return c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "certs"}, s) == nil && s.ResourceVersion == rv, nil
		})
		if err != nil {
			t.Fatalf("the cache never saw resourceVersion %s", rv)
		}
	}

	first := apply("first apply")
	cacheSees(first.ResourceVersion)
	if again := apply("unchanged apply"); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("an unchanged apply wrote: resourceVersion %s → %s", first.ResourceVersion, again.ResourceVersion)
	}

	// Someone else overwrites the data: the same body applied again restores it.
	s := live()
	s.Data["ca.crt"] = []byte("an attacker's CA")
	if err := env.Client.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	cacheSees(s.ResourceVersion)
	apply("apply after someone else's change")
	if got := string(live().Data["ca.crt"]); got != "the CA" {
		t.Errorf("after someone else's change and an apply the Secret holds %q", got)
	}

	// Deleted: applied again once the cache has seen it go (its watch event is what wakes a
	// controller's reconcile), it is back.
	if err := env.Client.Delete(ctx, live()); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "certs"}, &corev1.Secret{})), nil
	})
	if err != nil {
		t.Fatal("the cache never saw the deletion")
	}
	apply("apply after a deletion")
	if got := string(live().Data["ca.crt"]); got != "the CA" {
		t.Errorf("after a deletion and an apply the Secret holds %q", got)
	}

	// Forgotten, the next apply goes to the server again (and changes nothing there).
	a.Forget(owner)
	apply("apply after Forget")
}
