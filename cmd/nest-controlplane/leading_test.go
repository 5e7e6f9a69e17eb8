package main

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
)

var testLease = &cmLease{namespace: "kube-system", name: "kube-controller-manager"}

// heldLease is the controller-manager's lease as a holder renewing every 10 s keeps it.
func heldLease(holder string, acquired time.Time) *coordinationv1.Lease {
	acquire, renew := metav1.NewMicroTime(acquired), metav1.NowMicro()
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testLease.namespace, Name: testLease.name},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](40),
			AcquireTime:          &acquire,
			RenewTime:            &renew,
		},
	}
}

func holder(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	l, err := client.CoordinationV1().Leases(testLease.namespace).Get(context.Background(), testLease.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// leadsWithin says whether a candidate of another pod takes the lease within d, retrying
// every 100 ms, although the lease lasts 40 s.
func leadsWithin(t *testing.T, client kubernetes.Interface, d time.Duration) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: testLease.namespace, Name: testLease.name},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "pod-c_new"},
	}
	led := make(chan struct{})
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 40 * time.Second, RenewDeadline: 30 * time.Second, RetryPeriod: 100 * time.Millisecond,
		Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) { close(led) }, OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go elector.Run(ctx)
	select {
	case <-led:
		return true
	case <-ctx.Done():
		return false
	}
}

// A lease handed back is taken by the next candidate on its next try; one kept is not.
func TestLeaseHandedBack(t *testing.T) {
	started := time.Now().Add(-5 * time.Second)
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		lease    *coordinationv1.Lease
		hand     func(kubernetes.Interface) error
		released bool
	}{
		{"this process stops", heldLease("pod-a_run2", time.Now()),
			func(c kubernetes.Interface) error { return testLease.release(ctx, c, "pod-a", started) }, true},
		{"stopping, the lease of an earlier run is not this process's", heldLease("pod-a_run1", started.Add(-time.Minute)),
			func(c kubernetes.Interface) error { return testLease.release(ctx, c, "pod-a", started) }, false},
		{"stopping, another pod's lease", heldLease("pod-b_run1", time.Now()),
			func(c kubernetes.Interface) error { return testLease.release(ctx, c, "pod-a", started) }, false},
		{"starting after a crash: the earlier run's", heldLease("pod-a_run1", started.Add(-time.Minute)),
			func(c kubernetes.Interface) error { return testLease.releaseEarlierRun(ctx, c, "pod-a") }, true},
		{"starting: another pod's", heldLease("pod-ab_run1", started.Add(-time.Minute)),
			func(c kubernetes.Interface) error { return testLease.releaseEarlierRun(ctx, c, "pod-a") }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.lease)
			was := holder(t, client)
			if err := tc.hand(client); err != nil {
				t.Fatal(err)
			}
			if got := holder(t, client); (got == "") != tc.released || (!tc.released && got != was) {
				t.Fatalf("holder %q after, %q before; handed back: want %v", got, was, tc.released)
			}
			if wait := 2 * time.Second; leadsWithin(t, client, wait) != tc.released {
				t.Errorf("a candidate led within %s: %v, want %v", wait, !tc.released, tc.released)
			}
		})
	}
}

// The controller-manager renewing the lease between the read and the update is one conflict:
// the lease is read again and handed back. No lease, nothing to hand back.
func TestLeaseHandedBackAfterAConflict(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset(heldLease("pod-a_run2", time.Now()))
	conflicts := 1
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, testLease.name, nil)
	})
	if err := testLease.release(ctx, client, "pod-a", time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got := holder(t, client); got != "" {
		t.Errorf("holder %q, want none", got)
	}
	if err := testLease.release(ctx, fake.NewClientset(), "pod-a", time.Now()); err != nil {
		t.Errorf("no lease: %v", err)
	}
}

// A stopping apiserver waits while its pod's controllers hold the lease, and no longer once
// they handed it back; a lease of another pod's controllers, or none, is no reason to wait.
func TestWaitHandedBack(t *testing.T) {
	wait := func(client kubernetes.Interface, d time.Duration) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		start := time.Now()
		testLease.waitHandedBack(ctx, client, "pod-a")
		return time.Since(start)
	}
	if took := wait(fake.NewClientset(heldLease("pod-b_run1", time.Now())), time.Second); took > 200*time.Millisecond {
		t.Errorf("another pod's lease: waited %s", took)
	}
	if took := wait(fake.NewClientset(), time.Second); took > 200*time.Millisecond {
		t.Errorf("no lease: waited %s", took)
	}
	held := fake.NewClientset(heldLease("pod-a_run1", time.Now()))
	if took := wait(held, 300*time.Millisecond); took < 300*time.Millisecond {
		t.Errorf("its pod's controllers hold the lease: returned after %s, want the whole wait", took)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := testLease.release(context.Background(), held, "pod-a", time.Now().Add(-time.Hour)); err != nil {
			t.Error(err)
		}
	}()
	if took := wait(held, 5*time.Second); took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("handed back after 200 ms: waited %s", took)
	}
}

func TestHandBackOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o       handBackOptions
		wantErr string
	}{
		{handBackOptions{}, ""},
		{handBackOptions{lease: "kube-system/kube-controller-manager", wait: time.Second}, ""},
		{handBackOptions{lease: "kube-controller-manager", wait: time.Second}, "--kubenest-controllers-lease"},
		{handBackOptions{lease: "a/b/c", wait: time.Second}, "--kubenest-controllers-lease"},
		{handBackOptions{lease: "kube-system/kcm", wait: 0}, "--kubenest-controllers-lease-wait"},
	} {
		err := tc.o.validate()
		if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%+v: error %v, want one naming %q", tc.o, err, tc.wantErr)
		}
	}
}
