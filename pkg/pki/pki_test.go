package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubenest-io/kubenest/pkg/pki"
)

// now is the fixed "now" every test starts from.
var now = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

func newCA(t *testing.T, cn string, at time.Time) *pki.KeyPair {
	t.Helper()
	ca, err := pki.NewCA(cn, at)
	if err != nil {
		t.Fatalf("NewCA(%q): %v", cn, err)
	}
	return ca
}

func issue(t *testing.T, ca *pki.KeyPair, spec pki.CertSpec, at time.Time) *pki.KeyPair {
	t.Helper()
	kp, err := ca.Issue(spec, at)
	if err != nil {
		t.Fatalf("Issue(%q): %v", spec.CommonName, err)
	}
	return kp
}

func TestNewCA(t *testing.T) {
	ca := newCA(t, "tenant-ca", now)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Errorf("IsCA = %v, BasicConstraintsValid = %v; want both true", c.IsCA, c.BasicConstraintsValid)
	}
	if c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("KeyUsage %v lacks CertSign", c.KeyUsage)
	}
	if c.Subject.CommonName != "tenant-ca" {
		t.Errorf("CN = %q, want tenant-ca", c.Subject.CommonName)
	}
	if got := c.NotAfter.Sub(now); got != pki.CAValidity {
		t.Errorf("NotAfter is %s after now, want %s", got, pki.CAValidity)
	}
	if pki.CAValidity < 10*365*24*time.Hour {
		t.Errorf("CAValidity = %s, want ten years", pki.CAValidity)
	}
	if c.NotBefore.After(now) {
		t.Errorf("NotBefore %s is after now %s", c.NotBefore, now)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key %T, want ECDSA P-256", c.PublicKey)
	}
	if _, ok := ca.Key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("private key %T, want *ecdsa.PrivateKey", ca.Key)
	}
	if err := ca.CheckCA(now); err != nil {
		t.Errorf("CheckCA of a fresh CA: %v", err)
	}
	other := newCA(t, "tenant-ca", now)
	if other.Cert.SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Errorf("two CAs share serial number %s", c.SerialNumber)
	}
}

