package controlplane_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// intermediate is what a cert-manager CA issuer hands out for the tenant's Certificate: a CA
// signed by the platform's root, valid from notBefore for validity, with key, and constrained to
// the permitted DNS domains when there are any.
func intermediate(t *testing.T, root *pki.KeyPair, key crypto.Signer, notBefore time.Time, validity time.Duration, permitted ...string) *pki.KeyPair {
	t.Helper()
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: vcName + "-ca"},
		NotBefore: notBefore, NotAfter: notBefore.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true, IsCA: true,
		PermittedDNSDomainsCritical: len(permitted) > 0, PermittedDNSDomains: permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.Cert, key.Public(), root.Key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.KeyPair{Cert: cert, Key: key}
}

func TestCACertificate(t *testing.T) {
	vc := newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform", Kind: "ClusterIssuer", Group: "cert-manager.io"}}
	})
	c, err := controlplane.CACertificate(vc, []string{"kubernetes", "vc-apiserver.ns.svc"})
	if err != nil {
		t.Fatal(err)
	}
	if nc := c.Spec.NameConstraints; nc == nil || !nc.Critical || nc.Permitted == nil ||
		!slices.Equal(nc.Permitted.DNSDomains, []string{"kubernetes", "vc-apiserver.ns.svc"}) {
		t.Errorf("name constraints %+v: want critical, permitting the tenant's names", nc)
	}
	if !c.Spec.IsCA || c.Spec.PrivateKey.RotationPolicy != cmapi.RotationPolicyNever {
		t.Errorf("want a CA whose key is never rotated, got isCA=%v rotationPolicy=%q", c.Spec.IsCA, c.Spec.PrivateKey.RotationPolicy)
	}
	if c.Spec.IssuerRef.Name != "platform" || c.Spec.IssuerRef.Kind != "ClusterIssuer" || c.Spec.IssuerRef.Group != "cert-manager.io" {
		t.Errorf("issuerRef %+v", c.Spec.IssuerRef)
	}
	// In the control-plane namespace, labelled with the tenant's name and namespace: an owner
	// in another namespace would count as absent.
	if l := c.Spec.SecretTemplate.Labels; l["kubenest.io/virtualcluster"] != vcName || l["kubenest.io/virtualcluster-namespace"] != vcNS ||
		c.Namespace != cpNS || len(c.OwnerReferences) != 0 {
		t.Errorf("the Certificate and its Secret must be the tenant's: namespace %s, labels %v, owners %v", c.Namespace, l, c.OwnerReferences)
	}
	// An earlier release's tenant: next to it, owned by it.
	legacyVC := vc.DeepCopy()
	legacy(legacyVC)
	old, err := controlplane.CACertificate(legacyVC, nil)
	if err != nil {
		t.Fatal(err)
	}
	if old.Namespace != vcNS || len(old.OwnerReferences) != 1 || old.OwnerReferences[0].UID != vc.UID {
		t.Errorf("an earlier release's tenant: Certificate in %s owned by %v, want in %s owned by the VirtualCluster", old.Namespace, old.OwnerReferences, vcNS)
	}
	if _, err := controlplane.CACertificate(newVC(), nil); err == nil {
		t.Error("no spec.pki: want an error")
	}
}

// TestCANameConstraints: a tenant CA that a platform issuer signed, constrained to the
// tenant's names, verifies every certificate the operator issues for the tenant up to the
// platform's root, and nothing the tenant might sign for another name with the CA's key
// (in an earlier release's tenant's own namespace, where its users may read it).
func TestCANameConstraints(t *testing.T) {
	vc := newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.ControlPlane.Exposure.ExtraSANs = []string{"api.team-a.example.com", "*.apps.team-a.example.com", "192.0.2.7"}
	})
	specs := leafSpecs(t, vc, controlplane.DefaultSettings(), controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "node-1.example.net"})
	permitted := controlplane.CANameConstraints(specs, "kubenest-shared")
	for _, want := range []string{"kubernetes.default.svc", vcName + "-apiserver." + cpNS + ".svc", "api.team-a.example.com",
		"apps.team-a.example.com", "node-1.example.net", "kubenest-shared"} {
		if !slices.Contains(permitted, want) {
			t.Errorf("permitted %q: missing %s", permitted, want)
		}
	}
	for _, n := range permitted {
		if strings.Contains(n, "etcd") || strings.HasPrefix(n, "*") {
			t.Errorf("permitted %q holds %s: only the cluster CA's leaves' names, without wildcards", permitted, n)
		}
	}

	// The platform's root signs the tenant CA with those constraints, as cert-manager does.
	root, err := pki.NewCA("platform-root", now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := intermediate(t, root, key, now.Add(-time.Minute), 90*24*time.Hour, permitted...)
	a := newAuthorities(t)
	a.AdoptIssuedCA(ca)
	leaves, _ := ensure(t, a, specs, nil, now)

	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root.Cert)
	inter.AddCert(ca.Cert)
	verify := func(c *x509.Certificate, name string, usage x509.ExtKeyUsage) error {
		_, err := c.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	server := leaves[controlplane.LeafAPIServer].Cert
	for _, name := range []string{"kubernetes.default.svc", vcName + "-apiserver." + cpNS + ".svc", "api.team-a.example.com", "x.apps.team-a.example.com", "node-1.example.net"} {
		if err := verify(server, name, x509.ExtKeyUsageServerAuth); err != nil {
			t.Errorf("the apiserver's certificate for %s does not verify up to the platform's root: %v", name, err)
		}
	}
	if err := verify(leaves[controlplane.LeafAdmin].Cert, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("the admin client certificate does not verify up to the platform's root: %v", err)
	}
	// What a tenant could sign itself with the CA's key, for names that are not its own.
	for _, name := range []string{"www.example.com", "kubernetes.default.svc.evil.example.com", "kubenest-operator.kubenest-system.svc"} {
		forged, err := a.CA.Issue(pki.CertSpec{CommonName: name, DNSNames: []string{name}, Usage: pki.UsageServer}, now)
		if err != nil {
			t.Fatal(err)
		}
		var invalid x509.CertificateInvalidError
		if err := verify(forged.Cert, name, x509.ExtKeyUsageServerAuth); !errors.As(err, &invalid) || invalid.Reason != x509.CANotAuthorizedForThisName {
			t.Errorf("a certificate for %s signed with the tenant's CA: %v, want refused by the name constraints", name, err)
		}
	}
}

