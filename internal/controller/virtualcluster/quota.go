package virtualcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// +kubebuilder:rbac:groups="",resources=resourcequotas,verbs=get;list;watch;create;update;delete

// A tenant's control plane runs in its control-plane namespace, so the ResourceQuotas a
// platform puts on the tenant's own namespace do not count it: what its users write into the
// VirtualCluster (component and etcd resources, etcd volume sizes, replicas, snapshots to
// keep) would take the host's CPU, memory and storage past them. Each ResourceQuota of the
// namespace is therefore copied into its control-plane namespace, spec and all, where it
// bounds the control planes of the namespace's tenants (with their snapshots) as it bounds the
// namespace's own objects. A namespace's users may not write its ResourceQuotas (Kubernetes'
// edit and admin roles do not), so a copy is the platform's bound. Quotas a platform puts in
// the control-plane namespace itself are its own and left alone.

// LabelQuotaOf names, on a copy, the ResourceQuota of the tenant's namespace it was made from.
const LabelQuotaOf = "kubenest.io/quota-of"

// controlPlaneQuotas makes the ResourceQuotas of vc's control-plane namespace the copies of
// those of vc's namespace, and says, for people, which of them is used up, if one is: what a
// control-plane pod that cannot be made waits for. A tenant an earlier release made runs in its
// own namespace, under its quotas already.
func (r *Reconciler) controlPlaneQuotas(ctx context.Context, vc *v1alpha1.VirtualCluster) (usedUp string, err error) {
	cp := controlplane.Namespace(vc)
	if cp == vc.Namespace {
		return "", nil
	}
	source := &corev1.ResourceQuotaList{}
	if err := r.Client.List(ctx, source, client.InNamespace(vc.Namespace)); err != nil {
		return "", fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", vc.Namespace, err)
	}
	copies := &corev1.ResourceQuotaList{}
	if err := r.Client.List(ctx, copies, client.InNamespace(cp), client.HasLabels{LabelQuotaOf}); err != nil {
		return "", fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", cp, err)
	}
	have := map[string]*corev1.ResourceQuota{}
	for i := range copies.Items {
		have[copies.Items[i].Name] = &copies.Items[i]
	}
	log := ctrl.LoggerFrom(ctx)
	for _, q := range source.Items {
		want := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: q.Name, Namespace: cp, Labels: map[string]string{
				naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: vc.Namespace, LabelQuotaOf: q.Name,
			}},
			Spec: *q.Spec.DeepCopy(),
		}
		current, ok := have[q.Name]
		delete(have, q.Name)
		switch {
		case !ok:
			if err := r.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return "", fmt.Errorf("copying ResourceQuota %s/%s into %s: %w", q.Namespace, q.Name, cp, err)
			}
			log.Info("the namespace's ResourceQuota copied into its control-plane namespace", "resourceQuota", q.Name, "namespace", cp)
		case !equality.Semantic.DeepEqual(current.Spec, want.Spec):
			current.Spec = want.Spec
			if err := r.Client.Update(ctx, current); err != nil {
				return "", fmt.Errorf("updating the copy of ResourceQuota %s/%s in %s: %w", q.Namespace, q.Name, cp, err)
			}
		}
		if usedUp == "" && ok {
			usedUp = quotaUsedUp(current, vc.Namespace)
		}
	}
	for _, gone := range have {
		if err := client.IgnoreNotFound(r.Client.Delete(ctx, gone)); err != nil {
			return "", fmt.Errorf("deleting the copy of ResourceQuota %s/%s, gone from %s: %w", cp, gone.Name, vc.Namespace, err)
		}
	}
	return usedUp, nil
}

// quotaUsedUp names the first resource of a quota's copy that is used up, as the quota
// controller last counted, or "".
func quotaUsedUp(q *corev1.ResourceQuota, namespace string) string {
	for _, name := range slices.Sorted(maps.Keys(q.Status.Hard)) {
		hard, used := q.Status.Hard[name], q.Status.Used[name]
		if used.Cmp(hard) >= 0 {
			return fmt.Sprintf("the control planes of namespace %s have used up %s of its ResourceQuota %s (%s of %s; it counts them in their own namespace too)",
				namespace, name, q.Name, used.String(), hard.String())
		}
	}
	return ""
}

// quotaToVirtualClusters wakes the VirtualClusters of a namespace whose ResourceQuota changed,
// or whose control-plane namespace's copy did.
func (r *Reconciler) quotaToVirtualClusters() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		ns := obj.GetNamespace()
		if tenants := obj.GetLabels()[naming.LabelVirtualClusterNamespace]; tenants != "" && obj.GetLabels()[LabelQuotaOf] != "" &&
			ns == naming.ControlPlaneNamespace(tenants) {
			ns = tenants
		}
		return r.requestsIn(ctx, ns, func(*v1alpha1.VirtualCluster) bool { return true })
	})
}