func TestIssue(t *testing.T) {
	ca := newCA(t, "ca", now)
	tests := []struct {
		name         string
		spec         pki.CertSpec
		at           time.Time
		wantUsages   []x509.ExtKeyUsage
		wantNotAfter time.Time
	}{
		{
			name: "server",
			spec: pki.CertSpec{
				CommonName: "kube-apiserver", Usage: pki.UsageServer,
				DNSNames: []string{"localhost", "tenant-apiserver.ns.svc"},
				IPs:      []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.254.0.1"), net.ParseIP("fd00::1")},
			},
			at:           now,
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			wantNotAfter: now.Add(pki.LeafValidity),
		},
		{
			name:         "client",
			spec:         pki.CertSpec{CommonName: "kubenest-admin", Organization: []string{"system:masters"}, Usage: pki.UsageClient},
			at:           now,
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantNotAfter: now.Add(pki.LeafValidity),
		},
		{
			name:         "server and client",
			spec:         pki.CertSpec{CommonName: "etcd-peer", Usage: pki.UsageServer | pki.UsageClient, DNSNames: []string{"*.peer.ns.svc"}},
			at:           now,
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			wantNotAfter: now.Add(pki.LeafValidity),
		},
		{
			name:         "explicit validity",
			spec:         pki.CertSpec{CommonName: "short", Usage: pki.UsageClient, Validity: 24 * time.Hour},
			at:           now,
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantNotAfter: now.Add(24 * time.Hour),
		},
		{
			name:         "validity longer than the CA's",
			spec:         pki.CertSpec{CommonName: "long", Usage: pki.UsageClient, Validity: 20 * 365 * 24 * time.Hour},
			at:           now,
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			wantNotAfter: ca.Cert.NotAfter,
		},
		{
			name:         "default validity near the CA's end",
			spec:         pki.CertSpec{CommonName: "late", Usage: pki.UsageServer},
			at:           ca.Cert.NotAfter.Add(-30 * 24 * time.Hour),
			wantUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			wantNotAfter: ca.Cert.NotAfter,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp := issue(t, ca, tt.spec, tt.at)
			c := kp.Cert
			if err := c.CheckSignatureFrom(ca.Cert); err != nil {
				t.Errorf("not signed by the CA: %v", err)
			}
			if c.IsCA {
				t.Error("leaf is a CA")
			}
			if c.Subject.CommonName != tt.spec.CommonName {
				t.Errorf("CN = %q, want %q", c.Subject.CommonName, tt.spec.CommonName)
			}
			if !slices.Equal(c.Subject.Organization, tt.spec.Organization) {
				t.Errorf("O = %q, want %q", c.Subject.Organization, tt.spec.Organization)
			}
			if !slices.Equal(c.ExtKeyUsage, tt.wantUsages) {
				t.Errorf("ExtKeyUsage = %v, want %v", c.ExtKeyUsage, tt.wantUsages)
			}
			if !slices.Equal(c.DNSNames, tt.spec.DNSNames) {
				t.Errorf("DNSNames = %q, want %q", c.DNSNames, tt.spec.DNSNames)
			}
			if len(c.IPAddresses) != len(tt.spec.IPs) {
				t.Errorf("IPAddresses = %v, want %v", c.IPAddresses, tt.spec.IPs)
			}
			for _, ip := range tt.spec.IPs {
				if !slices.ContainsFunc(c.IPAddresses, ip.Equal) {
					t.Errorf("IPAddresses %v lack %s", c.IPAddresses, ip)
				}
			}
			if !c.NotAfter.Equal(tt.wantNotAfter) {
				t.Errorf("NotAfter = %s, want %s", c.NotAfter, tt.wantNotAfter)
			}
			if c.NotAfter.After(ca.Cert.NotAfter) {
				t.Errorf("leaf NotAfter %s outlives the CA's %s", c.NotAfter, ca.Cert.NotAfter)
			}
			if c.NotBefore.After(tt.at) {
				t.Errorf("NotBefore %s is after the issue time %s", c.NotBefore, tt.at)
			}
			if err := kp.Check(tt.spec, ca.Cert, tt.at); err != nil {
				t.Errorf("Check of the fresh certificate: %v", err)
			}
			// The certificate verifies as a chain for what it is for.
			roots := x509.NewCertPool()
			roots.AddCert(ca.Cert)
			if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: tt.at, KeyUsages: tt.wantUsages}); err != nil {
				t.Errorf("Verify: %v", err)
			}
		})
	}
}

func TestIssueErrors(t *testing.T) {
	ca := newCA(t, "ca", now)
	tests := []struct {
		name string
		spec pki.CertSpec
	}{
		{"no common name", pki.CertSpec{Usage: pki.UsageServer}},
		{"no usage", pki.CertSpec{CommonName: "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if kp, err := ca.Issue(tt.spec, now); err == nil {
				t.Errorf("Issue(%+v) = %v, want an error", tt.spec, kp.Cert.Subject)
			}
		})
	}
}

func TestRenewAt(t *testing.T) {
	tests := []struct {
		name      string
		notBefore time.Time
		notAfter  time.Time
		want      time.Time
	}{
		{"three days", now, now.Add(72 * time.Hour), now.Add(48 * time.Hour)},
		{"a year", now, now.Add(365 * 24 * time.Hour), now.Add(365 * 24 * time.Hour * 2 / 3)},
		{"ten years", now, now.Add(pki.CAValidity), now.Add(pki.CAValidity * 2 / 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pki.RenewAt(&x509.Certificate{NotBefore: tt.notBefore, NotAfter: tt.notAfter})
			if !got.Equal(tt.want) {
				t.Errorf("RenewAt = %s, want %s", got, tt.want)
			}
		})
	}
	// An issued leaf is due two thirds into its actual life.
	leaf := issue(t, newCA(t, "ca", now), pki.CertSpec{CommonName: "x", Usage: pki.UsageClient}, now)
	life := leaf.Cert.NotAfter.Sub(leaf.Cert.NotBefore)
	if got, want := pki.RenewAt(leaf.Cert), leaf.Cert.NotBefore.Add(life*2/3); !got.Equal(want) {
		t.Errorf("RenewAt(leaf) = %s, want %s", got, want)
	}
	// However short-lived, a new leaf is not due at once: renewal comes well after issuance
	// and well before expiry.
	for _, validity := range []time.Duration{time.Minute, 2 * time.Minute, time.Hour} {
		leaf := issue(t, newCA(t, "ca", now), pki.CertSpec{CommonName: "x", Usage: pki.UsageClient, Validity: validity}, now)
		renew := pki.RenewAt(leaf.Cert)
		if early, late := now.Add(validity/2), now.Add(validity*3/4); renew.Before(early) || renew.After(late) {
			t.Errorf("%s leaf: renewed %s after issuance, want between %s and %s", validity, renew.Sub(now), validity/2, validity*3/4)
		}
	}
}

