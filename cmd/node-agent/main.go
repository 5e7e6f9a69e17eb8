// Command node-agent runs on every host node that may be lent to a tenant. It moves the
// node's kubelet between the host and a tenant as the node's PoolNode says, one recorded step
// at a time, and reports each step in the PoolNode. It acts as the node itself (the kubelet's
// own host credentials), only pulls from the host's API, and listens on nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/nodepool/agent"
	"github.com/kubenest-io/kubenest/pkg/version"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == "install" {
		err = runInstall(os.Args[2:])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: %v\n", err)
		os.Exit(1)
	}
}

// agentFlags are the agent's settings.
type agentFlags struct {
	nodeName, kubeconfig, namespace, stateDir, mode       string
	kubeletBinary, kubeletLog, kubeletUnit, kubeletDropIn string
	kubeletConfig, kubeletKubeconfig, kubeletRoot, cri    string
	kubeletArgs                                           stringList
	interval                                              time.Duration
	showVersion                                           bool
}

func defineAgentFlags(fs *flag.FlagSet, f *agentFlags) {
	hostname, _ := os.Hostname()
	fs.StringVar(&f.nodeName, "node-name", hostname, "Name of this node (and of its PoolNode).")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "/etc/kubernetes/kubelet.conf", "Kubeconfig the agent reaches the host with: the kubelet's own host credentials.")
	fs.StringVar(&f.namespace, "namespace", "kubenest-system", "Namespace of the KubeNest operator, which holds the node's join Secret.")
	fs.StringVar(&f.stateDir, "state-dir", "/var/lib/kubenest/node-agent", "Where the agent records its state and keeps the kubelet's tenant files.")
	fs.StringVar(&f.mode, "kubelet-mode", "systemd", "How the kubelet runs: systemd (a unit, as kubeadm installs it) or process (a child of the agent).")
	fs.StringVar(&f.kubeletUnit, "kubelet-unit", "kubelet.service", "systemd mode: the kubelet's unit.")
	fs.StringVar(&f.kubeletDropIn, "kubelet-drop-in", "/etc/systemd/system/kubelet.service.d/90-kubenest.conf", "systemd mode: the drop-in the agent writes while the node is lent.")
	fs.StringVar(&f.kubeletBinary, "kubelet-binary", "/usr/bin/kubelet", "process mode: the kubelet binary.")
	fs.Var(&f.kubeletArgs, "kubelet-arg", "process mode: a flag the kubelet always gets (root directory, node name, address). Repeatable.")
	fs.StringVar(&f.kubeletLog, "kubelet-log", "/var/log/kubelet.log", "process mode: where the kubelet's output goes.")
	fs.StringVar(&f.kubeletConfig, "kubelet-config", "/var/lib/kubelet/config.yaml", "The kubelet's configuration file for the host; the tenant's is derived from it. The pods' logs in its podLogsDir (and their links in /var/log/containers) are removed between clusters.")
	fs.StringVar(&f.kubeletKubeconfig, "kubelet-kubeconfig", "", "process mode: the kubelet's host kubeconfig; defaults to --kubeconfig.")
	fs.StringVar(&f.kubeletRoot, "kubelet-root-dir", "/var/lib/kubelet", "The kubelet's root directory, whose pod state is wiped between clusters.")
	fs.StringVar(&f.cri, "container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "The container runtime's CRI endpoint, to remove pods between clusters.")
	fs.DurationVar(&f.interval, "interval", 20*time.Second, "How often the agent reads its PoolNode without being told of a change (it watches it), keeping the kubelet running and its heartbeat fresh.")
	fs.BoolVar(&f.showVersion, "version", false, "Print the version and exit.")
}

func run() error {
	fs := flag.CommandLine
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `node-agent moves this node's kubelet between the host cluster and a KubeNest tenant.

It watches the node's PoolNode in the host (as the node, with --kubeconfig) and, when the
operator lends the node to a tenant, stops the kubelet, removes the host's pods from the node,
configures the kubelet to join the tenant with a bootstrap token, and starts it; when the
node is given back it does the reverse. Every step is recorded in --state-dir first, so the
agent resumes where it stopped after a crash.

'node-agent install' puts the agent on a systemd host as a service (see 'node-agent install
--help'); the chart's installer DaemonSet runs it on lendable nodes.

Flags:
`)
		fs.PrintDefaults()
	}
	f := &agentFlags{}
	defineAgentFlags(fs, f)
	klog.InitFlags(fs)
	flag.Parse()
	if f.showVersion {
		fmt.Println(version.String())
		return nil
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))
	}
	if f.nodeName == "" {
		return fmt.Errorf("--node-name is required")
	}

	var kubelet agent.Kubelet
	var hostArgs []string
	switch f.mode {
	case "systemd":
		kubelet = &agent.SystemdKubelet{Unit: f.kubeletUnit, DropIn: f.kubeletDropIn}
	case "process":
		if f.kubeletKubeconfig == "" {
			f.kubeletKubeconfig = f.kubeconfig
		}
		kubelet = &agent.ProcessKubelet{Binary: f.kubeletBinary, BaseArgs: f.kubeletArgs, LogPath: f.kubeletLog}
		hostArgs = []string{"--config=" + f.kubeletConfig, "--kubeconfig=" + f.kubeletKubeconfig}
	default:
		return fmt.Errorf("--kubelet-mode %q: must be systemd or process", f.mode)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.Timeout = 10 * time.Second
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	host, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := agent.New(agent.Config{
		NodeName:        f.nodeName,
		Namespace:       f.namespace,
		StateFile:       filepath.Join(f.stateDir, "state.json"),
		TenantDir:       filepath.Join(f.stateDir, "tenant"),
		Kubelet:         kubelet,
		HostArgs:        hostArgs,
		KubeletConfig:   f.kubeletConfig,
		RuntimeEndpoint: f.cri,
		KubeletRoot:     f.kubeletRoot,
		Interval:        f.interval,
		Changed:         agent.WatchPoolNode(ctx, host, f.nodeName),
		Version:         version.Version,
	}, host)
	err = a.Run(ctx)
	if f.mode == "process" {
		// The kubelet is the agent's child and goes with it; a systemd kubelet stays.
		_ = kubelet.Stop(context.Background())
	}
	return err
}
