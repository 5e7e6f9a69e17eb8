// Package tenantclient is the one place the operator reaches tenants' apiservers from.
//
// Every tenant client is built from what the operator itself issued and holds: the tenant's CA
// bundle, which the VirtualCluster reconciler loads from the tenant's authorities, and a client
// certificate of the operator's own, issued from the tenant's CA and kept in memory only. The
// address is derived from the VirtualCluster's name and namespace. Nothing a tenant, or a host
// user of its namespace, can write (a kubeconfig in a Secret, an address in a Service) is ever
// used as a credential, an endpoint or a command: the kubeconfig Secrets the operator writes
// are for people and their tools, never read back.
package tenantclient

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// Timeout bounds each request to a tenant, so that one that does not answer never holds up a
// reconcile for long.
const Timeout = 3 * time.Second

// certValidity is how long the operator's own client certificate for a tenant is valid. It
// lives only in the operator's memory and is issued again at two thirds of its life, or at
// the operator's next start.
const certValidity = 24 * time.Hour

// User is who the operator is in every tenant: a member of system:masters, as the admin
// kubeconfig's user is.
const User = "kubenest-operator" // one of activity.ComponentUsers

// ErrNotReached says the operator has not yet loaded the tenant's authorities since it started:
// the VirtualCluster reconciler does that on its next pass.
var ErrNotReached = errors.New("the operator has not loaded this tenant's certificate authorities yet")

// Registry holds, per tenant (by the VirtualCluster's UID), what the operator needs to reach
// its apiserver. It is safe for concurrent use.
type Registry struct {
	// Dial dials tenant apiservers; nil dials directly. Tests route Service names with it.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	mu      sync.Mutex
	tenants map[types.UID]*tenant
}

type tenant struct {
	host     string
	caBundle []byte
	// signer is the fingerprint of the CA that issued cert.
	signer  [sha256.Size]byte
	cert    *pki.KeyPair
	keyPEM  []byte
	renewAt time.Time
}

// Update records vc's tenant: signer is the CA that signs the clients its apiserver accepts,
// caBundle what its serving certificate is verified with. The operator's client certificate is
// issued again when there is none, when signer changed, or when it is due. It returns the
// tenant's client configuration.
func (r *Registry) Update(vc *v1alpha1.VirtualCluster, signer *pki.KeyPair, caBundle []byte, now time.Time) (*rest.Config, error) {
	fingerprint := sha256.Sum256(signer.Cert.Raw)
	host := controlplane.InClusterEndpoint(vc)
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tenants[vc.UID]
	if t == nil || t.signer != fingerprint || !now.Before(t.renewAt) {
		cert, err := signer.Issue(pki.CertSpec{
			CommonName: User, Organization: []string{"system:masters"}, Usage: pki.UsageClient, Validity: certValidity,
		}, now)
		if err != nil {
			return nil, fmt.Errorf("issuing the operator's client certificate for the tenant: %w", err)
		}
		key, err := cert.KeyPEM()
		if err != nil {
			return nil, err
		}
		t = &tenant{signer: fingerprint, cert: cert, keyPEM: key, renewAt: pki.RenewAt(cert.Cert)}
		if r.tenants == nil {
			r.tenants = map[types.UID]*tenant{}
		}
		r.tenants[vc.UID] = t
	}
	t.host, t.caBundle = host, caBundle
	return r.config(t), nil
}

// Forget drops a deleted tenant.
func (r *Registry) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tenants, uid)
}

// Config is the operator's client configuration for vc's tenant, or ErrNotReached.
func (r *Registry) Config(vc *v1alpha1.VirtualCluster) (*rest.Config, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.tenants[vc.UID]
	if t == nil {
		return nil, fmt.Errorf("tenant %s/%s: %w", vc.Namespace, vc.Name, ErrNotReached)
	}
	return r.config(t), nil
}

// Clientset is a clientset of vc's tenant, as the operator.
func (r *Registry) Clientset(vc *v1alpha1.VirtualCluster) (kubernetes.Interface, error) {
	cfg, err := r.Config(vc)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (r *Registry) config(t *tenant) *rest.Config {
	return &rest.Config{
		Host: t.host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   t.caBundle,
			CertData: t.cert.CertPEM(),
			KeyData:  t.keyPEM,
		},
		Timeout:   Timeout,
		Dial:      r.Dial,
		UserAgent: User,
	}
}
