package virtualcluster

import (
	"cmp"
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(etcd), &appsv1.StatefulSet{})
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	restored := err == nil
	snap, problem, err := r.restorable(ctx, vc, vc.Spec.Restore.SnapshotName)
	if err != nil {
		return "", err
	}
	restore := controlplane.Restore{Snapshot: snap}
	if problem == "" && snap.Spec.S3 != nil {
		if restore.Credentials, problem, err = r.restoreCredentials(ctx, vc, snap, restored); err != nil {
			return "", err
		}
	}
	switch {
	case problem == "":
		restore.SHA256, restore.ServiceCIDR = snap.Status.SHA256, snap.Status.ServiceCIDR
		controlplane.WithRestore(etcd, vc, restore, s)
		return "", nil
	case restored:
		return "", nil
	default:
		return "spec.restore.snapshotName: " + problem, nil
	}
}

// restorable reads the named snapshot of vc's namespace and says why vc cannot be made from it,
// or "".
func (r *Reconciler) restorable(ctx context.Context, vc *v1alpha1.VirtualCluster, name string) (*v1alpha1.VirtualClusterSnapshot, string, error) {
	ns := vc.Namespace
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
	// The etcd members mount the claim, so it must be in their namespace.
	claim := &corev1.PersistentVolumeClaim{}
	home := controlplane.Namespace(vc)
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: home, Name: controlplane.SnapshotClaimName(name)}, claim)
	if apierrors.IsNotFound(err) {
		return nil, fmt.Sprintf("the volume claim of VirtualClusterSnapshot %s is not in namespace %s (gone, or taken by an earlier release in namespace %s)", name, home, ns), nil
	}
	if err != nil {
		return nil, "", err
	}
	if !controlplane.MadeFor(claim, snap) {
		return nil, fmt.Sprintf("volume claim %s was not made by the operator for VirtualClusterSnapshot %s", claim.Name, name), nil
	}
	return snap, "", nil
}

// restoreCredentials copies the keys of the S3 credentials Secret of snap (the tenant's, in
// vc's namespace) to where vc's etcd members read them, and returns the copy's name. A tenant
// of an earlier release, whose members run in its own namespace, reads the tenant's Secret.
// Once restored, the copy is left as it is: the members do not read it again.
func (r *Reconciler) restoreCredentials(ctx context.Context, vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot, restored bool) (string, string, error) {
	home := controlplane.Namespace(vc)
	if home == vc.Namespace {
		return snap.Spec.S3.CredentialsSecretName, "", nil
	}
	if restored {
		return controlplane.RestoreCredentialsName(vc.Name), "", nil
	}
	from := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: snap.Spec.S3.CredentialsSecretName}, from)
	if apierrors.IsNotFound(err) {
		return "", fmt.Sprintf("the S3 credentials Secret %s of VirtualClusterSnapshot %s is not in namespace %s", snap.Spec.S3.CredentialsSecretName, snap.Name, vc.Namespace), nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading the S3 credentials Secret: %w", err)
	}
	copied := controlplane.RestoreCredentials(vc, from)
	if err := r.apply(ctx, vc, copied); err != nil {
		return "", "", err
	}
	return copied.Name, "", nil
}

// snapshotToRestores maps a snapshot to the tenants of its namespace made from it.
func (r *Reconciler) snapshotToRestores() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		return r.requestsIn(ctx, obj.GetNamespace(), func(vc *v1alpha1.VirtualCluster) bool {
			return vc.Spec.Restore != nil && vc.Spec.Restore.SnapshotName == obj.GetName()
		})
	})
}

// requestsIn are the reconcile requests of the VirtualClusters of namespace that keep says to.
func (r *Reconciler) requestsIn(ctx context.Context, namespace string, keep func(*v1alpha1.VirtualCluster) bool) []reconcile.Request {
	vcs := &v1alpha1.VirtualClusterList{}
	if err := r.Client.List(ctx, vcs, client.InNamespace(namespace)); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range vcs.Items {
		if keep(&vcs.Items[i]) {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&vcs.Items[i])})
		}
	}
	return out
}
