package virtualcluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Reasons a tenant waits for its control-plane namespace.
const (
	ReasonNamespaceTaken       = "ControlPlaneNamespaceTaken"
	ReasonNamespaceTerminating = "ControlPlaneNamespaceTerminating"
)

// controlPlaneNamespace settles where vc's control plane lives (status.controlPlaneNamespace)
// and makes that namespace. A new VirtualCluster's is KubeNest's own, kubenest-cp-<namespace>,
// where no right in vc's namespace reaches: the tenant's keys, its control-plane pods and its
// data are there. One an earlier release made (it has a status, without this field) keeps its
// control plane in its own namespace. It returns what the tenant waits for, if anything, as a
// condition reason and message.
func (r *Reconciler) controlPlaneNamespace(ctx context.Context, vc *v1alpha1.VirtualCluster) (reason, problem string, err error) {
	name := controlplane.Namespace(vc) // Reconcile recorded it in the status
	if name == vc.Namespace {
		return "", "", nil
	}
	ns := &corev1.Namespace{}
	err = r.Client.Get(ctx, client.ObjectKey{Name: name}, ns)
	if apierrors.IsNotFound(err) {
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			naming.LabelManagedBy:                naming.ManagedByValue,
			naming.LabelVirtualClusterNamespace:  vc.Namespace,
			"pod-security.kubernetes.io/enforce": podSecurityLevel,
		}}}
		if err := r.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", "", fmt.Errorf("creating the control-plane namespace %s: %w", name, err)
		}
		ctrl.LoggerFrom(ctx).Info("control-plane namespace created", "namespace", name)
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("reading the control-plane namespace %s: %w", name, err)
	}
	if !ns.DeletionTimestamp.IsZero() {
		return ReasonNamespaceTerminating, fmt.Sprintf("the control-plane namespace %s is being deleted (the namespace's last tenant and snapshot went); it is made again once it is gone", name), nil
	}
	if !cpnamespace.Ours(ns, vc.Namespace) {
		return ReasonNamespaceTaken, fmt.Sprintf("namespace %s exists and was not made by KubeNest for namespace %s: the tenant's keys are never put where others may read them; remove it, or ask the platform team", name, vc.Namespace), nil
	}
	return "", "", nil
}
