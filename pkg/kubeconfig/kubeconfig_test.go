package kubeconfig_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// validConfig is a Config with real PEM material, so that what client-go reads back is what a
// client would use.
func validConfig(t *testing.T) kubeconfig.Config {
	t.Helper()
	now := time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("tenant-ca", now)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.Issue(pki.CertSpec{CommonName: "kubenest-admin", Organization: []string{"system:masters"}, Usage: pki.UsageClient}, now)
	if err != nil {
		t.Fatal(err)
	}
	key, err := admin.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig.Config{
		ClusterName:   "tenant",
		Server:        "https://tenant-apiserver.tenants.svc:6443",
		CAPEM:         ca.CertPEM(),
		User:          "kubenest-admin",
		ClientCertPEM: admin.CertPEM(),
		ClientKeyPEM:  key,
	}
}

func TestBuildParseRoundTrip(t *testing.T) {
	base := validConfig(t)
	tests := []struct {
		name   string
		server string
	}{
		{"service DNS name", "https://tenant-apiserver.tenants.svc:6443"},
		{"IPv4 node port", "https://192.0.2.10:31443"},
		{"IPv6 node port", "https://[fd00::10]:31443"},
		{"loopback", "https://127.0.0.1:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			in.Server = tt.server
			data, err := kubeconfig.Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			got, err := kubeconfig.Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.ClusterName != in.ClusterName || got.Server != in.Server || got.User != in.User ||
				!bytes.Equal(got.CAPEM, in.CAPEM) || !bytes.Equal(got.ClientCertPEM, in.ClientCertPEM) ||
				!bytes.Equal(got.ClientKeyPEM, in.ClientKeyPEM) {
				t.Errorf("Parse(Build(c)) = %+v, want %+v", got, in)
			}
			// client-go builds a working REST config from it.
			rc, err := clientcmd.RESTConfigFromKubeConfig(data)
			if err != nil {
				t.Fatalf("RESTConfigFromKubeConfig: %v", err)
			}
			if rc.Host != in.Server || !bytes.Equal(rc.CAData, in.CAPEM) || !bytes.Equal(rc.CertData, in.ClientCertPEM) {
				t.Errorf("REST config host %q, CA/cert equal %v/%v", rc.Host, bytes.Equal(rc.CAData, in.CAPEM), bytes.Equal(rc.CertData, in.ClientCertPEM))
			}
		})
	}
}

