// Package testenv starts a real host cluster control plane inside a test process: etcd
// (go.etcd.io/etcd/server/v3/embed), kube-apiserver and, when asked, kube-controller-manager,
// through the same upstream test servers Kubernetes' own integration tests use. Nothing is
// downloaded and nothing is faked. KubeNest's CRDs are installed from charts/kubenest/crds.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"go.etcd.io/etcd/server/v3/embed"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	kcmtesting "k8s.io/kubernetes/cmd/kube-controller-manager/app/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/crdinstall"
)

// Env is a running host control plane.
type Env struct {
	// Config reaches the apiserver as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client with KubeNest's kinds registered.
	Client client.Client
}

// Options choose what runs besides etcd and the apiserver.
type Options struct {
	// Controllers are kube-controller-manager controllers to run, for example
	// "garbagecollector"; none starts no controller-manager.
	Controllers []string
	// APIServerFlags are added to kube-apiserver's, for example "--authorization-mode=Node,RBAC"
	// (the default lets every authenticated user do everything).
	APIServerFlags []string
}

func init() {
	utilruntime.Must(v1alpha1.AddToScheme(scheme.Scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme.Scheme))
	utilruntime.Must(cmapi.AddToScheme(scheme.Scheme))
}

// Start runs etcd, kube-apiserver and the chosen controllers until the test ends, with
// KubeNest's CRDs installed and established.
func Start(t *testing.T, opts Options) *Env {
	t.Helper()
	etcdURL := startEtcd(t)

	storage := storagebackend.NewDefaultConfig("/registry", nil)
	storage.Transport.ServerList = []string{etcdURL}
	server, err := apiservertesting.StartTestServer(t, apiservertesting.NewDefaultTestServerOptions(),
		append([]string{"--endpoint-reconciler-type=none"}, opts.APIServerFlags...), storage)
	if err != nil {
		t.Fatalf("starting kube-apiserver: %v", err)
	}
	t.Cleanup(server.TearDownFn)

	cfg := rest.CopyConfig(server.ClientConfig)
	cfg.QPS, cfg.Burst = 200, 400
	// The test server speaks protobuf; custom resources only JSON.
	cfg.ContentType, cfg.AcceptContentTypes = "", ""
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatalf("creating client: %v", err)
	}
	env := &Env{Config: cfg, Client: c}
	env.installCRDs(t)

	if len(opts.Controllers) > 0 {
		kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
		if err := writeKubeconfig(cfg, kubeconfig); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		kcm, err := kcmtesting.StartTestServer(t, ctx, []string{
			"--kubeconfig=" + kubeconfig,
			"--leader-elect=false",
			"--controllers=" + strings.Join(opts.Controllers, ","),
		})
		if err != nil {
			t.Fatalf("starting kube-controller-manager: %v", err)
		}
		t.Cleanup(kcm.TearDownFn)
	}
	return env
}

// Manager is a controller manager against e's apiserver, with the operator's kinds in its
// scheme and no metrics or health endpoints, for a test to set the operator's controllers up
// on and start.
func (e *Env) Manager(t *testing.T) ctrl.Manager {
	t.Helper()
	ctrl.SetLogger(klog.Background())
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:                 scheme.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

// WriteKubeconfig writes a kubeconfig for the cluster admin into the test's temporary
// directory and returns its path, for components that take a kubeconfig file.
func (e *Env) WriteKubeconfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := writeKubeconfig(e.Config, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// CreateFromChartFile creates every object of a multi-document YAML file of the chart's
// files/ folder (RBAC, admission policies) as the chart installs it.
func CreateFromChartFile(t *testing.T, ctx context.Context, c client.Client, name string) {
	t.Helper()
	path := filepath.Join(RepoRoot(), "charts", "kubenest", "files", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(data, []byte("\n---\n")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Create(ctx, u); err != nil {
			t.Fatalf("%s: creating %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// RepoRoot is the root of this repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func (e *Env) installCRDs(t *testing.T) {
	t.Helper()
	dir := filepath.Join(RepoRoot(), "charts", "kubenest", "crds")
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in %s (run make generate): %v", dir, err)
	}
	if err := crdinstall.Install(context.Background(), e.Config, files...); err != nil {
		t.Fatal(err)
	}
	// The client's REST mapper learns the new kinds lazily; a fresh client sees them.
	c, err := client.New(e.Config, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	e.Client = c
}

// startEtcd runs an embedded etcd on loopback ports until the test ends and returns its
// client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.LogLevel = "error"
	client, peer := freeURL(t), freeURL(t)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("starting etcd: %v", err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready after 30s")
	}
	return client.String()
}

func freeURL(t *testing.T) url.URL {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return url.URL{Scheme: "http", Host: l.Addr().String()}
}

// writeKubeconfig writes a kubeconfig for cfg, which authenticates with a bearer token.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData,
		CertificateAuthority: cfg.CAFile, TLSServerName: cfg.ServerName, InsecureSkipTLSVerify: cfg.Insecure}
	kc.AuthInfos["test"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken,
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}
