// Package cpnamespace holds what the VirtualCluster and snapshot controllers share about a
// namespace's control-plane namespace (naming.ControlPlaneNamespace): whose it is, and when it
// goes. It holds the control planes of the namespace's VirtualClusters and the claims of their
// snapshots, so it stays while either is there: a snapshot outlives its tenant.
package cpnamespace

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// Ours says whether ns is the control-plane namespace KubeNest made for the tenants of
// namespace tenants. The chart's admission policy lets nobody but the operator create a
// namespace of that name; its labels tell one made before the policy was installed.
func Ours(ns *corev1.Namespace, tenants string) bool {
	return ns.Name == naming.ControlPlaneNamespace(tenants) &&
		ns.Labels[naming.LabelManagedBy] == naming.ManagedByValue &&
		ns.Labels[naming.LabelVirtualClusterNamespace] == tenants
}

// RemoveIfUnused deletes the control-plane namespace of namespace tenants once it holds nothing
// anyone needs: no VirtualCluster is left there, nor a VirtualClusterSnapshot whose claim or
// job is in it (it has v1alpha1.FinalizerSnapshot), but the one of UID going, if any. Callers
// call it when one of those has nothing left in the host, and again once it is gone: two
// deleted together each see the other the first time. reader reads live, not from a cache.
func RemoveIfUnused(ctx context.Context, c client.Client, reader client.Reader, tenants string, going types.UID) error {
	vcs := &v1alpha1.VirtualClusterList{}
	if err := reader.List(ctx, vcs, client.InNamespace(tenants)); err != nil {
		return fmt.Errorf("listing the namespace's VirtualClusters: %w", err)
	}
	for _, vc := range vcs.Items {
		if vc.UID != going {
			return nil
		}
	}
	snaps := &v1alpha1.VirtualClusterSnapshotList{}
	if err := reader.List(ctx, snaps, client.InNamespace(tenants)); err != nil {
		return fmt.Errorf("listing the namespace's VirtualClusterSnapshots: %w", err)
	}
	for _, s := range snaps.Items {
		if s.UID != going && controllerutil.ContainsFinalizer(&s, v1alpha1.FinalizerSnapshot) {
			return nil
		}
	}
	name := naming.ControlPlaneNamespace(tenants)
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !Ours(ns, tenants) || !ns.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := c.Delete(ctx, ns, client.Preconditions{UID: &ns.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the control-plane namespace %s: %w", name, err)
	}
	ctrl.LoggerFrom(ctx).Info("control-plane namespace deleted: its namespace has no tenant or snapshot left", "namespace", name)
	return nil
}

// IsControlPlanePod says whether pod, whose labels are those of a tenant's etcd or control-plane
// pod (nodepool.ControlPlaneSelector), is one: in the control-plane namespace its labels name,
// where only the operator makes pods, or in the namespace of a VirtualCluster an earlier release
// made that keeps its control plane there. The labels alone prove nothing: anyone who may create
// pods somewhere can put them on a pod pinned to every lendable node, which would then never be
// lent.
func IsControlPlanePod(ctx context.Context, c client.Reader, pod *corev1.Pod) bool {
	if ns := pod.Labels[naming.LabelVirtualClusterNamespace]; ns != "" && pod.Namespace == naming.ControlPlaneNamespace(ns) {
		return true
	}
	vc := &v1alpha1.VirtualCluster{}
	return c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: pod.Labels[naming.LabelVirtualCluster]}, vc) == nil &&
		controlplane.Namespace(vc) == pod.Namespace
}

// ControlPlanePods are the tenants' etcd and control-plane pods that run on a node: bound, not
// ended, and counted by IsControlPlanePod.
func ControlPlanePods(ctx context.Context, c client.Reader) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.MatchingLabelsSelector{Selector: nodepool.ControlPlaneSelector}); err != nil {
		return nil, fmt.Errorf("listing tenants' control-plane pods: %w", err)
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.Spec.NodeName == "" || podutil.IsPodTerminal(&p) || !IsControlPlanePod(ctx, c, &p)
	}), nil
}
