package controlplane

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// CACertificate is the cert-manager Certificate that asks the issuer in spec.pki for the
// tenant's cluster CA. Its private key is never rotated: cert-manager's renewals then keep the
// key, so every leaf the CA signed stays valid and every client that trusts it keeps working.
// The issued Secret carries the VirtualCluster's labels, so the operator sees it change.
//
// The CA is a platform issuer's intermediate, a key a tenant's control plane holds, so it is
// constrained to the tenant's own names (permitted, CANameConstraints): whatever a tenant
// signs with it for another name, a client that trusts the platform's root refuses. A path
// length limit would be asked for too, but cert-manager sets none on the certificates it
// issues (v1.21: the basic constraints of a Certificate carry isCA only); name constraints
// bind every certificate below the CA, sub-CAs included.
func CACertificate(vc *v1alpha1.VirtualCluster, permitted []string) (*cmapi.Certificate, error) {
	if vc.Spec.PKI == nil {
		return nil, fmt.Errorf("spec.pki: not set")
	}
	ref := vc.Spec.PKI.IssuerRef
	names := naming.For(vc.Name)
	meta := objectMeta(vc, names.CACertificate(), "")
	return &cmapi.Certificate{
		TypeMeta:   typeMeta(cmapi.SchemeGroupVersion.String(), cmapi.CertificateKind),
		ObjectMeta: meta,
		Spec: cmapi.CertificateSpec{
			CommonName: vc.Name + "-ca",
			IsCA:       true,
			Duration:   &metav1.Duration{Duration: pki.CAValidity},
			SecretName: names.IssuedCASecret(),
			SecretTemplate: &cmapi.CertificateSecretTemplate{
				Labels: meta.Labels,
			},
			PrivateKey: &cmapi.CertificatePrivateKey{
				Algorithm:      cmapi.ECDSAKeyAlgorithm,
				Size:           256,
				RotationPolicy: cmapi.RotationPolicyNever,
			},
			Usages:    []cmapi.KeyUsage{cmapi.UsageCertSign, cmapi.UsageCRLSign, cmapi.UsageDigitalSignature},
			IssuerRef: cmmeta.IssuerReference{Name: ref.Name, Kind: ref.Kind, Group: ref.Group},
			NameConstraints: &cmapi.NameConstraints{
				Critical:  true,
				Permitted: &cmapi.NameConstraintItem{DNSDomains: permitted},
			},
		},
	}, nil
}

// CANameConstraints are the DNS domains a tenant's cluster CA may sign for: the names in the
// certificates it issues (specs, the leaves LeafSpecs lists, and more, such as the shared
// node's name), each with its subdomains, as a name constraint reads. IP addresses are not
// constrained: the addresses the tenant is reached at (a host node's, a load balancer's, the
// operator pod's for the shared node) change during its life, and a CA is made once.
func CANameConstraints(specs map[Leaf]LeafSpec, more ...string) []string {
	var out []string
	for _, spec := range specs {
		if spec.Issuer != IssuerCA {
			continue
		}
		for _, n := range spec.DNSNames {
			out = append(out, strings.TrimPrefix(n, "*."))
		}
	}
	out = append(out, more...)
	slices.Sort(out)
	return slices.Compact(out)
}

// IssuedCA reads the CA cert-manager wrote into the Secret CACertificate names, and checks it
// is a usable CA at now.
func IssuedCA(data map[string][]byte, now time.Time) (*pki.KeyPair, error) {
	kp, err := pki.ParseKeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, err
	}
	if err := kp.CheckCA(now); err != nil {
		return nil, err
	}
	return kp, nil
}

// AdoptIssuedCA makes ca, issued by cert-manager, the cluster CA. It says whether anything
// changed and whether the key did: a renewal keeps the key (the Certificate never rotates it),
// so leaves and clients stay valid; a new key is a new CA, and every leaf is issued again.
func (a *Authorities) AdoptIssuedCA(ca *pki.KeyPair) (changed, newKey bool) {
	if a.CA != nil && a.CA.Cert.Equal(ca.Cert) {
		return false, false
	}
	newKey = a.CA == nil || !bytes.Equal(a.CA.Cert.RawSubjectPublicKeyInfo, ca.Cert.RawSubjectPublicKeyInfo)
	a.CA, a.NextCA, a.PreviousCA = ca, nil, nil
	return true, newKey
}

// caChain is what the apiserver sends after its serving certificate: nothing when the cluster
// CA is self-signed, the CA itself when another authority (a cert-manager issuer) signed it, so
// clients that trust only that authority can verify the apiserver.
func (a *Authorities) caChain() []byte {
	c := a.CA.Cert
	if bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignatureFrom(c) == nil {
		return nil
	}
	return a.CA.CertPEM()
}
