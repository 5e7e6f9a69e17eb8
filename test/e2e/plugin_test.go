//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// TestKubectlPlugin runs "kubectl nest" (kubectl finds kubectl-nest on its PATH) as a tenant
// of one host namespace, who signs in to the host with a ServiceAccount token and is bound to
// the chart's kubenest:portal-tenant role: wait, list, the admin and a personal kubeconfig,
// connect, sleep and wake, and what someone without rights is told.
func TestKubectlPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-plugin")
	const name = "plug"
	vc := newVC(ns, name, v1alpha1.ExposureNodePort)
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	alice := userKubeconfig(t, dir, "alice", tenantToken(t, ctx, ns, "alice", naming.For(name).KubeconfigSecret()))
	nobody := userKubeconfig(t, dir, "nobody", tenantToken(t, ctx, createNamespace(t, ctx, "e2e-plugin-other"), "nobody", ""))
	portal := portalURL(t, ctx)
	bin, err := filepath.Abs(filepath.Join("..", "..", "_output", "bin"))
	if err != nil {
		t.Fatal(err)
	}
	// nest runs kubectl nest as the user of kubeconfig, with KUBECONFIG (where connect writes)
	// in the test's directory; ok says whether it exited 0.
	nest := func(kubeconfig string, args ...string) (string, bool) {
		t.Helper()
		cmd := exec.CommandContext(ctx, *kubectlPath, append([]string{"nest", "--kubeconfig", kubeconfig, "-n", ns}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+filepath.Join(dir, "merged"), "KUBENEST_PORTAL="+portal)
		out, err := cmd.CombinedOutput()
		t.Logf("kubectl nest %s:\n%s", strings.Join(args, " "), out)
		return string(out), err == nil
	}
	mustNest := func(kubeconfig string, args ...string) string {
		t.Helper()
		out, ok := nest(kubeconfig, args...)
		if !ok {
			t.Fatalf("kubectl nest %s failed", strings.Join(args, " "))
		}
		return out
	}

	t.Run("wait says what it waits for, and list shows the cluster", func(t *testing.T) {
		if out := mustNest(alice, "wait", name, "--timeout", readyBound.String()); !strings.Contains(out, ns+"/"+name+" is Ready at https://") {
			t.Errorf("wait: %s", out)
		}
		if out := mustNest(alice, "list"); !strings.Contains(out, name) || !strings.Contains(out, "Ready") {
			t.Errorf("list: %s", out)
		}
	})

	t.Run("the admin kubeconfig works", func(t *testing.T) {
		file := filepath.Join(dir, "admin.kubeconfig")
		mustNest(alice, "kubeconfig", name, "--file", file)
		if out := kubectl(t, "--kubeconfig", file, "get", "ns", "kube-system", "-o", "name"); strings.TrimSpace(out) != "namespace/kube-system" {
			t.Errorf("kubectl get ns with the admin kubeconfig: %s", out)
		}
	})

	t.Run("connect adds a personal context from the portal, and kubectl uses it", func(t *testing.T) {
		if out := mustNest(alice, "connect", name, "--personal"); !strings.Contains(out, "current context now") {
			t.Errorf("connect: %s", out)
		}
		merged := filepath.Join(dir, "merged")
		whoami := kubectl(t, "--kubeconfig", merged, "auth", "whoami")
		if !strings.Contains(whoami, "host:system:serviceaccount:"+ns+":alice") || !strings.Contains(whoami, "kubenest:portal-users") {
			t.Errorf("the personal context is not alice's: %s", whoami)
		}
		cfg, err := clientcmd.LoadFromFile(merged)
		if err != nil || cfg.CurrentContext != "kubenest-"+ns+"-"+name {
			t.Errorf("current context of %s: %v %+v", merged, err, cfg)
		}
	})

	t.Run("someone without rights is told why", func(t *testing.T) {
		for _, args := range [][]string{{"kubeconfig", name}, {"kubeconfig", name, "--personal"}, {"sleep", name}} {
			out, ok := nest(nobody, args...)
			if ok || !strings.Contains(out, "forbidden") {
				t.Errorf("kubectl nest %s as a user of another namespace: ok %v: %s", strings.Join(args, " "), ok, out)
			}
		}
		if out, ok := nest(alice, "kubeconfig", "nope"); ok || !strings.Contains(out, "there is no virtual cluster nope in namespace "+ns) {
			t.Errorf("a cluster that does not exist: %s", out)
		}
	})

	t.Run("sleep and wake", func(t *testing.T) {
		if out := mustNest(alice, "sleep", name); !strings.Contains(out, "is asleep") {
			t.Errorf("sleep: %s", out)
		}
		if out := mustNest(alice, "list"); !strings.Contains(out, "Sleeping") {
			t.Errorf("list of a sleeping cluster: %s", out)
		}
		if out := mustNest(alice, "wake", name); !strings.Contains(out, "is Ready") {
			t.Errorf("wake: %s", out)
		}
		kubectl(t, "--kubeconfig", filepath.Join(dir, "merged"), "get", "ns", "default")
	})
}

// userKubeconfig writes a kubeconfig for the host cluster with a bearer token and returns its
// path.
func userKubeconfig(t *testing.T, dir, user, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["host"] = &clientcmdapi.Cluster{Server: hostConfig.Host, CertificateAuthorityData: hostConfig.CAData}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "host", AuthInfo: user}
	cfg.CurrentContext = user
	path := filepath.Join(dir, user+".host.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
