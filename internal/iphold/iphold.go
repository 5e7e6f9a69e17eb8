// Package iphold keeps a tenant's Service range out of the host's own ClusterIP allocation.
//
// Each tenant's Service range is a ServiceCIDR of the host, so that the host accepts the
// tenant's ClusterIPs for the copies of its Services. But the host's apiserver also gives its
// own Services (any host user's, other tenants' apiserver and etcd Services) addresses from
// every ServiceCIDR it has, picking one at random; it skips an address that has an IPAddress
// object, whoever made it. So every address of a tenant's range that no copy uses is held by
// an IPAddress of KubeNest's (label ipaddress.kubernetes.io/managed-by: kubenest.io, parent
// the range's ServiceCIDR), made before the ServiceCIDR exists. A hold is released just before
// a copy takes its address, and made again when the copy goes. The host's repair loop and its
// ServiceCIDR finalizer look only at the IPAddresses its own allocator made, so they leave the
// holds alone.
package iphold

import (
	"context"
	"fmt"
	"net/netip"

	"golang.org/x/sync/errgroup"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
)

const (
	// ManagedBy is the value of label networkingv1.LabelManagedBy on a hold.
	ManagedBy = "kubenest.io"
	// LabelRange names the ServiceCIDR whose address a hold keeps.
	LabelRange = "kubenest.io/service-range"
	// MaxAddresses is the most addresses a range may have: each is an object in the host.
	MaxAddresses = 4096
	// parallel is how many holds are made at once.
	parallel = 16
)

// Range is a tenant's Service range in the host.
type Range struct {
	// Client makes and removes the host's IPAddresses.
	Client networkingclient.IPAddressInterface
	CIDR   netip.Prefix
	// Name is the range's ServiceCIDR's.
	Name string
}

// Addresses are the addresses of cidr the host's allocator gives out: all but the first (the
// network's), and for IPv4 the last (its broadcast address). It returns nil for a range with
// more than MaxAddresses.
func Addresses(cidr netip.Prefix) []netip.Addr {
	cidr = cidr.Masked()
	if cidr.Addr().BitLen()-cidr.Bits() > 12 {
		return nil
	}
	var out []netip.Addr
	for a := cidr.Addr().Next(); a.IsValid() && cidr.Contains(a); a = a.Next() {
		out = append(out, a)
	}
	if cidr.Addr().Is4() && len(out) > 0 {
		out = out[:len(out)-1]
	}
	return out
}

// HoldAll holds each address of the range for which has returns false (has nil: every
// address), and returns how many holds it made. An address some other IPAddress has is left
// as it is.
func (r Range) HoldAll(ctx context.Context, has func(netip.Addr) bool) (int, error) {
	addrs := Addresses(r.CIDR)
	if addrs == nil {
		return 0, fmt.Errorf("Service range %s has more than %d addresses, too many to hold in the host", r.CIDR, MaxAddresses)
	}
	made := make([]bool, len(addrs))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for i, a := range addrs {
		if has != nil && has(a) {
			continue
		}
		g.Go(func() error {
			var err error
			made[i], err = r.hold(ctx, a)
			return err
		})
	}
	err := g.Wait()
	n := 0
	for _, m := range made {
		if m {
			n++
		}
	}
	return n, err
}

// Hold holds addr again, after the Service that had it went. It does nothing for an address
// outside the range.
func (r Range) Hold(ctx context.Context, addr netip.Addr) error {
	if !r.CIDR.Contains(addr) {
		return nil
	}
	_, err := r.hold(ctx, addr)
	return err
}

func (r Range) hold(ctx context.Context, addr netip.Addr) (bool, error) {
	ip := &networkingv1.IPAddress{
		ObjectMeta: metav1.ObjectMeta{
			Name:   addr.String(),
			Labels: map[string]string{networkingv1.LabelManagedBy: ManagedBy, LabelRange: r.Name},
		},
		Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{
			Group: networkingv1.GroupName, Resource: "servicecidrs", Name: r.Name}},
	}
	_, err := r.Client.Create(ctx, ip, metav1.CreateOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil
	default:
		return false, fmt.Errorf("holding address %s of Service range %s in the host: %w", addr, r.CIDR, err)
	}
}

// Release gives up the hold on addr, if the range has one, so that a Service can take the
// address, and says whether there was one. An IPAddress that is not the range's hold is left
// alone.
func (r Range) Release(ctx context.Context, addr netip.Addr) (bool, error) {
	ip, err := r.Client.Get(ctx, addr.String(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the host's IPAddress %s: %w", addr, err)
	}
	if !r.holds(ip) {
		return false, nil
	}
	err = r.Client.Delete(ctx, ip.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ip.UID}})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return true, nil
	}
	return false, fmt.Errorf("releasing address %s of Service range %s: %w", addr, r.CIDR, err)
}

// Drop removes every hold of the range.
func (r Range) Drop(ctx context.Context) error {
	sel := labels.SelectorFromSet(labels.Set{networkingv1.LabelManagedBy: ManagedBy, LabelRange: r.Name})
	err := r.Client.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing the holds of Service range %s: %w", r.CIDR, err)
	}
	return nil
}

func (r Range) holds(ip *networkingv1.IPAddress) bool {
	return ip.Labels[networkingv1.LabelManagedBy] == ManagedBy && ip.Labels[LabelRange] == r.Name
}
