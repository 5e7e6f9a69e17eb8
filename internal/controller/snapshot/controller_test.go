package snapshot_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/snapshot"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

const ns = "tenants"

// cpNS is the control-plane namespace of the tenants of ns.
var cpNS = naming.ControlPlaneNamespace(ns)

// startSnapshots runs the snapshot controllers against env until the test ends.
func startSnapshots(t *testing.T, env *testenv.Env) {
	t.Helper()
	mgr := env.Manager(t)
	settings := controlplane.DefaultSettings()
	settings.Image = "kubenest.io/kubenest:test"
	if err := (&snapshot.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Settings:  settings,
		Recorder:  mgr.GetEventRecorder("kubenest-operator"),
	}).SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// readyTenant makes VirtualCluster name of ns, Ready, its control plane in namespace home (as
// the VirtualCluster controller would have said in its status; it does not run here).
func readyTenant(t *testing.T, ctx context.Context, c client.Client, name, home string) *v1alpha1.VirtualCluster {
	t.Helper()
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.VirtualClusterSpec{Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}}},
	}
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	vc.Status = v1alpha1.VirtualClusterStatus{
		Phase:                 v1alpha1.PhaseReady,
		ControlPlaneNamespace: home,
		ServiceCIDR:           "10.254.0.0/16",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready",
			Message: "ready", LastTransitionTime: metav1.Now()}},
	}
	if err := c.Status().Update(ctx, vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

func snapshotOf(vc *v1alpha1.VirtualCluster, name string, s3 *v1alpha1.S3Location) *v1alpha1.VirtualClusterSnapshot {
	return &v1alpha1.VirtualClusterSnapshot{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vc.Namespace},
		Spec:       v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: vc.Name, S3: s3},
	}
}

func waitSnapshot(t *testing.T, ctx context.Context, c client.Client, name string, ok func(*v1alpha1.VirtualClusterSnapshot) bool) *v1alpha1.VirtualClusterSnapshot {
	t.Helper()
	s := &v1alpha1.VirtualClusterSnapshot{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s); err != nil {
			return false, nil
		}
		return ok(s), nil
	})
	if err != nil {
		t.Fatalf("VirtualClusterSnapshot %s: %v; status %+v", name, err, s.Status)
	}
	return s
}

func get(t *testing.T, ctx context.Context, c client.Client, namespace, name string, obj client.Object) {
	t.Helper()
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, obj); err != nil {
		t.Fatalf("%T %s/%s: %v", obj, namespace, name, err)
	}
}

// madeFor checks that obj, in the control-plane namespace, was labelled for snap and is owned
// by nobody (an owner in another namespace counts as absent).
func madeFor(t *testing.T, obj client.Object, vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot) {
	t.Helper()
	l := obj.GetLabels()
	if l[controlplane.LabelSnapshotUID] != string(snap.UID) || l[naming.LabelVirtualClusterNamespace] != ns || l[naming.LabelVirtualCluster] != vc.Name {
		t.Errorf("%T %s: labels %v, want the snapshot's UID, the tenant's name and namespace", obj, obj.GetName(), l)
	}
	if refs := obj.GetOwnerReferences(); len(refs) != 0 {
		t.Errorf("%T %s: owner references %+v, want none", obj, obj.GetName(), refs)
	}
	if !controlplane.MadeFor(obj, snap) {
		t.Errorf("%T %s/%s: not MadeFor the snapshot", obj, obj.GetNamespace(), obj.GetName())
	}
}

// goneOrGoing waits until obj of the control-plane namespace is gone or being deleted (a
// claim keeps its protection finalizer here, where no controller removes it).
func goneOrGoing(t *testing.T, ctx context.Context, c client.Client, name string, obj client.Object) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: name}, obj)
		return apierrors.IsNotFound(err) || (err == nil && !obj.GetDeletionTimestamp().IsZero()), nil
	})
	if err != nil {
		t.Errorf("%T %s/%s is neither gone nor being deleted: %v", obj, cpNS, name, err)
	}
}

