package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// up brings the cluster up, one logged step after another.
func up(ctx context.Context, c config) error {
	nodes := nodesOf(c.nodes)
	steps := []struct {
		name string
		do   func() error
	}{
		{"check this machine", c.checkMachine},
		{"issue the host cluster's certificates", func() error { return c.hostPKI(nodes) }},
		{"start the OpenID Connect provider (" + oidcIssuer() + ", test-only)", c.startOIDCIfAsked},
		{"create the node network (bridge " + bridgeName + ", a network namespace per node)", func() error { return c.network(nodes) }},
		{"start etcd and kube-apiserver", func() error { return c.startAPIServer(ctx) }},
		{"start kube-controller-manager and kube-scheduler", c.startControllers},
		{"start each node's containerd and import the images", func() error { return c.startRuntimes(ctx, nodes) }},
		{"start each node's node agent and kubelet", func() error { return c.startKubelets(nodes) }},
		{"wait for the nodes to be Ready", func() error { return c.waitNodes(ctx, len(nodes)) }},
		{"record each node's pod subnet in its Node", func() error { return c.recordPodCIDRs(ctx, nodes) }},
		// Before anything that uses a Service.
		{"run kube-proxy on every node (a DaemonSet)", func() error { return c.installKubeProxy(ctx, len(nodes)) }},
		{"start the volume provisioner of the default StorageClass (" + volumesProvisioner + ")", c.startVolumes},
		{"install the add-ons (CoreDNS, the default StorageClass)", func() error { return c.installAddons(ctx) }},
		{"start the load balancer of LoadBalancer Services (" + lbPoolFirst + "-" + lbPoolLast + ")", c.startLoadBalancer},
		{"start the S3-compatible server (http://" + bridgeIP + ":" + s3Port + ", test-only)", c.startS3},
	}
	if c.certManager != "" {
		steps = append(steps, struct {
			name string
			do   func() error
		}{"start cert-manager's controllers (test-only)", func() error { return c.startCertManager(ctx) }})
	}
	for i, s := range steps {
		start := time.Now()
		logf("step %d/%d: %s", i+1, len(steps), s.name)
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w (logs in %s; 'make down' cleans up)", s.name, err, c.logDir())
		}
		logf("        %s", time.Since(start).Round(10*time.Millisecond))
	}
	logf("host cluster up: %d nodes; kubeconfig %s", len(nodes), c.hostKubeconfig())
	return nil
}

// startCertManager runs cert-manager's controllers as a process of this machine and waits
// until its kinds are served.
func (c config) startCertManager(ctx context.Context) error {
	args := []string{"--kubeconfig", c.hostKubeconfig()}
	if c.certManagerCRDs != "" {
		args = append(args, "--crds", c.certManagerCRDs)
	}
	if err := c.startSupervised("cert-manager", "", c.certManager, args...); err != nil {
		return err
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := client.Discovery().ServerResourcesForGroupVersion("cert-manager.io/v1")
		return err == nil, nil
	})
}

// load imports rebuilt images into the nodes of the running cluster, for "make redeploy".
func load(ctx context.Context, c config) error {
	nodes, err := c.existingNodes()
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return fmt.Errorf("no local cluster is up: run 'make up' first")
	}
	if err := c.importImages(ctx, nodes); err != nil {
		return err
	}
	logf("imported %d image(s) into %d node(s)", len(c.images), len(nodes))
	return nil
}

func (c config) checkMachine() error {
	if os.Geteuid() != 0 {
		return errors.New("must run as root: it creates network namespaces, mounts and cgroups")
	}
	if _, err := os.Stat(c.pidDir()); err == nil {
		return fmt.Errorf("a local cluster is already up (%s exists); run 'make down' first", c.pidDir())
	}
	for _, bin := range []string{"containerd", "runc", "ctr", "nsenter", "ip", "iptables", "conntrack"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: install containerd runc containernetworking-plugins iptables conntrack", bin)
		}
	}
	for _, f := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/usr/lib/cni/portmap",
		c.kubeBinary("kube-apiserver"), c.kubeBinary("kube-controller-manager"), c.kubeBinary("kube-scheduler"),
		c.kubeBinary("kubelet"), c.kubeBinary("kubectl"), c.etcdBin, c.agentBin} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("missing %s", f)
		}
	}
	for _, img := range c.images {
		if _, err := os.Stat(img); err != nil {
			return fmt.Errorf("image tarball %s: %w", img, err)
		}
	}
	for _, port := range []int{apiPort, 2379, 2380, 10257, 10259} {
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			return fmt.Errorf("port %d is in use on this machine", port)
		}
		l.Close()
	}
	return nil
}