// A token file: client-go reads the token from it, and again when it changes (a pod's
// service-account token is renewed on disk).
func TestBuildTokenFile(t *testing.T) {
	c := validConfig(t)
	c.ClientCertPEM, c.ClientKeyPEM = nil, nil
	c.TokenFile = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(c.TokenFile, []byte("the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := kubeconfig.Build(c)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	got, err := kubeconfig.Parse(data)
	if err != nil || got.TokenFile != c.TokenFile || got.Token != "" {
		t.Fatalf("Parse: token file %q, token %q, %v", got.TokenFile, got.Token, err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatalf("RESTConfigFromKubeConfig: %v", err)
	}
	if rc.BearerTokenFile != c.TokenFile || rc.BearerToken != "the-token" || len(rc.CertData) != 0 {
		t.Errorf("REST config bearer token file %q, token %q, client certificate %d bytes", rc.BearerTokenFile, rc.BearerToken, len(rc.CertData))
	}
}

func TestBuildDeterministic(t *testing.T) {
	c := validConfig(t)
	first, err := kubeconfig.Build(c)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	for i := range 20 {
		again, err := kubeconfig.Build(c)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		if !bytes.Equal(first, again) {
			t.Fatalf("Build #%d gave different bytes:\n%s\nvs\n%s", i+2, first, again)
		}
	}
}

func TestBuildRejectsInvalid(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*kubeconfig.Config)
	}{
		{"no cluster name", func(c *kubeconfig.Config) { c.ClusterName = "" }},
		{"no user", func(c *kubeconfig.Config) { c.User = "" }},
		{"no CA", func(c *kubeconfig.Config) { c.CAPEM = nil }},
		{"no client certificate", func(c *kubeconfig.Config) { c.ClientCertPEM = nil }},
		{"no client key", func(c *kubeconfig.Config) { c.ClientKeyPEM = nil }},
		{"no server", func(c *kubeconfig.Config) { c.Server = "" }},
		{"http server", func(c *kubeconfig.Config) { c.Server = "http://tenant:6443" }},
		{"server without scheme", func(c *kubeconfig.Config) { c.Server = "tenant:6443" }},
		{"server without host", func(c *kubeconfig.Config) { c.Server = "https://" }},
		{"server with only a path", func(c *kubeconfig.Config) { c.Server = "https:///api" }},
		{"unparsable server", func(c *kubeconfig.Config) { c.Server = "https://[::1" }},
		{"certificate and token", func(c *kubeconfig.Config) { c.Token = "abcdef.0123456789abcdef" }},
		{"certificate and token file", func(c *kubeconfig.Config) { c.TokenFile = "/var/run/token" }},
		{"token and token file", func(c *kubeconfig.Config) {
			c.ClientCertPEM, c.ClientKeyPEM, c.Token, c.TokenFile = nil, nil, "abcdef.0123456789abcdef", "/var/run/token"
		}},
		{"no credentials", func(c *kubeconfig.Config) { c.ClientCertPEM, c.ClientKeyPEM = nil, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig(t)
			tt.modify(&c)
			if out, err := kubeconfig.Build(c); err == nil {
				t.Errorf("Build succeeded with %s:\n%s", tt.name, out)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	valid, err := kubeconfig.Build(validConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(valid)
	if err != nil {
		t.Fatal(err)
	}
	write := func(modify func(*clientcmdapi.Config)) []byte {
		c := cfg.DeepCopy()
		modify(c)
		out, err := clientcmd.Write(*c)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"garbage", []byte("\x00\x01 this is : not [ a kubeconfig")},
		{"wrong kind", []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n")},
		{"no current context", write(func(c *clientcmdapi.Config) { c.CurrentContext = "" })},
		{"current context missing", write(func(c *clientcmdapi.Config) { c.CurrentContext = "elsewhere" })},
		{"cluster missing", write(func(c *clientcmdapi.Config) { c.Clusters = nil })},
		{"user missing", write(func(c *clientcmdapi.Config) { c.AuthInfos = nil })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := kubeconfig.Parse(tt.data); err == nil {
				t.Errorf("Parse succeeded: %+v", got)
			}
		})
	}
}

// TestClean: what KubeNest wrote passes unchanged; anything a namespace editor could add to make
// the reader's kubectl run a command, read a file or talk elsewhere is refused, naming it.
func TestClean(t *testing.T) {
	c := validConfig(t)
	good, err := kubeconfig.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	out, err := kubeconfig.Clean(good, c.Server)
	if err != nil || !bytes.Equal(out, good) {
		t.Fatalf("Clean of a KubeNest kubeconfig: %v\n%s", err, out)
	}
	if _, err := kubeconfig.Clean(good, "https://elsewhere:6443"); err == nil || !strings.Contains(err.Error(), "is not the virtual cluster's endpoint") {
		t.Errorf("another server: %v", err)
	}

	// Extra contexts and extensions do not survive.
	cfg, err := clientcmd.Load(good)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Contexts["other"] = &clientcmdapi.Context{Cluster: c.ClusterName, AuthInfo: c.User}
	extra, _ := clientcmd.Write(*cfg)
	if out, err := kubeconfig.Clean(extra, ""); err != nil || !bytes.Equal(out, good) {
		t.Errorf("an extra context: %v\n%s", err, out)
	}

	for name, tc := range map[string]struct {
		edit func(*clientcmdapi.Config)
		want string
	}{
		"exec": {func(k *clientcmdapi.Config) {
			k.AuthInfos[c.User].Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", APIVersion: "client.authentication.k8s.io/v1"}
		}, "an exec credential plugin"},
		"auth provider": {func(k *clientcmdapi.Config) {
			k.AuthInfos[c.User].AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"}
		}, "an auth provider"},
		"token file":    {func(k *clientcmdapi.Config) { k.AuthInfos[c.User].TokenFile = "/etc/shadow" }, "a token file"},
		"key file":      {func(k *clientcmdapi.Config) { k.AuthInfos[c.User].ClientKey = "/root/.ssh/id_rsa" }, "a client certificate or key file"},
		"insecure":      {func(k *clientcmdapi.Config) { k.Clusters[c.ClusterName].InsecureSkipTLSVerify = true }, "insecure-skip-tls-verify"},
		"proxy":         {func(k *clientcmdapi.Config) { k.Clusters[c.ClusterName].ProxyURL = "http://198.51.100.9:3128" }, "a proxy"},
		"impersonation": {func(k *clientcmdapi.Config) { k.AuthInfos[c.User].Impersonate = "someone" }, "impersonation"},
		"no context":    {func(k *clientcmdapi.Config) { k.CurrentContext = "gone" }, "no current context"},
	} {
		k, err := clientcmd.Load(good)
		if err != nil {
			t.Fatal(err)
		}
		tc.edit(k)
		data, err := clientcmd.Write(*k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kubeconfig.Clean(data, c.Server); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
}
