// Command local runs a real, multi-node Kubernetes host cluster on this machine, for KubeNest's
// end-to-end tests and its "make up":
//
//   - the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) runs as
//     processes of this machine, listening on the bridge address 172.30.0.1;
//   - every worker node is a network namespace (kn-worker-N, address 172.30.0.1N on the bridge
//     knbr0) running its own containerd and kubelet (run by the node's node agent), with its
//     own pod subnet 10.244.N.0/24 routed between the nodes; kube-proxy is a DaemonSet, as on
//     production hosts, so pods, Services and NodePorts behave as on real machines;
//   - images are imported into each node's containerd, never pulled; CoreDNS serves the
//     cluster's DNS;
//   - Services of type LoadBalancer get an address of 172.30.0.200-249 on the bridge from
//     "local lb", which routes it to a node whose kube-proxy serves it (loadbalancer.go);
//   - "local volumes" provisions the default StorageClass's volumes as directories of this
//     machine (volumes.go), with no pod per volume;
//   - "local s3" serves an S3-compatible API at http://172.30.0.1:9000 (s3.go), for
//     snapshots stored in a bucket;
//   - with --oidc-redirect-uri, "local oidc" is an OpenID Connect provider at
//     https://172.30.0.1:9443 (oidc.go) whose ID tokens the apiserver accepts, for the portal's
//     single sign-on.
//
// Everything it starts it records, and "down" stops exactly that and removes what "up"
// created: processes, mounts, network namespaces, the bridge, cgroups and state.
//
//	local up   --kube-bin DIR --nest-controlplane BIN --image TAR... --kube-proxy-image REF --nodes 2
//	local load --image TAR...   (import rebuilt images into the running cluster's nodes)
//	local lb                    (the load balancer of Services of type LoadBalancer; "up" runs it)
//	local s3                    (the S3-compatible server; "up" runs it)
//	local oidc                  (the OpenID Connect provider; "up --oidc-redirect-uri" runs it)
//	local volumes               (the volume provisioner of the default StorageClass; "up" runs it)
//	local down
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// config is where the local cluster lives and what it runs.
type config struct {
	stateDir string // persistent state: PKI, etcd data, node roots
	runDir   string // sockets and runtime state
	outDir   string // kubeconfig and logs for people: _output
	kubeBin  string // kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl
	etcdBin  string // nest-etcd: embedded etcd
	agentBin string // node-agent, which runs each node's kubelet
	// certManager, when set, is test/e2e/certmanager: cert-manager's controllers, test-only.
	certManager     string
	certManagerCRDs string
	lendable        []string
	images          []string
	kubeProxyImage  string // the KubeNest image, one of images: kube-proxy on every node
	addons          string // directory of add-on manifests applied after the nodes are Ready
	nodes           int
	// oidcRedirectURI, when set, runs "local oidc" with a client for the portal that sends
	// people back there, and has the apiserver accept its ID tokens.
	oidcRedirectURI string
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if len(os.Args) < 2 || !slices.Contains([]string{"up", "load", "lb", "s3", "oidc", "volumes", "down"}, os.Args[1]) {
		fmt.Fprintf(os.Stderr, "usage: local up|load|lb|s3|oidc|volumes|down [flags]; local up --help lists the flags\n")
		os.Exit(2)
	}
	cmd := os.Args[1]
	var cfg config
	var images stringList
	fs := flag.NewFlagSet("local "+cmd, flag.ExitOnError)
	fs.StringVar(&cfg.stateDir, "state-dir", "/var/lib/kubenest-local", "Persistent state of the cluster.")
	fs.StringVar(&cfg.runDir, "run-dir", "/run/kubenest-local", "Sockets and runtime state of the cluster.")
	fs.StringVar(&cfg.outDir, "output", "_output", "Where the host kubeconfig (host.kubeconfig) and the logs (local/logs) go.")
	fs.StringVar(&cfg.kubeBin, "kube-bin", "", "Directory of kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl.")
	fs.StringVar(&cfg.etcdBin, "nest-etcd", "", "nest-etcd binary: it runs the host's etcd.")
	fs.StringVar(&cfg.agentBin, "node-agent", "", "node-agent binary; it runs each node's kubelet.")
	fs.StringVar(&cfg.certManager, "cert-manager", "", "Test-only cert-manager program (test/e2e/certmanager) to run against the cluster; empty runs none.")
	fs.StringVar(&cfg.certManagerCRDs, "cert-manager-crds", "", "Directory of cert-manager's CRDs, for --cert-manager.")
	var lendable stringList
	fs.Var(&lendable, "lendable", "Node labelled kubenest.io/lendable=true, which tenants may borrow. Repeatable; default the last node when there are two or more.")
	fs.Var(&images, "image", "Image tarball to import into every node. Repeatable.")
	fs.StringVar(&cfg.kubeProxyImage, "kube-proxy-image", "", "The KubeNest image (one of --image), whose nest-controlplane runs kube-proxy on every node.")
	fs.StringVar(&cfg.addons, "addons", "test/e2e/local/addons", "Directory of add-on manifests (CoreDNS, the default StorageClass) applied once the nodes are Ready.")
	fs.IntVar(&cfg.nodes, "nodes", 2, "Number of worker nodes (1 to 9).")
	fs.StringVar(&cfg.oidcRedirectURI, "oidc-redirect-uri", "", "Run the test-only OpenID Connect provider (\"local oidc\") with a client for the portal redirecting here, and have the apiserver accept its ID tokens; empty runs none.")
	_ = fs.Parse(os.Args[2:])
	cfg.images = images
	cfg.lendable = lendable
	if len(cfg.lendable) == 0 && cfg.nodes > 1 {
		cfg.lendable = []string{nodesOf(cfg.nodes)[cfg.nodes-1].name}
	}
	if cfg.nodes < 1 || cfg.nodes > 9 {
		fatalf("--nodes %d: must be 1 to 9", cfg.nodes)
	}
	abs, err := filepath.Abs(cfg.outDir)
	if err != nil {
		fatalf("--output: %v", err)
	}
	cfg.outDir = abs

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	switch cmd {
	case "up":
		if cfg.kubeBin == "" || cfg.etcdBin == "" || cfg.agentBin == "" || cfg.kubeProxyImage == "" {
			fatalf("--kube-bin, --nest-etcd, --node-agent and --kube-proxy-image are required")
		}
		err = up(ctx, cfg)
	case "load":
		err = load(ctx, cfg)
	case "lb":
		err = runLoadBalancer(ctx, cfg)
	case "s3":
		err = runS3(ctx, cfg)
	case "oidc":
		err = runOIDC(ctx, cfg)
	case "volumes":
		err = runVolumes(ctx, cfg)
	case "down":
		err = down(cfg)
	}
	if err != nil {
		fatalf("%s failed after %s: %v", cmd, time.Since(start).Round(100*time.Millisecond), err)
	}
	logf("%s done in %s", cmd, time.Since(start).Round(100*time.Millisecond))
}

func logf(format string, args ...any) {
	fmt.Printf("[local] "+format+"\n", args...)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[local] "+format+"\n", args...)
	os.Exit(1)
}
