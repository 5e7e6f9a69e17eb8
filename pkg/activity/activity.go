// Package activity tells when people last used a tenant, for sleeping after inactivity
// (spec.sleep.afterInactivity). The tenant's apiserver notes every request it authorizes
// whose user is a person or a person's tool, not one of the tenant's own components, and
// writes the latest such time into a Lease in the tenant (kube-system/kubenest-activity),
// which the operator reads when a tenant's inactivity would be up.
//
// Components are users named system:* (the controller-manager, scheduler, kube-proxy,
// loopback, system:node:*, system:serviceaccount:*, system:anonymous), members of
// system:nodes, system:serviceaccounts or system:unauthenticated, and the operator's own
// identities in the tenant (ComponentUsers). So ServiceAccounts never count, also when a
// tool outside the tenant uses one's token: the controllers people install run as
// ServiceAccounts and would keep every tenant awake.
//
// The Lease is the tenant's to write: a tenant that forges it only keeps itself awake, as it
// could by sending requests.
package activity

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// The Lease the tenant's apiservers write the last activity into (spec.renewTime).
const (
	LeaseNamespace = "kube-system"
	LeaseName      = "kubenest-activity"
)

// ComponentUsers are the identities KubeNest's own components have in a tenant, besides the
// system:* ones: the operator, its virtual node, the tenant's CoreDNS.
var ComponentUsers = []string{"kubenest-operator", "kubenest-clustertree", "kubenest-dns"}

// Component says whether u is one of the tenant's own components rather than a person or a
// person's tool.
func Component(u user.Info) bool {
	if u == nil || strings.HasPrefix(u.GetName(), "system:") || slices.Contains(ComponentUsers, u.GetName()) {
		return true
	}
	for _, g := range u.GetGroups() {
		if g == user.NodesGroup || g == serviceaccount.AllServiceAccountsGroup || g == user.AllUnauthenticated {
			return true
		}
	}
	return false
}

// Recorder keeps the time of the last request of a person an apiserver saw.
type Recorder struct {
	last atomic.Int64 // unix nanoseconds; 0: none yet
	now  func() time.Time
}

// NewRecorder returns a Recorder that has seen nothing yet.
func NewRecorder() *Recorder { return &Recorder{now: time.Now} }

// Authorizer is next, noting each request it is asked about whose user is a person. It
// decides nothing itself and costs one atomic store per such request.
func (r *Recorder) Authorizer(next authorizer.Authorizer) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if !Component(a.GetUser()) {
			r.last.Store(r.now().UnixNano())
		}
		return next.Authorize(ctx, a)
	})
}

// Last is the time of the last request of a person; zero if none.
func (r *Recorder) Last() time.Time {
	if n := r.last.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Run writes the last activity into the Lease every period while it changed, until ctx ends.
// Several apiservers of a tenant write the same Lease; it only moves forward.
func (r *Recorder) Run(ctx context.Context, client kubernetes.Interface, period time.Duration) {
	var written time.Time
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		last := r.Last()
		if last.IsZero() || !last.After(written) {
			continue
		}
		if err := write(ctx, client, last); err != nil {
			klog.FromContext(ctx).Info("recording the tenant's last activity failed; trying again", "lease", LeaseNamespace+"/"+LeaseName, "err", err.Error())
			continue
		}
		written = last
	}
}

// write moves the Lease's renewTime forward to last.
func write(ctx context.Context, client kubernetes.Interface, last time.Time) error {
	leases := client.CoordinationV1().Leases(LeaseNamespace)
	l, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: LeaseNamespace}}
		l.Spec.RenewTime = &metav1.MicroTime{Time: last}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	if l.Spec.RenewTime != nil && !l.Spec.RenewTime.Before(&metav1.MicroTime{Time: last}) {
		return nil // another apiserver saw a later request
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: last}
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{}) // fails on a concurrent write: tried again
	return err
}

// Read returns the last activity the tenant's Lease records; zero if there is none.
func Read(ctx context.Context, client kubernetes.Interface) (time.Time, error) {
	l, err := client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return time.Time{}, nil
	}
	if err != nil || l.Spec.RenewTime == nil {
		return time.Time{}, err
	}
	return l.Spec.RenewTime.Time, nil
}
