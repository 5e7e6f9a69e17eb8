package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	kubeconfig := filepath.Join(dir, "kubeconfig")
	for path, data := range map[string]string{empty: "\n", kubeconfig: "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: https://127.0.0.1:1}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"unknown flag":       {[]string{"--nope"}, "flag provided but not defined: -nope"},
		"argument":           {[]string{"serve"}, `unexpected argument "serve"`},
		"tls half":           {[]string{"--tls-cert-file=/x"}, "--tls-cert-file and --tls-key-file go together"},
		"session ttl":        {[]string{"--session-ttl=0s"}, "--session-ttl 0s: must be positive"},
		"validity":           {[]string{"--personal-kubeconfig-validity=-1h"}, "--personal-kubeconfig-validity -1h0m0s: must be positive"},
		"poll":               {[]string{"--poll-interval=1ms"}, "--poll-interval 1ms: must be at least 200ms"},
		"namespace":          {[]string{"--namespaces=ok,Not_OK"}, `--namespaces: "Not_OK" is not a namespace name`},
		"missing key file":   {[]string{"--session-key-file=" + filepath.Join(dir, "absent")}, "--session-key-file: open"},
		"short key file":     {[]string{"--session-key-file=" + short}, "has 9 bytes, needs at least 32"},
		"missing kubeconfig": {[]string{"--kubeconfig=" + filepath.Join(dir, "absent")}, "host cluster configuration"},
		"oidc client alone":  {[]string{"--oidc-client-id=portal"}, "--oidc-client-id is set but --oidc-issuer-url is not"},
		"oidc incomplete":    {[]string{"--oidc-issuer-url=https://idp"}, "needs --oidc-client-id and --oidc-redirect-url"},
		"oidc bad redirect": {[]string{"--oidc-issuer-url=https://idp", "--oidc-client-id=p", "--oidc-redirect-url=https://portal/callback",
			"--kubeconfig=" + kubeconfig}, "must end in the path /oidc/callback"},
		"oidc empty secret": {[]string{"--oidc-issuer-url=https://idp", "--oidc-client-id=p", "--oidc-redirect-url=https://portal/oidc/callback",
			"--oidc-client-secret-file=" + empty}, "is empty"},
		"oidc bad CA": {[]string{"--oidc-issuer-url=https://idp", "--oidc-client-id=p", "--oidc-redirect-url=https://portal/oidc/callback",
			"--oidc-ca-file=" + short}, "holds no PEM certificate"},
	} {
		err := run(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, err, tc.want)
		}
	}
	if err := run([]string{"--help"}); err != nil {
		t.Errorf("--help: %v", err)
	}
}