// TestSnapshotInControlPlaneNamespace: a new tenant's snapshot is taken in its control-plane
// namespace, where its etcd client certificate is: the claim, the job and the copy of the
// bucket's keys are labelled for it, it holds a finalizer, and what it made goes when it is
// deleted. A claim of that name the operator did not make for it is never used.
func TestSnapshotInControlPlaneNamespace(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c := env.Client
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		{ObjectMeta: metav1.ObjectMeta{Name: cpNS, Labels: map[string]string{
			naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: ns}}},
	} {
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	vc := readyTenant(t, ctx, c, "alpha", cpNS)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bucket", Namespace: ns},
		Data: map[string][]byte{"accessKeyID": []byte("id"), "secretAccessKey": []byte("secret"), "sessionNote": []byte("other")}}
	if err := c.Create(ctx, creds); err != nil {
		t.Fatal(err)
	}
	// A claim of the name a snapshot's would have, that the operator did not make.
	squatted := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: controlplane.SnapshotClaimName("squatted"), Namespace: cpNS,
			Labels: map[string]string{controlplane.LabelSnapshotUID: "another-snapshot", naming.LabelVirtualClusterNamespace: ns}},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
	}
	if err := c.Create(ctx, squatted); err != nil {
		t.Fatal(err)
	}
	startSnapshots(t, env)

	onClaim, inS3, taken := snapshotOf(vc, "on-claim", nil),
		snapshotOf(vc, "in-s3", &v1alpha1.S3Location{Endpoint: "s3.example:9000", Bucket: "backups", CredentialsSecretName: creds.Name}),
		snapshotOf(vc, "squatted", nil)
	for _, s := range []*v1alpha1.VirtualClusterSnapshot{onClaim, inS3, taken} {
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("onto a claim", func(t *testing.T) {
		snap := waitSnapshot(t, ctx, c, onClaim.Name, func(s *v1alpha1.VirtualClusterSnapshot) bool {
			return s.Status.Phase == v1alpha1.SnapshotRunning
		})
		if !slices.Contains(snap.Finalizers, v1alpha1.FinalizerSnapshot) {
			t.Errorf("finalizers %v lack %s", snap.Finalizers, v1alpha1.FinalizerSnapshot)
		}
		name := controlplane.SnapshotClaimName(snap.Name)
		claim, job := &corev1.PersistentVolumeClaim{}, &batchv1.Job{}
		get(t, ctx, c, cpNS, name, claim)
		get(t, ctx, c, cpNS, name, job)
		madeFor(t, claim, vc, snap)
		madeFor(t, job, vc, snap)
		for _, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &batchv1.Job{}} {
			if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj); !apierrors.IsNotFound(err) {
				t.Errorf("%T %s in the tenant's namespace: %v", obj, name, err)
			}
		}
		pod := job.Spec.Template.Spec
		if !slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
			return v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == name
		}) {
			t.Errorf("the job's pod does not mount claim %s: %+v", name, pod.Volumes)
		}
		if want := "--endpoint=https://alpha-etcd.kubenest-cp-tenants.svc:2379"; !slices.Contains(pod.Containers[0].Command, want) {
			t.Errorf("command %v lacks %s", pod.Containers[0].Command, want)
		}
	})

	t.Run("to S3, with a copy of the bucket's keys", func(t *testing.T) {
		snap := waitSnapshot(t, ctx, c, inS3.Name, func(s *v1alpha1.VirtualClusterSnapshot) bool {
			return s.Status.Phase == v1alpha1.SnapshotRunning
		})
		job, copied := &batchv1.Job{}, &corev1.Secret{}
		get(t, ctx, c, cpNS, controlplane.SnapshotClaimName(snap.Name), job)
		get(t, ctx, c, cpNS, controlplane.SnapshotCredentialsName(snap.Name), copied)
		madeFor(t, job, vc, snap)
		madeFor(t, copied, vc, snap)
		if got := slices.Sorted(maps.Keys(copied.Data)); !slices.Equal(got, []string{"accessKeyID", "secretAccessKey"}) ||
			string(copied.Data["secretAccessKey"]) != "secret" {
			t.Errorf("the copy holds %q, want the bucket's two keys", got)
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: controlplane.SnapshotClaimName(snap.Name)}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
			t.Errorf("a claim for a snapshot stored in S3: %v", err)
		}
		for _, e := range job.Spec.Template.Spec.Containers[0].Env {
			if ref := e.ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != copied.Name {
				t.Errorf("env %s does not read the copy %s: %+v", e.Name, copied.Name, e.ValueFrom)
			}
		}
	})

	t.Run("a claim the operator did not make for it", func(t *testing.T) {
		snap := waitSnapshot(t, ctx, c, taken.Name, func(s *v1alpha1.VirtualClusterSnapshot) bool {
			return s.Status.Phase == v1alpha1.SnapshotFailed
		})
		if cond := meta.FindStatusCondition(snap.Status.Conditions, v1alpha1.ConditionSnapshotComplete); cond == nil || cond.Reason != snapshot.ReasonClaimTaken {
			t.Errorf("condition %+v, want reason %s", cond, snapshot.ReasonClaimTaken)
		}
		if err := c.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: controlplane.SnapshotClaimName(snap.Name)}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
			t.Errorf("a job for the snapshot whose claim is not its own: %v", err)
		}
	})

	t.Run("deleted, what it made goes", func(t *testing.T) {
		for _, s := range []*v1alpha1.VirtualClusterSnapshot{onClaim, inS3, taken} {
			if err := c.Delete(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range []*v1alpha1.VirtualClusterSnapshot{onClaim, inS3, taken} {
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.VirtualClusterSnapshot{})), nil
			})
			if err != nil {
				t.Errorf("VirtualClusterSnapshot %s not gone: %v", s.Name, err)
			}
		}
		goneOrGoing(t, ctx, c, controlplane.SnapshotClaimName(onClaim.Name), &corev1.PersistentVolumeClaim{})
		goneOrGoing(t, ctx, c, controlplane.SnapshotClaimName(onClaim.Name), &batchv1.Job{})
		goneOrGoing(t, ctx, c, controlplane.SnapshotClaimName(inS3.Name), &batchv1.Job{})
		goneOrGoing(t, ctx, c, controlplane.SnapshotCredentialsName(inS3.Name), &corev1.Secret{})
		// What it did not make stays.
		claim := &corev1.PersistentVolumeClaim{}
		get(t, ctx, c, cpNS, squatted.Name, claim)
		if !claim.DeletionTimestamp.IsZero() {
			t.Errorf("claim %s, not the snapshot's, is being deleted", claim.Name)
		}
		// And the tenant's own Secret.
		get(t, ctx, c, ns, creds.Name, &corev1.Secret{})
	})

	t.Run("a snapshot keeps the control-plane namespace after its tenant, and the last one takes it", func(t *testing.T) {
		last := snapshotOf(vc, "last", nil)
		if err := c.Create(ctx, last); err != nil {
			t.Fatal(err)
		}
		waitSnapshot(t, ctx, c, last.Name, func(s *v1alpha1.VirtualClusterSnapshot) bool {
			return slices.Contains(s.Finalizers, v1alpha1.FinalizerSnapshot)
		})
		if err := c.Delete(ctx, vc); err != nil {
			t.Fatal(err)
		}
		cp := &corev1.Namespace{}
		get(t, ctx, c, "", cpNS, cp)
		if !cp.DeletionTimestamp.IsZero() {
			t.Fatalf("namespace %s is being deleted while snapshot %s holds its claim there", cpNS, last.Name)
		}
		get(t, ctx, c, cpNS, controlplane.SnapshotClaimName(last.Name), &corev1.PersistentVolumeClaim{})
		if err := c.Delete(ctx, last); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Name: cpNS}, cp)
			return apierrors.IsNotFound(err) || (err == nil && !cp.DeletionTimestamp.IsZero()), nil
		})
		if err != nil {
			t.Errorf("namespace %s is not being deleted after the namespace's last snapshot went, with no tenant left: %v", cpNS, err)
		}
	})
}
