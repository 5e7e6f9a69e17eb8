package portal

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// DefaultPersonalValidity is how long a personal kubeconfig works unless the portal is told
// otherwise.
const DefaultPersonalValidity = 8 * time.Hour

// hostUserPrefix is put before host user names that would mean something to the tenant's
// apiserver (system:serviceaccount:..., system:node:..., and the names of KubeNest's own
// components, controlplane.ReservedUsers, such as the apiserver's kubelet client), so a host
// identity never becomes one of the tenant's reserved identities; and before names that
// already start with it, so two host users never share a tenant name.
const hostUserPrefix = "host:"

// PersonalRequest is what a personal kubeconfig is made of.
type PersonalRequest struct {
	// Cluster names the cluster in the kubeconfig: the VirtualCluster's name.
	Cluster string
	// Server is the tenant apiserver's URL the kubeconfig points at.
	Server string
	// User is the host user name the certificate is for.
	User string
	// Validity is how long the certificate is valid; zero means DefaultPersonalValidity.
	Validity time.Duration
}

// TenantUserName is the user name a host user has in a tenant through a personal kubeconfig:
// the host name, prefixed by "host:" when it is in the reserved "system:" space, one of
// KubeNest's own users, or already starts with "host:".
func TenantUserName(hostUser string) string {
	if strings.HasPrefix(hostUser, "system:") || strings.HasPrefix(hostUser, hostUserPrefix) || slices.Contains(controlplane.ReservedUsers, hostUser) {
		return hostUserPrefix + hostUser
	}
	return hostUser
}

// PersonalCertSpec is the client certificate of a personal kubeconfig: the user's name as CN,
// and as its only group (O) controlplane.PortalUsersGroup. Host groups are never copied:
// system:masters or any other system: group in a tenant certificate would bypass the tenant's
// own RBAC.
func PersonalCertSpec(hostUser string, validity time.Duration) (pki.CertSpec, error) {
	if strings.TrimSpace(hostUser) == "" {
		return pki.CertSpec{}, errors.New("personal kubeconfig needs a user name")
	}
	if validity < 0 {
		return pki.CertSpec{}, fmt.Errorf("personal kubeconfig validity %s is negative", validity)
	}
	if validity == 0 {
		validity = DefaultPersonalValidity
	}
	return pki.CertSpec{
		CommonName:   TenantUserName(hostUser),
		Organization: []string{controlplane.PortalUsersGroup},
		Usage:        pki.UsageClient,
		Validity:     validity,
	}, nil
}

// PersonalKubeconfig signs a client certificate for r.User with the tenant's current client
// signer and returns a kubeconfig that trusts the tenant's CA bundle (both CAs during a
// rotation), with the certificate's expiry. It is pure: now is the issue time.
func PersonalKubeconfig(a *controlplane.Authorities, r PersonalRequest, now time.Time) ([]byte, time.Time, error) {
	if r.Server == "" {
		return nil, time.Time{}, errors.New("the virtual cluster has no endpoint yet")
	}
	spec, err := PersonalCertSpec(r.User, r.Validity)
	if err != nil {
		return nil, time.Time{}, err
	}
	leaf, err := a.ClientSigner().Issue(spec, now)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("signing the personal certificate: %w", err)
	}
	key, err := leaf.KeyPEM()
	if err != nil {
		return nil, time.Time{}, err
	}
	kc, err := kubeconfig.Build(kubeconfig.Config{
		ClusterName:   r.Cluster,
		Server:        r.Server,
		CAPEM:         a.CABundle(),
		User:          spec.CommonName,
		ClientCertPEM: leaf.CertPEM(),
		ClientKeyPEM:  key,
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return kc, leaf.Cert.NotAfter, nil
}
