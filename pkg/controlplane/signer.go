package controlplane

import "github.com/kubenest-io/kubenest/pkg/pki"

// PortalUsersGroup is the tenant group of the personal kubeconfigs the portal mints. Every
// tenant binds it to cluster-admin when it is created (a binding the operator makes once and
// never overwrites, so the tenant's admin may change what the group may do).
const PortalUsersGroup = "kubenest:portal-users"

// ClientSigner is the authority that signs client certificates of the tenant's apiserver now:
// the cluster CA, which during a CA rotation is the old one until the "switch" step and the new
// one after it. Certificates it signs are trusted by CABundle.
func (a *Authorities) ClientSigner() *pki.KeyPair { return a.issuer(IssuerCA) }
