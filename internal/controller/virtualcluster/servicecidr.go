package virtualcluster

import (
	"context"
	"fmt"
	"net/netip"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/iphold"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=ipaddresses,verbs=get;list;watch;create;delete;deletecollection

// serviceCIDR gives the tenant its own slice of the tenant Service range, once, and keeps it
// registered in the host as a ServiceCIDR: the host then accepts the tenant's ClusterIPs for
// the Services clustertree copies into it, so a tenant Service has one ClusterIP in both data
// planes. The ServiceCIDR is named after the range, so creating it is what claims the range.
// Every address of the range is held (package iphold) before its ServiceCIDR exists, so
// that the host never gives one to a Service of its own.
func (r *Reconciler) serviceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster) (string, error) {
	if cidr := vc.Status.ServiceCIDR; cidr != "" {
		return cidr, r.ensureServiceCIDR(ctx, vc, cidr)
	}
	var list networkingv1.ServiceCIDRList
	if err := r.APIReader.List(ctx, &list, client.MatchingLabels{naming.LabelManagedBy: naming.ManagedByValue}); err != nil {
		return "", fmt.Errorf("listing ServiceCIDRs: %w", err)
	}
	used := map[string]bool{}
	for _, sc := range list.Items {
		if sc.Labels[naming.LabelVirtualCluster] == vc.Name && sc.Labels[naming.LabelVirtualClusterNamespace] == vc.Namespace && len(sc.Spec.CIDRs) == 1 {
			// Claimed by an earlier pass whose status was not written.
			return sc.Spec.CIDRs[0], nil
		}
		for _, c := range sc.Spec.CIDRs {
			used[c] = true
		}
	}
	for {
		cidr, err := controlplane.NextServiceCIDR(r.Settings.ServiceCIDRPool, r.Settings.ServiceCIDRPrefix, used)
		if err != nil {
			return "", err
		}
		// Holds of a range someone else claims meanwhile are that range's, and stay.
		rng, err := r.serviceRange(cidr)
		if err != nil {
			return "", err
		}
		if _, err := rng.HoldAll(ctx, nil); err != nil {
			return "", err
		}
		err = r.Client.Create(ctx, desiredServiceCIDR(vc, cidr), fieldOwner)
		if apierrors.IsAlreadyExists(err) {
			used[cidr] = true // another tenant claimed it meanwhile
			continue
		}
		if err != nil {
			return "", fmt.Errorf("claiming Service range %s: %w", cidr, err)
		}
		ctrl.LoggerFrom(ctx).Info("gave the tenant its Service range", "serviceCIDR", cidr)
		return cidr, nil
	}
}

// ensureServiceCIDR holds every address of the tenant's range that has no IPAddress (one a
// copy of a tenant Service left, or a range claimed before the holds existed) and registers
// the range again if someone deleted its ServiceCIDR. It runs every pass, so it reads from the
// cache (a lagging cache only costs refused creates).
func (r *Reconciler) ensureServiceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster, cidr string) error {
	rng, err := r.serviceRange(cidr)
	if err != nil {
		return err
	}
	held, err := rng.HoldAll(ctx, func(a netip.Addr) bool {
		ip := &metav1.PartialObjectMetadata{}
		ip.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("IPAddress"))
		return r.Client.Get(ctx, client.ObjectKey{Name: a.String()}, ip) == nil
	})
	if err != nil {
		return err
	}
	if held > 0 {
		ctrl.LoggerFrom(ctx).Info("held addresses of the tenant's Service range that had no IPAddress, so that the host gives them to none of its own Services",
			"serviceCIDR", cidr, "held", held)
	}
	want := desiredServiceCIDR(vc, cidr)
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(want), &networkingv1.ServiceCIDR{})
	if apierrors.IsNotFound(err) {
		err = r.Client.Create(ctx, want, fieldOwner)
	}
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return fmt.Errorf("registering Service range %s in the host: %w", cidr, err)
}

func desiredServiceCIDR(vc *v1alpha1.VirtualCluster, cidr string) *networkingv1.ServiceCIDR {
	labels := naming.For(vc.Name).Labels("")
	labels[naming.LabelVirtualClusterNamespace] = vc.Namespace
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: naming.ServiceCIDR(cidr), Labels: labels},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
	}
}

// releaseServiceCIDR gives the tenant's Service range back: its holds first, so that none is
// left once the range can be claimed again. The host keeps the ServiceCIDR (a finalizer) until
// no Service has an address in it: one of its own that took a freed address meanwhile only
// keeps the range from being claimed again while it lives.
func (r *Reconciler) releaseServiceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	if vc.Status.ServiceCIDR == "" {
		return nil
	}
	rng, err := r.serviceRange(vc.Status.ServiceCIDR)
	if err != nil {
		return err
	}
	if err := rng.Drop(ctx); err != nil {
		return err
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: naming.ServiceCIDR(vc.Status.ServiceCIDR)}}
	if err := r.Client.Delete(ctx, sc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing Service range %s: %w", vc.Status.ServiceCIDR, err)
	}
	return nil
}

// serviceRange is the tenant Service range cidr, as the host holds it.
func (r *Reconciler) serviceRange(cidr string) (iphold.Range, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return iphold.Range{}, fmt.Errorf("tenant Service range %q: %w", cidr, err)
	}
	return iphold.Range{Client: r.ipAddresses, CIDR: p, Name: naming.ServiceCIDR(cidr)}, nil
}