// network creates the bridge the nodes hang off, and per node a network namespace with its
// address and routes: every node reaches every pod subnet through the node that owns it, and
// so does this machine (where the apiserver runs).
func (c config) network(nodes []node) error {
	cmds := [][]string{
		{"ip", "link", "add", bridgeName, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", bridgeIP, bridgePrefix), "dev", bridgeName},
		{"ip", "link", "set", bridgeName, "up"},
	}
	for _, n := range nodes {
		ns := []string{"ip", "-n", n.name}
		cmds = append(cmds,
			[]string{"ip", "netns", "add", n.name},
			[]string{"ip", "link", "add", n.name, "type", "veth", "peer", "name", "eth0", "netns", n.name},
			[]string{"ip", "link", "set", n.name, "master", bridgeName, "up"},
			append(ns, "link", "set", "lo", "up"),
			append(ns, "addr", "add", fmt.Sprintf("%s/%d", n.ip, bridgePrefix), "dev", "eth0"),
			append(ns, "link", "set", "eth0", "up"),
			append(ns, "route", "add", "default", "via", bridgeIP),
			[]string{"ip", "netns", "exec", n.name, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
			[]string{"ip", "route", "add", n.podCIDR, "via", n.ip},
		)
		for _, other := range nodes {
			if other.name != n.name {
				cmds = append(cmds, append(ns, "route", "add", other.podCIDR, "via", other.ip))
			}
		}
	}
	for _, cmd := range cmds {
		if err := run(cmd[0], cmd[1:]...); err != nil {
			return err
		}
	}
	return nil
}

func (c config) startAPIServer(ctx context.Context) error {
	pki := func(f string) string { return filepath.Join(c.pkiDir(), f) }
	if err := c.startProcess("etcd", "", c.etcdBin,
		"--name=local", "--data-dir="+filepath.Join(c.stateDir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=local=http://127.0.0.1:2380", "--log-level=warn"); err != nil {
		return err
	}
	var authn []string
	if c.oidcRedirectURI != "" {
		authn = append(authn, "--authentication-config="+pki("oidc-authn.yaml"))
	}
	if err := c.startProcess("kube-apiserver", "", c.kubeBinary("kube-apiserver"), append(authn,
		// On the bridge only: the load balancer listens on other addresses of it, port 6443 too.
		"--advertise-address="+bridgeIP, "--bind-address="+bridgeIP, fmt.Sprintf("--secure-port=%d", apiPort),
		"--etcd-servers=http://127.0.0.1:2379",
		"--service-cluster-ip-range="+serviceCIDR,
		"--client-ca-file="+pki("ca.crt"),
		"--tls-cert-file="+pki("apiserver.crt"), "--tls-private-key-file="+pki("apiserver.key"),
		"--kubelet-client-certificate="+pki("apiserver-kubelet-client.crt"),
		"--kubelet-client-key="+pki("apiserver-kubelet-client.key"),
		// Node names resolve nowhere on this machine; their addresses do.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--service-account-issuer=https://kubernetes.default.svc."+clusterDomain,
		"--service-account-key-file="+pki("sa.pub"), "--service-account-signing-key-file="+pki("sa.key"),
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false")...); err != nil {
		return err
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

func (c config) startControllers() error {
	pki := func(f string) string { return filepath.Join(c.pkiDir(), f) }
	kcm := pki("controller-manager.kubeconfig")
	if err := c.startProcess("kube-controller-manager", "", c.kubeBinary("kube-controller-manager"),
		"--kubeconfig="+kcm, "--authentication-kubeconfig="+kcm, "--authorization-kubeconfig="+kcm,
		"--bind-address=127.0.0.1", "--leader-elect=false",
		"--cluster-signing-cert-file="+pki("ca.crt"), "--cluster-signing-key-file="+pki("ca.key"),
		"--root-ca-file="+pki("ca.crt"), "--service-account-private-key-file="+pki("sa.key"),
		"--use-service-account-credentials=true", "--controllers=*,bootstrapsigner,tokencleaner",
		"--profiling=false"); err != nil {
		return err
	}
	sched := pki("scheduler.kubeconfig")
	return c.startProcess("kube-scheduler", "", c.kubeBinary("kube-scheduler"),
		"--kubeconfig="+sched, "--authentication-kubeconfig="+sched, "--authorization-kubeconfig="+sched,
		"--bind-address=127.0.0.1", "--leader-elect=false", "--profiling=false")
}

// startRuntimes starts a containerd per node, inside the node's network namespace, with its
// own root, state, socket and CNI configuration, and imports the images into it.
func (c config) startRuntimes(ctx context.Context, nodes []node) error {
	for _, n := range nodes {
		dir, rundir := c.nodeDir(n), c.nodeRunDir(n)
		cniDir := filepath.Join(dir, "cni", "net.d")
		for _, d := range []string{cniDir, rundir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		cni, err := json.MarshalIndent(map[string]any{
			"cniVersion": "1.0.0",
			"name":       n.name,
			"plugins": []any{
				map[string]any{
					"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
					"ipam": map[string]any{
						"type":    "host-local",
						"dataDir": filepath.Join(dir, "cni", "ipam"),
						"ranges":  [][]map[string]string{{{"subnet": n.podCIDR, "gateway": n.gateway}}},
						"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					},
				},
				map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
			},
		}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cniDir, "10-kubenest.conflist"), cni, 0o644); err != nil {
			return err
		}
		// restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, and without it every
		// sandbox fails with "can't get final child's PID from pipe: EOF".
		toml := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[7]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[8]q
`, filepath.Join(dir, "containerd"), filepath.Join(rundir, "containerd"), c.containerdSocket(n),
			c.containerdSocket(n)+".ttrpc", filepath.Join(dir, "opt"), PauseImage,
			filepath.Join(rundir, "runc"), cniDir)
		cfgPath := filepath.Join(dir, "containerd.toml")
		if err := os.WriteFile(cfgPath, []byte(toml), 0o644); err != nil {
			return err
		}
		if err := c.startProcess(n.name+"-containerd", n.name, "/usr/bin/containerd", "--config", cfgPath); err != nil {
			return err
		}
	}
	return c.importImages(ctx, nodes)
}

// importImages waits for each node's containerd and imports the images into it.
func (c config) importImages(ctx context.Context, nodes []node) error {
	for _, n := range nodes {
		sock := c.containerdSocket(n)
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return exec.Command("ctr", "--address", sock, "version").Run() == nil, nil
		})
		if err != nil {
			return fmt.Errorf("containerd of %s did not answer on %s", n.name, sock)
		}
		for _, img := range c.images {
			if err := run("ctr", "--address", sock, "-n", "k8s.io", "images", "import", img); err != nil {
				return fmt.Errorf("importing %s into %s: %w", img, n.name, err)
			}
		}
	}
	return nil
}

// startKubelets starts each node's node agent, which runs its kubelet (with its own cgroup
// root, log directory and root directory). kube-proxy is a DaemonSet (installKubeProxy).
func (c config) startKubelets(nodes []node) error {
	pki := func(f string) string { return filepath.Join(c.pkiDir(), f) }
	for _, n := range nodes {
		if err := c.nodeCgroups(n); err != nil {
			return err
		}
		dir := c.nodeDir(n)
		kubeletCfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: /%s
failCgroupV1: false
failSwapOn: false
clusterDNS: [%s]
clusterDomain: %s
containerRuntimeEndpoint: unix://%s
podLogsDir: %q
readOnlyPort: 0
maxPods: 250
# Mounted Secrets follow their objects within a sync: the rotation e2e runs 2-minute
# certificates, renewed 40 s before they expire (the default, 1m, is for year-long ones).
syncFrequency: 15s
serializeImagePulls: false
# Images are imported, never pulled: garbage-collecting one would lose it.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
`, pki("ca.crt"), n.name, dnsServiceIP, clusterDomain, c.containerdSocket(n), filepath.Join(dir, "pod-logs"))
		cfgPath := filepath.Join(dir, "kubelet.yaml")
		if err := os.WriteFile(cfgPath, []byte(kubeletCfg), 0o644); err != nil {
			return err
		}
		// The node agent runs the kubelet (its child, in the host until the node is lent) and
		// is itself restarted when it exits, as systemd would.
		kubeletArgs := []string{"--root-dir=" + filepath.Join(dir, "kubelet"), "--hostname-override=" + n.name, "--node-ip=" + n.ip}
		if slices.Contains(c.lendable, n.name) {
			kubeletArgs = append(kubeletArgs, "--node-labels="+lendableLabel+"=true")
		}
		agentArgs := []string{
			"--node-name=" + n.name, "--kubeconfig=" + pki("kubelet-"+n.name+".kubeconfig"),
			"--namespace=kubenest-system", "--state-dir=" + filepath.Join(dir, "agent"),
			"--kubelet-mode=process", "--kubelet-binary=" + c.kubeBinary("kubelet"),
			"--kubelet-log=" + filepath.Join(c.logDir(), n.name+"-kubelet.log"),
			"--kubelet-config=" + cfgPath, "--kubelet-root-dir=" + filepath.Join(dir, "kubelet"),
			"--container-runtime-endpoint=unix://" + c.containerdSocket(n),
		}
		for _, a := range kubeletArgs {
			agentArgs = append(agentArgs, "--kubelet-arg="+a)
		}
		if err := c.startSupervised(n.name+"-node-agent", n.name, c.agentBin, agentArgs...); err != nil {
			return err
		}
	}
	return nil
}

// nodeCgroups creates /<node> in every cgroup v1 hierarchy, the kubelet's cgroupRoot, so each
// node's pods live under their own node's cgroup.
func (c config) nodeCgroups(n node) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, n.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// cgroupHierarchies are the mounted cgroup v1 hierarchies.
func cgroupHierarchies() ([]string, error) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) >= 3 && f[2] == "cgroup" && strings.HasPrefix(f[1], "/sys/fs/cgroup/") {
			out = append(out, f[1])
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup v1 hierarchies under /sys/fs/cgroup")
	}
	return out, nil
}

func (c config) waitNodes(ctx context.Context, want int) error {
	client, err := c.client()
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		last = fmt.Sprintf("%d/%d nodes registered, %d Ready", len(nodes.Items), want, ready)
		return ready == want, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", last, err)
	}
	return nil
}

// recordPodCIDRs writes each node's pod subnet into its Node's spec.podCIDR(s), as a cluster's
// IPAM does (the controller-manager's, with --allocate-node-cidrs): the subnets here are each
// node's own CNI configuration, so they are recorded, not allocated. KubeNest reads them to
// know which addresses are the pods of a node lent to a tenant.
func (c config) recordPodCIDRs(ctx context.Context, nodes []node) error {
	client, err := c.client()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		patch := fmt.Sprintf(`{"spec":{"podCIDR":%q,"podCIDRs":[%q]}}`, n.podCIDR, n.podCIDR)
		if _, err := client.CoreV1().Nodes().Patch(ctx, n.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("node %s: %w", n.name, err)
		}
	}
	return nil
}

// installAddons applies the add-on manifests and waits for their Deployments.
func (c config) installAddons(ctx context.Context) error {
	kubectl := func(args ...string) error {
		return run(c.kubeBinary("kubectl"), append([]string{"--kubeconfig", c.hostKubeconfig()}, args...)...)
	}
	if err := kubectl("apply", "--server-side", "-f", c.addons); err != nil {
		return err
	}
	return kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m")
}

func (c config) client() (*kubernetes.Clientset, error) { return c.hostClient(5 * time.Second) }

// hostClient reaches the host cluster as its admin; timeout bounds each request (0: none, for
// the watches of the processes "up" runs).
func (c config) hostClient(timeout time.Duration) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.hostKubeconfig())
	if err != nil {
		return nil, err
	}
	cfg.Timeout = timeout
	return kubernetes.NewForConfig(cfg)
}
