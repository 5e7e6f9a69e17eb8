// Package snapshot reconciles VirtualClusterSnapshots: it takes each one once, with a job that
// streams the tenant's etcd snapshot onto a volume claim of the snapshot's own, and it takes
// the snapshots of tenants with a schedule (spec.snapshots), keeping the newest few.
package snapshot

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/internal/etcdsnapshot"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Reasons of the Complete condition.
const (
	ReasonWaiting    = "Waiting"
	ReasonRunning    = "Running"
	ReasonTaken      = "Taken"
	ReasonFailed     = "Failed"
	ReasonClaimTaken = "ClaimNotOurs"
	ReasonJobTaken   = "JobNotOurs"
)

// Reconciler takes VirtualClusterSnapshots.
type Reconciler struct {
	Client client.Client
	// APIReader reads what the cache does not hold: the tenant's S3 credentials Secret.
	APIReader client.Reader
	Settings  controlplane.Settings
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
}

// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclustersnapshots,verbs=get;list;watch;create;delete;update;patch
// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclustersnapshots/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclustersnapshots/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=create

// SetupWithManager registers the snapshot controller and the schedule controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if err := ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.VirtualClusterSnapshot{}).
		Owns(&batchv1.Job{}).
		Watches(&batchv1.Job{}, jobToSnapshot()).
		Watches(&v1alpha1.VirtualCluster{}, r.virtualClusterToSnapshots()).
		WithOptions(opts).
		Named("virtualclustersnapshot").
		Complete(r); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.VirtualCluster{}).
		WithOptions(opts).
		Named("snapshotschedule").
		Complete(reconcile.Func(r.reconcileSchedule))
}

// Reconcile takes one snapshot, once.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	snap := &v1alpha1.VirtualClusterSnapshot{}
	if err := r.Client.Get(ctx, req.NamespacedName, snap); apierrors.IsNotFound(err) {
		// Deleted with others of the namespace, each of which saw the others on its way out.
		return reconcile.Result{}, cpnamespace.RemoveIfUnused(ctx, r.Client, r.APIReader, req.Namespace, "")
	} else if err != nil {
		return reconcile.Result{}, err
	}
	if !snap.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, r.remove(ctx, snap)
	}
	before := snap.DeepCopy()
	err := r.take(ctx, snap, condition.Setter{List: &snap.Status.Conditions, Generation: snap.Generation, Now: r.Clock.Now()})
	if !equalStatus(before, snap) {
		if perr := r.Client.Status().Patch(ctx, snap, client.MergeFrom(before)); perr != nil && err == nil {
			err = perr
		}
	}
	return reconcile.Result{}, err
}

