package virtualcluster

import (
	"cmp"
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// ReasonRestoreWaiting: spec.restore names a snapshot that cannot be restored (yet).
const ReasonRestoreWaiting = "RestoreWaiting"

// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclustersnapshots,verbs=get;list;watch

// restore has the etcd StatefulSet of a tenant made from a snapshot (spec.restore) restore it,
// while the snapshot is there. Before the tenant's etcd exists, a snapshot that is missing,
// not taken yet, or whose volume claim is not the one the operator made for it, holds the
// tenant back with a message. Once the tenant's members have their data, the snapshot may go:
// the members do not need it any more.
func (r *Reconciler) restore(ctx context.Context, vc *v1alpha1.VirtualCluster, etcd *appsv1.StatefulSet, s controlplane.Settings) (string, error) {
	if vc.Spec.Restore == nil {
		return "", nil
	}
	name := vc.Spec.Restore.SnapshotName
	snap, problem, err := r.restorable(ctx, vc.Namespace, name)
	if err != nil {
		return "", err
	}
	if problem == "" {
		controlplane.WithRestore(etcd, vc, controlplane.Restore{
			Snapshot: snap, SHA256: snap.Status.SHA256, ServiceCIDR: snap.Status.ServiceCIDR,
		}, s)
		return "", nil
	}
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(etcd), &appsv1.StatefulSet{})
	if err == nil {
		return "", nil // restored already
	}
	if !apierrors.IsNotFound(err) {
		return "", err
	}
	return "spec.restore.snapshotName: " + problem, nil
}

// restorable reads the named snapshot and says why it cannot be restored, or "".
func (r *Reconciler) restorable(ctx context.Context, ns, name string) (*v1alpha1.VirtualClusterSnapshot, string, error) {
	snap := &v1alpha1.VirtualClusterSnapshot{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, snap)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("there is no VirtualClusterSnapshot %s in namespace %s", name, ns), nil
	}
	if err != nil {
		return nil, "", err
	}
	if snap.Status.Phase != v1alpha1.SnapshotSucceeded {
		return nil, fmt.Sprintf("VirtualClusterSnapshot %s is %s, not Succeeded", name, cmp.Or(string(snap.Status.Phase), "not taken yet")), nil
	}
	if snap.Status.ServiceCIDR == "" || snap.Status.SHA256 == "" {
		return nil, fmt.Sprintf("VirtualClusterSnapshot %s does not say which Service range and digest it has", name), nil
	}
	if snap.Spec.S3 != nil {
		return snap, "", nil // the restore checks the object's digest
	}
	claim := &corev1.PersistentVolumeClaim{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: controlplane.SnapshotClaimName(name)}, claim)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("the volume claim of VirtualClusterSnapshot %s is gone", name), nil
	}
	if err != nil {
		return nil, "", err
	}
	if owner := metav1.GetControllerOf(claim); owner == nil || owner.UID != snap.UID {
		return nil, fmt.Sprintf("volume claim %s was not made by the operator for VirtualClusterSnapshot %s", claim.Name, name), nil
	}
	return snap, "", nil
}

// snapshotToRestores maps a snapshot to the tenants of its namespace made from it.
func (r *Reconciler) snapshotToRestores() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		vcs := &v1alpha1.VirtualClusterList{}
		if err := r.Client.List(ctx, vcs, client.InNamespace(obj.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, vc := range vcs.Items {
			if vc.Spec.Restore != nil && vc.Spec.Restore.SnapshotName == obj.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vc)})
			}
		}
		return out
	})
}
