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

// annotationServiceCIDR is the range a claim (claimOf) is for.
const annotationServiceCIDR = "kubenest.io/service-cidr"

// serviceCIDR gives the tenant its own slice of the tenant Service range, once. The claim is
// an IPAddress of KubeNest's named after the slice's first address (its network's, which no
// allocator gives out), parent the VirtualCluster: creating it is the lock, so two tenants
// never share a slice. A slice that has a KubeNest ServiceCIDR is taken too (registered for
// a tenant's copies, or claimed that way before claims existed).
func (r *Reconciler) serviceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster) (string, error) {
	if cidr := vc.Status.ServiceCIDR; cidr != "" {
		return cidr, r.ensureClaim(ctx, vc, cidr)
	}
	mine := client.MatchingLabels{naming.LabelManagedBy: naming.ManagedByValue}
	var claims networkingv1.IPAddressList
	if err := r.APIReader.List(ctx, &claims, mine); err != nil {
		return "", fmt.Errorf("listing Service range claims: %w", err)
	}
	var registered networkingv1.ServiceCIDRList
	if err := r.APIReader.List(ctx, &registered, mine); err != nil {
		return "", fmt.Errorf("listing ServiceCIDRs: %w", err)
	}
	used := map[string]bool{}
	for _, o := range claims.Items {
		if cidr := o.Annotations[annotationServiceCIDR]; cidr != "" {
			if isTenants(&o, vc) {
				return cidr, nil // claimed by an earlier pass whose status was not written
			}
			used[cidr] = true
		}
	}
	for _, sc := range registered.Items {
		for _, c := range sc.Spec.CIDRs {
			used[c] = true
		}
	}
	for {
		cidr, err := controlplane.NextServiceCIDR(r.Settings.ServiceCIDRPool, r.Settings.ServiceCIDRPrefix, used)
		if err != nil {
			return "", err
		}
		claim, err := claimOf(vc, cidr)
		if err != nil {
			return "", err
		}
		err = r.Client.Create(ctx, claim, fieldOwner)
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

// ensureClaim makes the tenant's claim of its range again if it is missing (deleted, or a
// range claimed by its ServiceCIDR before claims existed). It runs every pass, from the cache.
func (r *Reconciler) ensureClaim(ctx context.Context, vc *v1alpha1.VirtualCluster, cidr string) error {
	claim, err := claimOf(vc, cidr)
	if err != nil {
		return err
	}
	if r.hasIPAddress(ctx, claim.Name) {
		return nil
	}
	if err := r.Client.Create(ctx, claim, fieldOwner); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("claiming Service range %s: %w", cidr, err)
	}
	return nil
}

// claimOf is the IPAddress that claims cidr for vc.
func claimOf(vc *v1alpha1.VirtualCluster, cidr string) (*networkingv1.IPAddress, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, fmt.Errorf("tenant Service range %q: %w", cidr, err)
	}
	labels := naming.For(vc.Name).Labels("")
	labels[naming.LabelVirtualClusterNamespace] = vc.Namespace
	return &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{Name: p.Masked().Addr().String(), Labels: labels,
			Annotations: map[string]string{annotationServiceCIDR: cidr}},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: v1alpha1.GroupVersion.Group, Resource: "virtualclusters", Namespace: vc.Namespace, Name: vc.Name}},
	}, nil
}

func isTenants(o metav1.Object, vc *v1alpha1.VirtualCluster) bool {
	return o.GetLabels()[naming.LabelVirtualCluster] == vc.Name && o.GetLabels()[naming.LabelVirtualClusterNamespace] == vc.Namespace
}

// registerServiceCIDR makes the tenant's range one of the host's ServiceCIDRs when clustertree
// copies its Services into the host (spec.nodes.shared): the host then accepts the tenant's
// ClusterIPs for the copies, so a tenant Service has one ClusterIP in both data planes. Once
// registered, a range stays so for the tenant's life. The host's apiserver also gives its own
// Services addresses of any ServiceCIDR it has, so every address of the range that no copy
// uses is held first (package iphold), and again on every pass: one a copy left, or one of a
// range registered before the holds existed. It reads from the cache (a lagging cache only
// costs refused creates).
func (r *Reconciler) registerServiceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	cidr := vc.Status.ServiceCIDR
	want := desiredServiceCIDR(vc, cidr)
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(want), &networkingv1.ServiceCIDR{})
	exists := err == nil
	if client.IgnoreNotFound(err) != nil {
		return err
	}
	if !exists && !vc.Spec.Nodes.Shared {
		return nil
	}
	rng, err := r.serviceRange(cidr)
	if err != nil {
		return err
	}
	held, err := rng.HoldAll(ctx, func(a netip.Addr) bool { return r.hasIPAddress(ctx, a.String()) })
	if err != nil {
		return err
	}
	if held > 0 {
		ctrl.LoggerFrom(ctx).Info("held addresses of the tenant's Service range that had no IPAddress, so that the host gives them to none of its own Services",
			"serviceCIDR", cidr, "held", held)
	}
	if exists {
		return nil
	}
	if err := r.Client.Create(ctx, want, fieldOwner); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering Service range %s in the host: %w", cidr, err)
	}
	ctrl.LoggerFrom(ctx).Info("registered the tenant's Service range in the host, for the copies of its Services", "serviceCIDR", cidr)
	return nil
}

// hasIPAddress says whether the host has the IPAddress name, as the cache (of their metadata
// only) has it.
func (r *Reconciler) hasIPAddress(ctx context.Context, name string) bool {
	ip := &metav1.PartialObjectMetadata{}
	ip.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("IPAddress"))
	return r.Client.Get(ctx, client.ObjectKey{Name: name}, ip) == nil
}

func desiredServiceCIDR(vc *v1alpha1.VirtualCluster, cidr string) *networkingv1.ServiceCIDR {
	labels := naming.For(vc.Name).Labels("")
	labels[naming.LabelVirtualClusterNamespace] = vc.Namespace
	return &networkingv1.ServiceCIDR{
		ObjectMeta: metav1.ObjectMeta{Name: naming.ServiceCIDR(cidr), Labels: labels},
		Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
	}
}

// releaseServiceCIDR gives the tenant's Service range back: its holds first, then its
// ServiceCIDR, then its claim. The host keeps the ServiceCIDR (a finalizer) until no Service has
// an address in it, and the range is not claimed again while it does: a host Service that took
// a freed address meanwhile only keeps the range from being claimed again while it lives.
func (r *Reconciler) releaseServiceCIDR(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	cidr := vc.Status.ServiceCIDR
	if cidr == "" {
		return nil
	}
	rng, err := r.serviceRange(cidr)
	if err != nil {
		return err
	}
	if err := rng.Drop(ctx); err != nil {
		return err
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: naming.ServiceCIDR(cidr)}}
	if err := r.Client.Delete(ctx, sc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("releasing Service range %s: %w", cidr, err)
	}
	claim, err := claimOf(vc, cidr)
	if err != nil {
		return err
	}
	current := &networkingv1.IPAddress{}
	err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(claim), current)
	if apierrors.IsNotFound(err) || (err == nil && !isTenants(current, vc)) {
		return nil
	}
	if err == nil {
		err = r.Client.Delete(ctx, current, client.Preconditions{UID: &current.UID})
	}
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("releasing the claim of Service range %s: %w", cidr, err)
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