func TestCheck(t *testing.T) {
	ca := newCA(t, "ca", now)
	otherCA := newCA(t, "ca", now)
	spec := pki.CertSpec{
		CommonName:   "kube-apiserver",
		Organization: []string{"b", "a"},
		DNSNames:     []string{"localhost", "tenant-apiserver.ns.svc"},
		IPs:          []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.254.0.1")},
		Usage:        pki.UsageServer,
	}
	kp := issue(t, ca, spec, now)
	stranger := issue(t, ca, spec, now)
	renewAt := pki.RenewAt(kp.Cert)

	with := func(f func(*pki.CertSpec)) pki.CertSpec {
		s := spec
		s.Organization = slices.Clone(spec.Organization)
		s.DNSNames = slices.Clone(spec.DNSNames)
		s.IPs = slices.Clone(spec.IPs)
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		kp      *pki.KeyPair
		spec    pki.CertSpec
		ca      *x509.Certificate
		at      time.Time
		wantErr string // empty: Check must pass
	}{
		{name: "fresh and matching", kp: kp, spec: spec, ca: ca.Cert, at: now},
		{name: "just before renewal", kp: kp, spec: spec, ca: ca.Cert, at: renewAt.Add(-time.Second)},
		{name: "organization in another order", kp: kp, spec: with(func(s *pki.CertSpec) { s.Organization = []string{"a", "b"} }), ca: ca.Cert, at: now},
		{name: "fewer names than the certificate covers", kp: kp, spec: with(func(s *pki.CertSpec) { s.DNSNames = s.DNSNames[:1]; s.IPs = nil }), ca: ca.Cert, at: now},
		{name: "IPv4 in 16-byte form", kp: kp, spec: with(func(s *pki.CertSpec) { s.IPs = []net.IP{net.ParseIP("10.254.0.1").To16()} }), ca: ca.Cert, at: now},

		{name: "other CA", kp: kp, spec: spec, ca: otherCA.Cert, at: now, wantErr: "not signed by the current CA"},
		{name: "before NotBefore", kp: kp, spec: spec, ca: ca.Cert, at: kp.Cert.NotBefore.Add(-time.Second), wantErr: "not valid before"},
		{name: "at the renewal point", kp: kp, spec: spec, ca: ca.Cert, at: renewAt, wantErr: "due for renewal"},
		{name: "past the renewal point", kp: kp, spec: spec, ca: ca.Cert, at: renewAt.Add(time.Hour), wantErr: "due for renewal"},
		{name: "expired", kp: kp, spec: spec, ca: ca.Cert, at: kp.Cert.NotAfter.Add(time.Hour), wantErr: "due for renewal"},
		{name: "common name differs", kp: kp, spec: with(func(s *pki.CertSpec) { s.CommonName = "other" }), ca: ca.Cert, at: now, wantErr: "common name"},
		{name: "organization differs", kp: kp, spec: with(func(s *pki.CertSpec) { s.Organization = []string{"a"} }), ca: ca.Cert, at: now, wantErr: "organization"},
		{name: "organization missing", kp: kp, spec: with(func(s *pki.CertSpec) { s.Organization = nil }), ca: ca.Cert, at: now, wantErr: "organization"},
		{name: "usages differ", kp: kp, spec: with(func(s *pki.CertSpec) { s.Usage = pki.UsageClient }), ca: ca.Cert, at: now, wantErr: "usages"},
		{name: "usage added", kp: kp, spec: with(func(s *pki.CertSpec) { s.Usage = pki.UsageServer | pki.UsageClient }), ca: ca.Cert, at: now, wantErr: "usages"},
		{name: "missing DNS name", kp: kp, spec: with(func(s *pki.CertSpec) { s.DNSNames = append(s.DNSNames, "new.example.com") }), ca: ca.Cert, at: now, wantErr: `DNS name "new.example.com"`},
		{name: "missing IP", kp: kp, spec: with(func(s *pki.CertSpec) { s.IPs = append(s.IPs, net.ParseIP("192.0.2.7")) }), ca: ca.Cert, at: now, wantErr: "192.0.2.7"},
		{name: "key does not match", kp: &pki.KeyPair{Cert: kp.Cert, Key: stranger.Key}, spec: spec, ca: ca.Cert, at: now, wantErr: "private key does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.kp.Check(tt.spec, tt.ca, tt.at)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Check: %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("Check = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("Check: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckCA(t *testing.T) {
	ca := newCA(t, "ca", now)
	other := newCA(t, "ca", now)
	leaf := issue(t, ca, pki.CertSpec{CommonName: "leaf", Usage: pki.UsageClient}, now)
	tests := []struct {
		name    string
		kp      *pki.KeyPair
		at      time.Time
		wantErr string
	}{
		{name: "fresh", kp: ca, at: now},
		{name: "nine years later", kp: ca, at: now.Add(9 * 365 * 24 * time.Hour)},
		{name: "not a CA", kp: leaf, at: now, wantErr: "not a CA"},
		{name: "before NotBefore", kp: ca, at: ca.Cert.NotBefore.Add(-time.Second), wantErr: "outside its validity"},
		{name: "at NotAfter", kp: ca, at: ca.Cert.NotAfter, wantErr: "outside its validity"},
		{name: "expired", kp: ca, at: ca.Cert.NotAfter.Add(time.Hour), wantErr: "outside its validity"},
		{name: "key does not match", kp: &pki.KeyPair{Cert: ca.Cert, Key: other.Key}, at: now, wantErr: "private key does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.kp.CheckCA(tt.at)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("CheckCA: %v, want nil", err)
			case tt.wantErr != "" && err == nil:
				t.Errorf("CheckCA = nil, want an error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Errorf("CheckCA: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseRoundTrip(t *testing.T) {
	ca := newCA(t, "ca", now)
	spec := pki.CertSpec{CommonName: "etcd-server", DNSNames: []string{"localhost"}, Usage: pki.UsageServer | pki.UsageClient}
	leaf := issue(t, ca, spec, now)
	for _, kp := range []*pki.KeyPair{ca, leaf} {
		t.Run(kp.Cert.Subject.CommonName, func(t *testing.T) {
			keyPEM, err := kp.KeyPEM()
			if err != nil {
				t.Fatalf("KeyPEM: %v", err)
			}
			got, err := pki.ParseKeyPair(kp.CertPEM(), keyPEM)
			if err != nil {
				t.Fatalf("ParseKeyPair: %v", err)
			}
			if !got.Cert.Equal(kp.Cert) {
				t.Error("certificate differs after the round trip")
			}
			if !got.Key.Public().(*ecdsa.PublicKey).Equal(kp.Key.Public()) {
				t.Error("key differs after the round trip")
			}
			again, err := pki.EncodeKey(got.Key)
			if err != nil {
				t.Fatalf("EncodeKey: %v", err)
			}
			if string(again) != string(keyPEM) {
				t.Error("EncodeKey of the parsed key differs from KeyPEM")
			}
			cert, err := pki.ParseCert(kp.CertPEM())
			if err != nil || !cert.Equal(kp.Cert) {
				t.Errorf("ParseCert: %v, equal %v", err, err == nil && cert.Equal(kp.Cert))
			}
		})
	}
	// A parsed leaf still checks out against its CA.
	keyPEM, _ := leaf.KeyPEM()
	parsed, err := pki.ParseKeyPair(leaf.CertPEM(), keyPEM)
	if err != nil {
		t.Fatalf("ParseKeyPair: %v", err)
	}
	if err := parsed.Check(spec, ca.Cert, now); err != nil {
		t.Errorf("Check after round trip: %v", err)
	}
	// The first certificate of a bundle is the one read.
	bundle := append(leaf.CertPEM(), ca.CertPEM()...)
	if c, err := pki.ParseCert(bundle); err != nil || !c.Equal(leaf.Cert) {
		t.Errorf("ParseCert(bundle) = %v, %v; want the leaf", c, err)
	}
}

func TestParseErrors(t *testing.T) {
	ca := newCA(t, "ca", now)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	certPEM := ca.CertPEM()
	garbage := []byte("not PEM at all")
	badBlock := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})
	badKey := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte("junk")})

	certs := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"garbage", garbage},
		{"a key, not a certificate", keyPEM},
		{"bad DER", badBlock},
	}
	for _, tt := range certs {
		t.Run("cert/"+tt.name, func(t *testing.T) {
			if _, err := pki.ParseCert(tt.in); err == nil {
				t.Error("ParseCert succeeded, want an error")
			}
			if _, err := pki.ParseKeyPair(tt.in, keyPEM); err == nil {
				t.Error("ParseKeyPair succeeded, want an error")
			}
		})
	}
	keys := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"garbage", garbage},
		{"a certificate, not a key", certPEM},
		{"bad DER", badKey},
	}
	for _, tt := range keys {
		t.Run("key/"+tt.name, func(t *testing.T) {
			if _, err := pki.ParseKey(tt.in); err == nil {
				t.Error("ParseKey succeeded, want an error")
			}
			if _, err := pki.ParseKeyPair(certPEM, tt.in); err == nil {
				t.Error("ParseKeyPair succeeded, want an error")
			}
		})
	}
}

