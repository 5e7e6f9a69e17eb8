package portal

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

func TestPersonalCertSpec(t *testing.T) {
	for _, tc := range []struct {
		user, wantCN string
		validity     time.Duration
		wantValidity time.Duration
		wantErr      string
	}{
		{user: "alice@example.com", wantCN: "alice@example.com", wantValidity: DefaultPersonalValidity},
		{user: "system:serviceaccount:team-a:alice", wantCN: "host:system:serviceaccount:team-a:alice", validity: time.Hour, wantValidity: time.Hour},
		{user: "system:node:worker-1", wantCN: "host:system:node:worker-1", wantValidity: DefaultPersonalValidity},
		// The names KubeNest's components have in the tenant, which its RBAC and guard trust:
		// with the apiserver's kubelet client's, a host user would run commands on lent nodes.
		{user: "kube-apiserver-kubelet-client", wantCN: "host:kube-apiserver-kubelet-client", wantValidity: DefaultPersonalValidity},
		{user: "kubenest-clustertree", wantCN: "host:kubenest-clustertree", wantValidity: DefaultPersonalValidity},
		{user: "kubenest-dns", wantCN: "host:kubenest-dns", wantValidity: DefaultPersonalValidity},
		{user: "kubenest-admin", wantCN: "host:kubenest-admin", wantValidity: DefaultPersonalValidity},
		{user: "front-proxy-client", wantCN: "host:front-proxy-client", wantValidity: DefaultPersonalValidity},
		// A host user named like another's tenant name gets one of its own.
		{user: "host:system:node:worker-1", wantCN: "host:host:system:node:worker-1", wantValidity: DefaultPersonalValidity},
		{user: " ", wantErr: "needs a user name"},
		{user: "bob", validity: -time.Second, wantErr: "negative"},
	} {
		spec, err := PersonalCertSpec(tc.user, tc.validity)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: %v, want %q", tc.user, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", tc.user, err)
		}
		if spec.CommonName != tc.wantCN || spec.Validity != tc.wantValidity || spec.Usage != pki.UsageClient {
			t.Errorf("%q: %+v", tc.user, spec)
		}
		// Only the portal users' group: never a host group, never a system: group.
		if !slices.Equal(spec.Organization, []string{controlplane.PortalUsersGroup}) {
			t.Errorf("%q: groups %v", tc.user, spec.Organization)
		}
	}
}

func TestPersonalKubeconfig(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	a, err := controlplane.NewAuthorities("team", now)
	if err != nil {
		t.Fatal(err)
	}
	req := PersonalRequest{Cluster: "team", Server: "https://198.51.100.1:31000", User: "system:serviceaccount:ns:alice"}

	check := func(t *testing.T, a *controlplane.Authorities, wantSigner *x509.Certificate) {
		t.Helper()
		data, notAfter, err := PersonalKubeconfig(a, req, now)
		if err != nil {
			t.Fatal(err)
		}
		kc, err := kubeconfig.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		if kc.ClusterName != "team" || kc.Server != req.Server || kc.User != "host:system:serviceaccount:ns:alice" || kc.Token != "" {
			t.Errorf("kubeconfig %+v", kc)
		}
		if string(kc.CAPEM) != string(a.CABundle()) {
			t.Error("the kubeconfig does not trust the CA bundle")
		}
		cert, err := pki.ParseCert(kc.ClientCertPEM)
		if err != nil {
			t.Fatal(err)
		}
		if !notAfter.Equal(cert.NotAfter) || !cert.NotAfter.Equal(now.Add(DefaultPersonalValidity)) {
			t.Errorf("expiry %s / %s, want %s", notAfter, cert.NotAfter, now.Add(DefaultPersonalValidity))
		}
		if err := cert.CheckSignatureFrom(wantSigner); err != nil {
			t.Errorf("not signed by the current signer %s: %v", wantSigner.Subject.CommonName, err)
		}
		if slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			t.Errorf("usages %v", cert.ExtKeyUsage)
		}
		if _, err := pki.ParseKeyPair(kc.ClientCertPEM, kc.ClientKeyPEM); err != nil {
			t.Errorf("certificate and key: %v", err)
		}
	}
	old := a.CA.Cert
	t.Run("no rotation", func(t *testing.T) { check(t, a, old) })
	// A CA rotation: the old CA signs until the switch, the new one after it; the bundle
	// holds both throughout.
	if _, err := a.StepCARotation(controlplane.CARotationStart, "team", now); err != nil {
		t.Fatal(err)
	}
	next := a.NextCA.Cert
	t.Run("rotation trusting", func(t *testing.T) { check(t, a, old) })
	if _, err := a.StepCARotation(controlplane.CARotationSwitch, "team", now); err != nil {
		t.Fatal(err)
	}
	t.Run("rotation switched", func(t *testing.T) { check(t, a, next) })

	if _, _, err := PersonalKubeconfig(a, PersonalRequest{Cluster: "team", User: "u"}, now); err == nil {
		t.Error("no error without an endpoint")
	}
	if _, _, err := PersonalKubeconfig(a, PersonalRequest{Cluster: "team", Server: req.Server}, now); err == nil {
		t.Error("no error without a user")
	}
}
