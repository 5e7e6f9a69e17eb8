package virtualcluster

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// tenantKinds are the kinds of host object a tenant owns, workloads first so that pods stop
// before the Secrets they mount go.
var tenantKinds = []struct {
	kind string
	list client.ObjectList
	obj  client.Object
}{
	{"Deployment", &appsv1.DeploymentList{}, &appsv1.Deployment{}},
	{"StatefulSet", &appsv1.StatefulSetList{}, &appsv1.StatefulSet{}},
	// ReplicaSets and ControllerRevisions carry the pod template's labels; the host's
	// controllers made them, and they go with their owners, but only eventually.
	{"ReplicaSet", &appsv1.ReplicaSetList{}, &appsv1.ReplicaSet{}},
	{"ControllerRevision", &appsv1.ControllerRevisionList{}, &appsv1.ControllerRevision{}},
	{"PodDisruptionBudget", &policyv1.PodDisruptionBudgetList{}, &policyv1.PodDisruptionBudget{}},
	{"Pod", &corev1.PodList{}, &corev1.Pod{}},
	{"PersistentVolumeClaim", &corev1.PersistentVolumeClaimList{}, &corev1.PersistentVolumeClaim{}},
	{"Service", &corev1.ServiceList{}, &corev1.Service{}},
	{"ConfigMap", &corev1.ConfigMapList{}, &corev1.ConfigMap{}},
	{"Secret", &corev1.SecretList{}, &corev1.Secret{}},
}

// reconcileDelete removes everything the tenant has in the host and only then releases the
// VirtualCluster. Owner references would remove it too, but later and unseen; waiting here
// means a deleted VirtualCluster leaves nothing behind, and a new one of the same name never
// meets the old one's objects.
func (r *Reconciler) reconcileDelete(ctx context.Context, vc *v1alpha1.VirtualCluster) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(vc, naming.FinalizerVirtualCluster) {
		return reconcile.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	r.Starts.Done(client.ObjectKeyFromObject(vc))
	if r.SharedNodes != nil {
		r.SharedNodes.Manager.Stop(vc.Namespace + "/" + vc.Name)
	}
	if r.Wake != nil {
		r.Wake.Release(client.ObjectKeyFromObject(vc))
	}
	// Lent nodes go back to the host first.
	away, err := r.releaseNodes(ctx, vc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if away > 0 {
		return r.deleting(ctx, vc, fmt.Sprintf("deleting the tenant: waiting for %d lent nodes to return to the host", away))
	}
	if err := r.deleteCACertificate(ctx, vc); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.releaseServiceCIDR(ctx, vc); err != nil {
		return reconcile.Result{}, err
	}
	// Its snapshots' claims, jobs and credentials are theirs: a snapshot outlives its tenant,
	// and goes when it is deleted (package snapshot).
	selector := client.MatchingLabelsSelector{Selector: controlplane.TenantObjects(vc.Name)}
	remaining := 0
	for _, ns := range slices.Compact([]string{controlplane.Namespace(vc), vc.Namespace}) {
		for _, k := range tenantKinds {
			if err := r.APIReader.List(ctx, k.list, client.InNamespace(ns), selector); err != nil {
				return reconcile.Result{}, fmt.Errorf("listing %ss: %w", k.kind, err)
			}
			n := meta.LenList(k.list)
			if n == 0 {
				continue
			}
			remaining += n
			opts := []client.DeleteAllOfOption{client.InNamespace(ns), selector,
				client.PropagationPolicy(metav1.DeletePropagationBackground)}
			if k.kind == "Pod" {
				// The tenant's data goes with it: its components need no graceful shutdown, and
				// an apiserver whose etcd is already gone would wait out the whole grace period.
				opts = append(opts, client.GracePeriodSeconds(0))
			}
			if err := r.Client.DeleteAllOf(ctx, k.obj, opts...); err != nil {
				return reconcile.Result{}, fmt.Errorf("deleting %ss: %w", k.kind, err)
			}
		}
	}
	if remaining > 0 {
		log.V(1).Info("waiting for the tenant's host objects to go", "remaining", remaining)
		return r.deleting(ctx, vc, fmt.Sprintf("deleting the tenant: %d host objects remain", remaining))
	}
	if err := cpnamespace.RemoveIfUnused(ctx, r.Client, r.APIReader, vc.Namespace, vc.UID); err != nil {
		return reconcile.Result{}, err
	}
	patch := client.MergeFrom(vc.DeepCopy())
	controllerutil.RemoveFinalizer(vc, naming.FinalizerVirtualCluster)
	if err := r.Client.Patch(ctx, vc, patch); err != nil {
		return reconcile.Result{}, fmt.Errorf("removing finalizer: %w", err)
	}
	forgetMetrics(vc)
	r.Tenants.Forget(vc.UID)
	log.Info("tenant deleted; nothing of it is left in the host")
	return reconcile.Result{}, nil
}

// deleting reports what deletion waits for, and comes back shortly.
func (r *Reconciler) deleting(ctx context.Context, vc *v1alpha1.VirtualCluster, msg string) (reconcile.Result, error) {
	before := vc.DeepCopy()
	conds := conditions{condition.Setter{List: &vc.Status.Conditions, Generation: vc.Generation, Now: r.Clock.Now()}}
	conds.Set(v1alpha1.ConditionReady, false, ReasonDeleting, msg)
	vc.Status.Phase = v1alpha1.PhaseDeleting
	if err := r.Client.Status().Patch(ctx, vc, client.MergeFrom(before)); err != nil {
		return reconcile.Result{}, fmt.Errorf("patching status: %w", err)
	}
	return reconcile.Result{RequeueAfter: deletionRetryInterval}, nil
}