func TestEncodeKey(t *testing.T) {
	ecKey, err := pki.NewSigningKey()
	if err != nil {
		t.Fatalf("NewSigningKey: %v", err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		key      crypto.Signer
		wantType string
	}{
		{"ECDSA", ecKey, "EC PRIVATE KEY"},
		{"Ed25519", edKey, "PRIVATE KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := pki.EncodeKey(tt.key)
			if err != nil {
				t.Fatalf("EncodeKey: %v", err)
			}
			block, _ := pem.Decode(out)
			if block == nil || block.Type != tt.wantType {
				t.Fatalf("EncodeKey gave %q, want a %s PEM block", out, tt.wantType)
			}
			parsed, err := pki.ParseKey(out)
			if err != nil {
				t.Fatalf("ParseKey(EncodeKey(key)): %v", err)
			}
			pub := tt.key.Public().(interface {
				Equal(crypto.PublicKey) bool
			})
			if !pub.Equal(parsed.Public()) {
				t.Error("key differs after EncodeKey and ParseKey")
			}
		})
	}
}

func TestEncodePublicKey(t *testing.T) {
	key, err := pki.NewSigningKey()
	if err != nil {
		t.Fatalf("NewSigningKey: %v", err)
	}
	if _, ok := key.(*ecdsa.PrivateKey); !ok {
		t.Errorf("signing key is %T, want ECDSA", key)
	}
	out, err := pki.EncodePublicKey(key)
	if err != nil {
		t.Fatalf("EncodePublicKey: %v", err)
	}
	block, rest := pem.Decode(out)
	if block == nil || block.Type != "PUBLIC KEY" || len(strings.TrimSpace(string(rest))) != 0 {
		t.Fatalf("EncodePublicKey gave %q, want one PUBLIC KEY block", out)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		t.Fatalf("parsing the public key: %v", err)
	}
	if !key.Public().(*ecdsa.PublicKey).Equal(pub) {
		t.Error("encoded public key is not the key's")
	}
}