func (r *Reconciler) take(ctx context.Context, snap *v1alpha1.VirtualClusterSnapshot, conds condition.Setter) error {
	if done(snap) {
		// The job's pod and the copy of the bucket's keys are not needed any more once the
		// result is in the status.
		if err := r.deleteMadeFor(ctx, snap, &batchv1.Job{}, controlplane.SnapshotClaimName(snap.Name)); err != nil {
			return err
		}
		return r.deleteMadeFor(ctx, snap, &corev1.Secret{}, controlplane.SnapshotCredentialsName(snap.Name))
	}
	vc := &v1alpha1.VirtualCluster{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: snap.Spec.VirtualClusterName}, vc)
	if apierrors.IsNotFound(err) {
		r.pending(snap, conds, fmt.Sprintf("spec.virtualClusterName: there is no VirtualCluster %s in namespace %s", snap.Spec.VirtualClusterName, snap.Namespace))
		return nil
	}
	if err != nil {
		return err
	}

	// The claim and the job are made once, as the first step, where the tenant's etcd client
	// certificate is (its control-plane namespace); a claim or a job of that name the operator
	// did not make for this snapshot is never used.
	job := &batchv1.Job{}
	jobKey := types.NamespacedName{Namespace: controlplane.Namespace(vc), Name: controlplane.SnapshotClaimName(snap.Name)}
	claim := &corev1.PersistentVolumeClaim{}
	if snap.Spec.S3 == nil {
		err = r.Client.Get(ctx, jobKey, claim)
		if err == nil && !controlplane.MadeFor(claim, snap) {
			r.fail(snap, conds, ReasonClaimTaken, fmt.Sprintf("volume claim %s exists and was not made by the operator for this snapshot", claim.Name))
			return nil
		}
		if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	err = r.Client.Get(ctx, jobKey, job)
	if err == nil && !controlplane.MadeFor(job, snap) {
		// Its pod's word (the termination message) would become the snapshot's status.
		r.fail(snap, conds, ReasonJobTaken, fmt.Sprintf("job %s exists and was not made by the operator for this snapshot", job.Name))
		return nil
	}
	if apierrors.IsNotFound(err) {
		if vc.Spec.Sleep.Asleep {
			r.pending(snap, conds, fmt.Sprintf("VirtualCluster %s is asleep: the snapshot is taken once it wakes (spec.sleep.asleep: false)", vc.Name))
			return nil
		}
		if !meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionReady) {
			r.pending(snap, conds, fmt.Sprintf("VirtualCluster %s is not Ready", vc.Name))
			return nil
		}
		if jobKey.Namespace != snap.Namespace && !controllerutil.ContainsFinalizer(snap, v1alpha1.FinalizerSnapshot) {
			// What is made in the control-plane namespace is removed by the operator, not
			// by owner references: the finalizer first, in case it is deleted meanwhile.
			patch := client.MergeFrom(snap.DeepCopy())
			controllerutil.AddFinalizer(snap, v1alpha1.FinalizerSnapshot)
			if err := r.Client.Patch(ctx, snap, patch); err != nil {
				return fmt.Errorf("adding finalizer: %w", err)
			}
		}
		if s3 := snap.Spec.S3; s3 != nil && jobKey.Namespace != snap.Namespace {
			creds := &corev1.Secret{}
			err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: snap.Namespace, Name: s3.CredentialsSecretName}, creds)
			if apierrors.IsNotFound(err) {
				r.pending(snap, conds, fmt.Sprintf("spec.s3.credentialsSecretName: there is no Secret %s in namespace %s", s3.CredentialsSecretName, snap.Namespace))
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading the S3 credentials Secret: %w", err)
			}
			if err := r.create(ctx, snap, controlplane.SnapshotCredentials(vc, snap, creds)); err != nil {
				return err
			}
		}
		if snap.Spec.S3 == nil && claim.Name == "" {
			claim = controlplane.SnapshotClaim(vc, snap)
			if err := r.create(ctx, snap, claim); err != nil {
				return err
			}
		}
		job = controlplane.SnapshotJob(vc, snap, r.Settings)
		if err := r.create(ctx, snap, job); err != nil {
			return err
		}
		now := metav1.NewTime(r.Clock.Now())
		snap.Status.Phase, snap.Status.StartTime = v1alpha1.SnapshotRunning, &now
		snap.Status.ServiceCIDR, snap.Status.Version = vc.Status.ServiceCIDR, vc.Status.Version
		snap.Status.Location = controlplane.SnapshotLocation(snap)
		conds.Set(v1alpha1.ConditionSnapshotComplete, false, ReasonRunning, "taking the snapshot of "+vc.Name)
		ctrl.LoggerFrom(ctx).Info("taking a snapshot", "virtualCluster", vc.Name)
		return nil
	}
	if err != nil {
		return err
	}
	switch {
	case jobCondition(job, batchv1.JobComplete):
		res, err := r.result(ctx, job)
		if err != nil {
			r.fail(snap, conds, ReasonFailed, "the snapshot job finished, but "+err.Error())
			return nil
		}
		now := metav1.NewTime(r.Clock.Now())
		snap.Status.Phase, snap.Status.CompletionTime = v1alpha1.SnapshotSucceeded, &now
		snap.Status.SizeBytes, snap.Status.Revision, snap.Status.SHA256 = res.SizeBytes, res.Revision, res.SHA256
		snap.Status.Size = etcdsnapshot.HumanSize(res.SizeBytes)
		msg := fmt.Sprintf("%d keys at revision %d, %s, in %s", res.Keys, res.Revision, snap.Status.Size, snap.Status.Location)
		conds.Set(v1alpha1.ConditionSnapshotComplete, true, ReasonTaken, msg)
		r.Recorder.Eventf(snap, nil, corev1.EventTypeNormal, "Taken", "Snapshot", "snapshot of %s taken: %s", vc.Name, msg)
	case jobCondition(job, batchv1.JobFailed):
		why := "the snapshot job failed"
		if out := r.lastMessage(ctx, job); out != "" {
			why += ": " + out
		}
		r.fail(snap, conds, ReasonFailed, why)
	default:
		// A pod that cannot start (its credentials Secret missing, say) says so here rather
		// than only when the job's deadline ends it.
		for _, p := range r.jobPods(ctx, job) {
			for _, st := range p.Status.ContainerStatuses {
				if w := st.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" {
					conds.Set(v1alpha1.ConditionSnapshotComplete, false, ReasonRunning, fmt.Sprintf("the snapshot job's pod %s waits: %s: %s", p.Name, w.Reason, w.Message))
				}
			}
		}
	}
	return nil
}

