package controlplane

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// verifies says whether a client trusting bundle accepts a certificate issued by signer.
func verifies(t *testing.T, bundle []byte, signer *pki.KeyPair, now time.Time) bool {
	t.Helper()
	leaf, err := signer.Issue(pki.CertSpec{CommonName: "apiserver", DNSNames: []string{"apiserver"}, Usage: pki.UsageServer}, now)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("empty bundle")
	}
	_, err = leaf.Cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "apiserver", CurrentTime: now})
	return err == nil
}

// TestCARotation walks a CA rotation through its steps, with the CA Secret written and read
// back between each as the operator does, and checks at each step who trusts whom: a client
// that fetched its kubeconfig before the rotation, and one that fetched it during.
func TestCARotation(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	a, err := NewAuthorities("team-a", now)
	if err != nil {
		t.Fatal(err)
	}
	reload := func() {
		t.Helper()
		data, err := a.SecretData()
		if err != nil {
			t.Fatal(err)
		}
		if a, err = LoadAuthorities(data, now); err != nil {
			t.Fatal(err)
		}
	}
	oldCA := a.CA
	oldClient := a.CABundle()

	for _, step := range []struct {
		step        string
		changed     bool
		wantErr     string
		at          v1alpha1.CARotationPhase
		signerIsOld bool
	}{
		{step: "", at: "", signerIsOld: true},
		{step: CARotationSwitch, wantErr: "set it to start first", at: "", signerIsOld: true},
		{step: CARotationFinish, at: "", signerIsOld: true},
		{step: CARotationStart, changed: true, at: v1alpha1.CARotationTrusting, signerIsOld: true},
		{step: CARotationStart, at: v1alpha1.CARotationTrusting, signerIsOld: true},
		{step: CARotationFinish, wantErr: "set it to switch first", at: v1alpha1.CARotationTrusting, signerIsOld: true},
		{step: CARotationSwitch, changed: true, at: v1alpha1.CARotationSwitched},
		{step: CARotationSwitch, at: v1alpha1.CARotationSwitched},
		{step: CARotationStart, wantErr: "set it to finish first", at: v1alpha1.CARotationSwitched},
		{step: CARotationFinish, changed: true, at: ""},
		{step: "rotate", wantErr: "must be start, switch or finish", at: ""},
	} {
		newClient := a.CABundle() // what a client fetching the kubeconfig now gets
		changed, err := a.StepCARotation(step.step, "team-a", now)
		if (err == nil) != (step.wantErr == "") || (err != nil && !strings.Contains(err.Error(), step.wantErr)) {
			t.Fatalf("%q: err %v, want %q", step.step, err, step.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), v1alpha1.AnnotationCARotation) {
			t.Errorf("%q: the error does not name the annotation: %v", step.step, err)
		}
		if changed != step.changed {
			t.Fatalf("%q: changed %v, want %v", step.step, changed, step.changed)
		}
		reload()
		if got := a.CARotation(); got != step.at {
			t.Fatalf("%q: at %q, want %q", step.step, got, step.at)
		}
		if (a.CA.Cert.Equal(oldCA.Cert)) != step.signerIsOld {
			t.Fatalf("%q: the old CA signs: %v, want %v", step.step, !step.signerIsOld, step.signerIsOld)
		}
		// The servers' certificates come from the signing CA; the apiserver trusts the bundle.
		if !verifies(t, a.CABundle(), a.CA, now) {
			t.Errorf("%q: the bundle does not trust the signing CA", step.step)
		}
		// Clients that fetched their kubeconfig before "start" work until the new CA signs.
		if got := verifies(t, oldClient, a.CA, now); got != step.signerIsOld {
			t.Errorf("%q: a client from before the rotation trusts the server: %v, want %v", step.step, got, step.signerIsOld)
		}
		// Clients that fetched it at the previous step keep working through the step, as
		// long as the rotation was under way when they fetched it (or nothing changed).
		if a.CARotation() != "" && !verifies(t, newClient, a.CA, now) {
			t.Errorf("%q: a client that fetched the kubeconfig during the rotation no longer trusts the server", step.step)
		}
		// Certificates signed by the old CA (clients not yet moved) are accepted until finish.
		oldTrusted := verifies(t, a.CABundle(), oldCA, now)
		if want := step.signerIsOld || step.at == v1alpha1.CARotationSwitched; oldTrusted != want {
			t.Errorf("%q: the old CA is trusted: %v, want %v", step.step, oldTrusted, want)
		}
	}
}
