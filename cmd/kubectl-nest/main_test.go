package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
)

// TestMergeContext: connect adds its entries, replaces its own on a second run, and leaves
// everything else in the file as it was.
func TestMergeContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "config")
	mine := clientcmdapi.NewConfig()
	mine.Clusters["work"] = &clientcmdapi.Cluster{Server: "https://work.example:6443"}
	mine.AuthInfos["me"] = &clientcmdapi.AuthInfo{Token: "my-token"}
	mine.Contexts["work"] = &clientcmdapi.Context{Cluster: "work", AuthInfo: "me", Namespace: "apps"}
	mine.CurrentContext = "work"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*mine, path); err != nil {
		t.Fatal(err)
	}
	tenant := func(token string) []byte {
		data, err := kubeconfig.Build(kubeconfig.Config{ClusterName: "team-a", Server: "https://198.51.100.1:31000",
			CAPEM: []byte("ca"), User: "admin", Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	if err := mergeContext(path, "kubenest-ns-team-a", tenant("first"), false); err != nil {
		t.Fatal(err)
	}
	if err := mergeContext(path, "kubenest-ns-team-a", tenant("second"), true); err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.CurrentContext != "kubenest-ns-team-a" || len(got.Contexts) != 2 || len(got.AuthInfos) != 2 || len(got.Clusters) != 2 {
		t.Fatalf("merged: current %q, %d contexts, %d users, %d clusters", got.CurrentContext, len(got.Contexts), len(got.AuthInfos), len(got.Clusters))
	}
	if got.AuthInfos["kubenest-ns-team-a"].Token != "second" || got.Clusters["kubenest-ns-team-a"].Server != "https://198.51.100.1:31000" {
		t.Errorf("the tenant's entries: %+v %+v", got.AuthInfos["kubenest-ns-team-a"], got.Clusters["kubenest-ns-team-a"])
	}
	if c := got.Contexts["work"]; c == nil || c.Namespace != "apps" || got.AuthInfos["me"].Token != "my-token" {
		t.Errorf("the user's own entries changed: %+v", got.Contexts["work"])
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode: %v %v", fi.Mode(), err)
	}
}

// TestArguments: mistakes are named before anything is asked of a cluster.
func TestArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kubeconfig"}, "kubectl nest kubeconfig takes the name of one virtual cluster"},
		{[]string{"wait", "a", "b"}, "takes the name of one virtual cluster"},
		{[]string{"wait", "a", "--for", "Gone"}, `--for "Gone": it takes Ready or Asleep`},
		{[]string{"kubeconfig", "a", "--personal", "--portal", "ftp://x"}, "is not an http(s) URL"},
	} {
		var out, errOut bytes.Buffer
		root := newRoot(genericiooptions.IOStreams{Out: &out, ErrOut: &errOut})
		// A kubeconfig that names a cluster nobody answers at: no test reaches one.
		root.SetArgs(append(tc.args, "--server", "https://127.0.0.1:1", "--token", "t", "--request-timeout", "2s"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
