// Package pki issues and checks the certificates of a tenant: certificate authorities, leaf
// certificates for servers and clients, and the service-account signing key. It is pure: every
// function takes the time it should consider "now", and nothing here talks to a cluster.
//
// All keys are ECDSA P-256. A certificate authority is valid for ten years and a leaf for one,
// unless the caller asks otherwise. A leaf is due for renewal once two thirds of its life have
// passed, so there is always a third of it left to roll it out.
package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	"k8s.io/client-go/util/keyutil"
)

const (
	// CAValidity is how long a certificate authority is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// LeafValidity is how long a leaf certificate is valid unless the caller asks otherwise.
	LeafValidity = 365 * 24 * time.Hour
	// backdate moves NotBefore into the past so that clocks a little behind still accept a
	// fresh certificate.
	backdate = 5 * time.Minute
)

// Usage says what a leaf certificate is for.
type Usage int

const (
	// UsageServer is a TLS server certificate.
	UsageServer Usage = 1 << iota
	// UsageClient is a TLS client certificate.
	UsageClient
)

// KeyPair is a certificate with its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CertPEM returns the certificate PEM-encoded.
func (kp *KeyPair) CertPEM() []byte { return EncodeCert(kp.Cert) }

// TLSCertificate is the key pair as crypto/tls serves or presents it.
func (kp *KeyPair) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{kp.Cert.Raw}, PrivateKey: kp.Key, Leaf: kp.Cert}
}

// KeyPEM returns the private key PEM-encoded.
func (kp *KeyPair) KeyPEM() ([]byte, error) {
	return encodeKey(kp.Key)
}

// CertSpec describes a leaf certificate.
type CertSpec struct {
	// CommonName is the subject's CN; for client certificates Kubernetes reads it as the user.
	CommonName string
	// Organization is the subject's O; for client certificates Kubernetes reads it as groups.
	Organization []string
	// DNSNames and IPs are the subject alternative names of a server certificate.
	DNSNames []string
	IPs      []net.IP
	// Usage is what the certificate is for.
	Usage Usage
	// Validity is how long the certificate is valid; zero means LeafValidity.
	Validity time.Duration
}

// NewCA creates a self-signed certificate authority valid for CAValidity from now.
func NewCA(commonName string, now time.Time) (*KeyPair, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	return sign(tmpl, tmpl, key, key)
}

// Issue signs a new leaf certificate for spec with this certificate authority.
func (ca *KeyPair) Issue(spec CertSpec, now time.Time) (*KeyPair, error) {
	if spec.CommonName == "" {
		return nil, errors.New("certificate needs a common name")
	}
	if spec.Usage == 0 {
		return nil, fmt.Errorf("certificate %q needs a usage", spec.CommonName)
	}
	validity := spec.Validity
	if validity == 0 {
		validity = LeafValidity
	}
	notAfter := now.Add(validity)
	if notAfter.After(ca.Cert.NotAfter) {
		// A leaf never outlives its issuer.
		notAfter = ca.Cert.NotAfter
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: spec.CommonName, Organization: spec.Organization},
		DNSNames:    spec.DNSNames,
		IPAddresses: spec.IPs,
		// Short-lived leaves are backdated less: renewal is two thirds into the whole
		// NotBefore..NotAfter span, which a fixed backdate would put before issuance.
		NotBefore:   now.Add(-min(backdate, validity/10)),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: extKeyUsages(spec.Usage),
	}
	return sign(tmpl, ca.Cert, key, ca.Key)
}

// RenewAt is the moment a certificate is due for renewal: two thirds into its life.
func RenewAt(cert *x509.Certificate) time.Time {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return cert.NotBefore.Add(life * 2 / 3)
}

// Check says why kp does not serve for spec, signed by ca, at now; nil when it does. A
// certificate serves when ca signed it, it is past NotBefore and not yet due for renewal, its
// subject and usages are the spec's and it covers every name the spec asks for.
func (kp *KeyPair) Check(spec CertSpec, ca *x509.Certificate, now time.Time) error {
	c := kp.Cert
	if err := c.CheckSignatureFrom(ca); err != nil {
		return fmt.Errorf("not signed by the current CA: %w", err)
	}
	if now.Before(c.NotBefore) {
		return fmt.Errorf("not valid before %s", c.NotBefore.UTC().Format(time.RFC3339))
	}
	if !now.Before(RenewAt(c)) {
		return fmt.Errorf("due for renewal since %s", RenewAt(c).UTC().Format(time.RFC3339))
	}
	if c.Subject.CommonName != spec.CommonName {
		return fmt.Errorf("common name is %q, want %q", c.Subject.CommonName, spec.CommonName)
	}
	if !sameSet(c.Subject.Organization, spec.Organization) {
		return fmt.Errorf("organization is %v, want %v", c.Subject.Organization, spec.Organization)
	}
	if !slices.Equal(c.ExtKeyUsage, extKeyUsages(spec.Usage)) {
		return errors.New("key usages differ")
	}
	for _, name := range spec.DNSNames {
		if !slices.Contains(c.DNSNames, name) {
			return fmt.Errorf("does not cover DNS name %q", name)
		}
	}
	for _, ip := range spec.IPs {
		if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
			return fmt.Errorf("does not cover IP address %s", ip)
		}
	}
	if !publicKeysEqual(c.PublicKey, kp.Key.Public()) {
		return errors.New("private key does not match the certificate")
	}
	return nil
}

// CheckCA says why kp is not a usable certificate authority at now; nil when it is.
func (kp *KeyPair) CheckCA(now time.Time) error {
	c := kp.Cert
	if !c.IsCA {
		return errors.New("not a CA certificate")
	}
	if now.Before(c.NotBefore) || !now.Before(c.NotAfter) {
		return fmt.Errorf("outside its validity %s to %s",
			c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	}
	if !publicKeysEqual(c.PublicKey, kp.Key.Public()) {
		return errors.New("private key does not match the certificate")
	}
	return nil
}

// EncodeCert is a certificate in PEM.
func EncodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// ParseKeyPair reads a PEM certificate and its PEM private key.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, err
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// ParseCert reads the first certificate of a PEM bundle.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate found")
	}
	return x509.ParseCertificate(block.Bytes)
}

// ParseKey reads a PEM private key.
func ParseKey(keyPEM []byte) (crypto.Signer, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, errors.New("private key cannot sign")
	}
	return signer, nil
}

// NewSigningKey creates a private key for signing service-account tokens.
func NewSigningKey() (crypto.Signer, error) { return newKey() }

// EncodeKey returns a private key PEM-encoded.
func EncodeKey(key crypto.Signer) ([]byte, error) { return encodeKey(key) }

// EncodePublicKey returns the public half of key PEM-encoded.
func EncodePublicKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("encoding public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

func newKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating ECDSA P-256 key: %w", err)
	}
	return key, nil
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("encoding private key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
	}
	der, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func sign(tmpl, parent *x509.Certificate, key crypto.Signer, parentKey crypto.Signer) (*KeyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		return nil, fmt.Errorf("signing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

func extKeyUsages(u Usage) []x509.ExtKeyUsage {
	var out []x509.ExtKeyUsage
	if u&UsageServer != 0 {
		out = append(out, x509.ExtKeyUsageServerAuth)
	}
	if u&UsageClient != 0 {
		out = append(out, x509.ExtKeyUsageClientAuth)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ad, err1 := x509.MarshalPKIXPublicKey(a)
	bd, err2 := x509.MarshalPKIXPublicKey(b)
	return err1 == nil && err2 == nil && bytes.Equal(ad, bd)
}