func (r *Reconciler) create(ctx context.Context, snap *v1alpha1.VirtualClusterSnapshot, obj client.Object) error {
	if obj.GetNamespace() == snap.Namespace { // an earlier release's tenant; else labelled (MadeFor)
		if err := controllerutil.SetControllerReference(snap, obj, r.Client.Scheme()); err != nil {
			return err
		}
	}
	if err := r.Client.Create(ctx, obj); client.IgnoreAlreadyExists(err) != nil {
		return fmt.Errorf("creating %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

func (r *Reconciler) pending(snap *v1alpha1.VirtualClusterSnapshot, conds condition.Setter, why string) {
	snap.Status.Phase = v1alpha1.SnapshotPending
	conds.Set(v1alpha1.ConditionSnapshotComplete, false, ReasonWaiting, why)
}

func (r *Reconciler) fail(snap *v1alpha1.VirtualClusterSnapshot, conds condition.Setter, reason, why string) {
	snap.Status.Phase = v1alpha1.SnapshotFailed
	conds.Set(v1alpha1.ConditionSnapshotComplete, false, reason, why)
	r.Recorder.Eventf(snap, nil, corev1.EventTypeWarning, "SnapshotFailed", "Snapshot", "%s", why)
}

func done(snap *v1alpha1.VirtualClusterSnapshot) bool {
	return snap.Status.Phase == v1alpha1.SnapshotSucceeded || snap.Status.Phase == v1alpha1.SnapshotFailed
}

func jobCondition(job *batchv1.Job, typ batchv1.JobConditionType) bool {
	for _, c := range job.Status.Conditions {
		if c.Type == typ && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// result reads what the job's succeeded pod took, from its termination message. It is
// checked for shape only: the restore checks the file's digest again.
func (r *Reconciler) result(ctx context.Context, job *batchv1.Job) (etcdsnapshot.Result, error) {
	for _, p := range r.jobPods(ctx, job) {
		for _, st := range p.Status.ContainerStatuses {
			if t := st.State.Terminated; t != nil && t.ExitCode == 0 {
				var res etcdsnapshot.Result
				if err := json.Unmarshal([]byte(t.Message), &res); err != nil {
					return res, fmt.Errorf("its pod %s did not say what it took: %w", p.Name, err)
				}
				if b, err := hex.DecodeString(res.SHA256); err != nil || len(b) != 32 || res.SizeBytes <= 0 || res.Revision <= 0 {
					return res, fmt.Errorf("its pod %s said it took %q, which is not a snapshot's description", p.Name, t.Message)
				}
				return res, nil
			}
		}
	}
	return etcdsnapshot.Result{}, fmt.Errorf("no pod of job %s finished successfully", job.Name)
}

// lastMessage is the termination message (or the log's end) of the job's last failed pod.
func (r *Reconciler) lastMessage(ctx context.Context, job *batchv1.Job) string {
	msg := ""
	for _, p := range r.jobPods(ctx, job) {
		for _, st := range p.Status.ContainerStatuses {
			if t := st.State.Terminated; t != nil && t.ExitCode != 0 {
				msg = strings.TrimSpace(t.Message)
			}
		}
	}
	if len(msg) > 500 {
		msg = "..." + msg[len(msg)-500:]
	}
	return msg
}

func (r *Reconciler) jobPods(ctx context.Context, job *batchv1.Job) []corev1.Pod {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods.Items
}

// remove deletes what was made for a deleted snapshot in the control-plane namespace (owner
// references remove what an earlier release made next to it), then lets it go.
func (r *Reconciler) remove(ctx context.Context, snap *v1alpha1.VirtualClusterSnapshot) error {
	if !controllerutil.ContainsFinalizer(snap, v1alpha1.FinalizerSnapshot) {
		return nil
	}
	for _, it := range []struct {
		obj  client.Object
		name string
	}{
		{&batchv1.Job{}, controlplane.SnapshotClaimName(snap.Name)},
		{&corev1.PersistentVolumeClaim{}, controlplane.SnapshotClaimName(snap.Name)},
		{&corev1.Secret{}, controlplane.SnapshotCredentialsName(snap.Name)},
	} {
		if err := r.deleteMadeFor(ctx, snap, it.obj, it.name); err != nil {
			return err
		}
	}
	// The tenants of the namespace gone, the last snapshot takes the control-plane namespace.
	if err := cpnamespace.RemoveIfUnused(ctx, r.Client, r.APIReader, snap.Namespace, snap.UID); err != nil {
		return err
	}
	patch := client.MergeFrom(snap.DeepCopy())
	controllerutil.RemoveFinalizer(snap, v1alpha1.FinalizerSnapshot)
	return client.IgnoreNotFound(r.Client.Patch(ctx, snap, patch))
}

// deleteMadeFor deletes the object called name that was made for snap, in the control-plane
// namespace or in snap's own, if there is one.
func (r *Reconciler) deleteMadeFor(ctx context.Context, snap *v1alpha1.VirtualClusterSnapshot, obj client.Object, name string) error {
	for _, ns := range []string{naming.ControlPlaneNamespace(snap.Namespace), snap.Namespace} {
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %T %s: %w", obj, name, err)
		}
		if !controlplane.MadeFor(obj, snap) {
			continue
		}
		if err := r.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %T %s: %w", obj, name, err)
		}
	}
	return nil
}

// jobToSnapshot maps a snapshot's job in a control-plane namespace to the snapshot, which
// cannot own it there.
func jobToSnapshot() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		tenants := obj.GetLabels()[naming.LabelVirtualClusterNamespace]
		if obj.GetLabels()[controlplane.LabelSnapshotUID] == "" || tenants == "" || obj.GetNamespace() != naming.ControlPlaneNamespace(tenants) {
			return nil
		}
		name, ok := strings.CutSuffix(obj.GetName(), controlplane.SnapshotClaimName(""))
		if !ok {
			return nil
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: tenants, Name: name}}}
	})
}