// TestIssuedCA follows a tenant whose CA cert-manager issues: the leaves chain to the
// platform's root, a renewal with the same key keeps every leaf and client valid, a new key
// reissues every leaf.
func TestIssuedCA(t *testing.T) {
	root, err := pki.NewCA("platform-root", now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issued := intermediate(t, root, key, now.Add(-time.Minute), 90*24*time.Hour)
	keyPEM, err := issued.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{corev1.TLSCertKey: issued.CertPEM(), corev1.TLSPrivateKeyKey: keyPEM}
	ca, err := controlplane.IssuedCA(data, now)
	if err != nil {
		t.Fatalf("IssuedCA: %v", err)
	}
	if _, err := controlplane.IssuedCA(map[string][]byte{corev1.TLSCertKey: issued.CertPEM()}, now); err == nil {
		t.Error("a Secret without tls.key: want an error")
	}
	if _, err := controlplane.IssuedCA(data, now.Add(91*24*time.Hour)); err == nil {
		t.Error("an expired CA: want an error")
	}

	a := newAuthorities(t)
	if changed, newKey := a.AdoptIssuedCA(ca); !changed || !newKey {
		t.Fatalf("first adoption: changed=%v newKey=%v, want both", changed, newKey)
	}
	if changed, _ := a.AdoptIssuedCA(ca); changed {
		t.Error("adopting the same CA again changed something")
	}
	vc := newVC()
	specs := leafSpecs(t, vc, controlplane.DefaultSettings(), controlplane.Exposure{ClusterIP: "10.96.0.20"})
	leaves, _ := ensure(t, a, specs, nil, now)

	// The apiserver serves its certificate with the tenant CA after it, so a client that
	// trusts only the platform's root verifies it.
	cp, err := controlplane.ControlPlaneCertsSecret(vc, a, leaves)
	if err != nil {
		t.Fatal(err)
	}
	chain := cp.Data[controlplane.LeafAPIServer.CertFile()]
	var certs []*x509.Certificate
	for block, rest := pem.Decode(chain); block != nil; block, rest = pem.Decode(rest) {
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, c)
	}
	if len(certs) != 2 || !certs[1].Equal(issued.Cert) {
		t.Fatalf("apiserver.crt holds %d certificates, want the leaf and the issued CA", len(certs))
	}
	roots, inters := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root.Cert)
	inters.AddCert(certs[1])
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: now}); err != nil {
		t.Errorf("apiserver certificate does not chain to the issuer's root: %v", err)
	}

	// cert-manager renews the CA, keeping its key: nothing is reissued.
	renewed := intermediate(t, root, key, now.Add(30*24*time.Hour), 90*24*time.Hour)
	later := now.Add(31 * 24 * time.Hour)
	if changed, newKey := a.AdoptIssuedCA(renewed); !changed || newKey {
		t.Fatalf("renewal: changed=%v newKey=%v, want changed with the same key", changed, newKey)
	}
	if _, reissued := ensure(t, a, specs, stored(t, vc, a, leaves), later); len(reissued) > 0 {
		t.Errorf("leaves reissued after a renewal that kept the key: %v", reissued)
	}

	// A new key is a new CA: every leaf it signs is issued again (etcd's and the front
	// proxy's have their own CAs).
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, newKey := a.AdoptIssuedCA(intermediate(t, root, other, now, 90*24*time.Hour)); !newKey {
		t.Fatal("a CA with another key: want newKey")
	}
	_, reissued := ensure(t, a, specs, stored(t, vc, a, leaves), now)
	for leaf, spec := range specs {
		if _, ok := reissued[leaf]; ok != (spec.Issuer == controlplane.IssuerCA) {
			t.Errorf("after a new CA key: %s reissued=%v", leaf, ok)
		}
	}
}
