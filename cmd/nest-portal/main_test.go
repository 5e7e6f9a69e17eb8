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