// virtualClusterToSnapshots wakes the pending snapshots of a tenant when it changes (it may
// be Ready now).
func (r *Reconciler) virtualClusterToSnapshots() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		snaps := &v1alpha1.VirtualClusterSnapshotList{}
		if err := r.Client.List(ctx, snaps, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, s := range snaps.Items {
			if s.Spec.VirtualClusterName == obj.GetName() && !done(&s) {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&s)})
			}
		}
		return out
	})
}

func equalStatus(a, b *v1alpha1.VirtualClusterSnapshot) bool {
	ja, _ := json.Marshal(a.Status)
	jb, _ := json.Marshal(b.Status)
	return string(ja) == string(jb)
}

// reconcileSchedule takes a tenant's scheduled snapshot when it is due and deletes the
// scheduled snapshots beyond spec.snapshots.keep, oldest first.
func (r *Reconciler) reconcileSchedule(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vc := &v1alpha1.VirtualCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, vc); err != nil || !vc.DeletionTimestamp.IsZero() || vc.Spec.Snapshots == nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	sched, err := cron.ParseStandard(vc.Spec.Snapshots.Schedule)
	if err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "InvalidSchedule", "Snapshot", "spec.snapshots.schedule %q: %v", vc.Spec.Snapshots.Schedule, err)
		return reconcile.Result{}, nil
	}
	snaps := &v1alpha1.VirtualClusterSnapshotList{}
	if err := r.Client.List(ctx, snaps, client.InNamespace(vc.Namespace), client.MatchingLabels{v1alpha1.LabelScheduled: vc.Name}); err != nil {
		return reconcile.Result{}, err
	}
	scheduled := snaps.Items
	slices.SortFunc(scheduled, func(a, b v1alpha1.VirtualClusterSnapshot) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	last := vc.CreationTimestamp.Time
	if n := len(scheduled); n > 0 {
		last = scheduled[n-1].CreationTimestamp.Time
	}
	now := r.Clock.Now()
	next := sched.Next(last)
	if !now.Before(next) && vc.Spec.Sleep.Asleep {
		// Asleep, the tenant's data does not change: the snapshot that falls due is taken
		// when it wakes, which changes the VirtualCluster and so comes back here.
		return reconcile.Result{}, nil
	}
	if !now.Before(next) {
		snap := &v1alpha1.VirtualClusterSnapshot{
			ObjectMeta: metav1.ObjectMeta{
				Name:      fmt.Sprintf("%s-%d", vc.Name, now.Unix()),
				Namespace: vc.Namespace,
				Labels:    map[string]string{v1alpha1.LabelScheduled: vc.Name},
			},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: vc.Name},
		}
		if err := r.Client.Create(ctx, snap); client.IgnoreAlreadyExists(err) != nil {
			return reconcile.Result{}, fmt.Errorf("creating scheduled snapshot %s: %w", snap.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("scheduled snapshot created", "snapshot", snap.Name)
		scheduled = append(scheduled, *snap)
		next = sched.Next(now)
	}
	for len(scheduled) > int(vc.Spec.Snapshots.Keep) {
		old := scheduled[0]
		scheduled = scheduled[1:]
		if err := r.Client.Delete(ctx, &old); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting snapshot %s beyond spec.snapshots.keep: %w", old.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("scheduled snapshot deleted: beyond spec.snapshots.keep", "snapshot", old.Name)
	}
	return reconcile.Result{RequeueAfter: max(next.Sub(now), time.Second)}, nil
}
