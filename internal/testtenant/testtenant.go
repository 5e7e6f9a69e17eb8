// Package testtenant runs a tenant's control plane as local processes of nest-etcd and
// nest-controlplane, from the Secrets and flags the operator generates, for tests that need a
// real tenant without a real host cluster. Only what makes sense solely inside a pod is
// changed: mount paths become directories, pod and Service DNS names become loopback ports.
package testtenant

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
)

// Tenant is a running tenant control plane.
type Tenant struct {
	// APIServerAddress is where the tenant's apiserver listens, 127.0.0.1:port.
	APIServerAddress string
	// EtcdPort is where etcd serves its clients on 127.0.0.1.
	EtcdPort int
	// Started is when the processes were started.
	Started time.Time
	// Processes are etcd, apiserver and controllers (controller-manager and scheduler), in
	// that order.
	Processes []*Process
}

// VirtualCluster is a tenant in namespace "tenants" with one etcd member on an emptyDir: what
// the standalone runs use.
func VirtualCluster(name string, uid types.UID) *v1alpha1.VirtualCluster {
	return &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenants", UID: uid},
		Spec: v1alpha1.VirtualClusterSpec{
			Etcd: v1alpha1.EtcdSpec{Replicas: 1, Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
		},
	}
}

// RunStandalone issues vc's certificates as the operator does, with the default settings, and
// runs its control plane from them (see Run). It returns the tenant and the client config of
// the admin kubeconfig the operator would write, for where the apiserver listens on this
// machine.
func RunStandalone(t *testing.T, bin Programs, vc *v1alpha1.VirtualCluster) (*Tenant, *rest.Config) {
	t.Helper()
	now := time.Now()
	settings := controlplane.DefaultSettings()
	auth, err := controlplane.NewAuthorities(vc.Name, now)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := controlplane.LeafSpecs(vc, settings, controlplane.Exposure{})
	if err != nil {
		t.Fatal(err)
	}
	leaves, _, err := controlplane.EnsureLeaves(auth, specs, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	etcdSecret, err := controlplane.EtcdCertsSecret(vc, auth, leaves)
	if err != nil {
		t.Fatal(err)
	}
	cpSecret, err := controlplane.ControlPlaneCertsSecret(vc, auth, leaves)
	if err != nil {
		t.Fatal(err)
	}
	signerSecret, err := controlplane.KubeletSignerSecret(vc, auth)
	if err != nil {
		t.Fatal(err)
	}
	tenant := Run(t, bin, vc, settings, etcdSecret, cpSecret, signerSecret)
	kc, err := controlplane.KubeconfigSecret(vc, auth, leaves, "https://"+tenant.APIServerAddress)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc.Data[controlplane.KeyKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	return tenant, cfg
}

// Run starts etcd, kube-apiserver, and kube-controller-manager and kube-scheduler (one
// process, as in the pod) for vc from the
// etcd, control-plane certificate and kubelet signer Secrets, with the flags the operator's builders give the
// pods. They stop when the test ends.
func Run(t *testing.T, bin Programs, vc *v1alpha1.VirtualCluster, settings controlplane.Settings, etcdSecret, cpSecret, signerSecret *corev1.Secret) *Tenant {
	t.Helper()
	etcdDir, cpDir, signerDir := writeSecret(t, etcdSecret), writeSecret(t, cpSecret), writeSecret(t, signerSecret)
	apiPort, etcdPort, peerPort := FreePort(t), FreePort(t), FreePort(t)
	member := vc.Name + "-etcd-0"
	sts := controlplane.EtcdStatefulSet(vc, settings, "")
	etcdArgs := override(sts.Spec.Template.Spec.Containers[0].Args, controlplane.EtcdPKIDir, etcdDir, map[string]string{
		"name":                        member,
		"data-dir":                    t.TempDir(),
		"listen-client-urls":          fmt.Sprintf("https://127.0.0.1:%d", etcdPort),
		"advertise-client-urls":       fmt.Sprintf("https://127.0.0.1:%d", etcdPort),
		"listen-peer-urls":            fmt.Sprintf("https://127.0.0.1:%d", peerPort),
		"initial-advertise-peer-urls": fmt.Sprintf("https://127.0.0.1:%d", peerPort),
		"initial-cluster":             fmt.Sprintf("%s=https://127.0.0.1:%d", member, peerPort),
		"listen-metrics-urls":         fmt.Sprintf("http://127.0.0.1:%d", FreePort(t)),
		"listen-client-http-urls":     fmt.Sprintf("https://127.0.0.1:%d", FreePort(t)),
	})
	deploy, err := controlplane.ControlPlaneDeployment(vc, settings, "")
	if err != nil {
		t.Fatal(err)
	}
	containers := map[string][]string{}
	for _, c := range deploy.Spec.Template.Spec.Containers {
		containers[c.Name] = c.Args
	}
	apiArgs := override(containers[controlplane.ContainerAPIServer], controlplane.PKIDir, cpDir, map[string]string{
		"advertise-address":        cmp.Or(HostIP(), "10.255.255.254"),
		"bind-address":             "127.0.0.1",
		"secure-port":              strconv.Itoa(apiPort),
		"etcd-servers":             fmt.Sprintf("https://127.0.0.1:%d", etcdPort),
		"cert-dir":                 t.TempDir(),
		"endpoint-reconciler-type": "none",
	})
	// The pod's kubeconfigs point at 127.0.0.1:6443; here the apiserver listens elsewhere.
	for _, f := range []string{controlplane.KeyControllerManagerKubeconfig, controlplane.KeySchedulerKubeconfig} {
		retarget(t, filepath.Join(cpDir, f), fmt.Sprintf("https://127.0.0.1:%d", apiPort))
	}
	// The controllers container runs both: the controller-manager's flags, "--", the scheduler's.
	ctrl := containers[controlplane.ContainerControllers]
	kcm, sched, ok := controlplane.SplitControllersArgs(ctrl)
	if !ok {
		t.Fatalf("controllers arguments %q do not have one \"--\"", ctrl)
	}
	kcmArgs := override(kcm, controlplane.PKIDir, cpDir, map[string]string{
		"bind-address": "127.0.0.1", "secure-port": strconv.Itoa(FreePort(t)),
	})
	kcmArgs = override(kcmArgs, controlplane.KubeletSignerDir, signerDir, nil)
	schedArgs := override(sched, controlplane.PKIDir, cpDir, map[string]string{
		"bind-address": "127.0.0.1", "secure-port": strconv.Itoa(FreePort(t)),
	})
	tn := &Tenant{APIServerAddress: fmt.Sprintf("127.0.0.1:%d", apiPort), EtcdPort: etcdPort, Started: time.Now()}
	tn.Processes = []*Process{
		startProcess(t, "etcd", bin.Etcd, etcdArgs),
		startProcess(t, "apiserver", bin.ControlPlane, append([]string{"apiserver"}, apiArgs...)),
		startProcess(t, "controllers", bin.ControlPlane, slices.Concat([]string{"controllers"}, kcmArgs, []string{"--"}, schedArgs)),
	}
	return tn
}

// WaitReady waits until the apiserver answers /readyz to cfg, failing the test early when a
// process exits.
func (tn *Tenant) WaitReady(ctx context.Context, cfg *rest.Config) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range tn.Processes {
			if p.Exited() {
				return false, fmt.Errorf("%s exited:\n%s", p.Name, p.Tail())
			}
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
}

// Programs are the binaries a tenant's control plane runs.
type Programs struct {
	ControlPlane string // nest-controlplane: apiserver, controllers
	Etcd         string // nest-etcd
}

// Binaries are the programs under test: $NEST_CONTROLPLANE and $NEST_ETCD, or those built now.
func Binaries(t *testing.T) Programs {
	t.Helper()
	return Programs{ControlPlane: binary(t, "NEST_CONTROLPLANE", "nest-controlplane"), Etcd: binary(t, "NEST_ETCD", "nest-etcd")}
}

func binary(t *testing.T, env, cmd string) string {
	if bin := os.Getenv(env); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), cmd)
	build := exec.Command("go", "build", "-o", bin, "github.com/kubenest-io/kubenest/cmd/"+cmd)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", cmd, err, out)
	}
	return bin
}

// override replaces flag values and mount paths in the operator's arguments.
func override(args []string, mountDir, dir string, values map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if v, ok := values[name]; ok {
			out = append(out, "--"+name+"="+v)
			continue
		}
		out = append(out, strings.ReplaceAll(a, mountDir, dir))
	}
	return out
}

func writeSecret(t *testing.T, s *corev1.Secret) string {
	dir := t.TempDir()
	for k, v := range s.Data {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func retarget(t *testing.T, path, server string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kubeconfig.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	kc.Server = server
	out, err := kubeconfig.Build(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// FreePort is a TCP port of 127.0.0.1 that nothing listened on a moment ago.
func FreePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// HostIP is a global unicast IPv4 address of this machine (not loopback, not link-local,
// which the apiserver refuses to advertise and EndpointSlices refuse to hold), "" when it has
// none.
func HostIP() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

// Process is one running component.
type Process struct {
	Name string
	cmd  *exec.Cmd
	log  *syncWriter
	done chan struct{}
}

func startProcess(t *testing.T, name, bin string, args []string) *Process {
	p := &Process{Name: name, log: &syncWriter{b: &bytes.Buffer{}}}
	p.start(t, exec.Command(bin, args...))
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", name, p.Tail())
		}
	})
	return p
}

func (p *Process) start(t *testing.T, cmd *exec.Cmd) {
	p.cmd, p.done = cmd, make(chan struct{})
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.Name, err)
	}
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(p.done)
}

// stop interrupts the process and waits for it to end, killing it after 15 s; it returns the
// process's exit code (-1: killed).
func (p *Process) stop() int {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return p.cmd.ProcessState.ExitCode()
}

// Restart stops the tenant's processes, the last started first, and starts them again with
// the same arguments on the data they left, as a wake from sleep does with the tenant's pods.
// Each process's log goes on in the same buffer. A process that does not end with exit code 0
// when interrupted fails the test (a pod whose container does so ends Failed).
func (tn *Tenant) Restart(t *testing.T) {
	t.Helper()
	for _, p := range slices.Backward(tn.Processes) {
		if code := p.stop(); code != 0 {
			t.Errorf("%s ended with exit code %d when interrupted, want 0:\n%s", p.Name, code, p.Tail())
		}
	}
	tn.Started = time.Now()
	for _, p := range tn.Processes {
		p.start(t, exec.Command(p.cmd.Path, p.cmd.Args[1:]...))
	}
}

// Exited says whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Tail is the end of the process's log.
func (p *Process) Tail() string {
	p.log.mu.Lock()
	lines := strings.Split(p.log.b.String(), "\n")
	p.log.mu.Unlock()
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

// Pid is the process's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// RSSKiB is the process's resident memory.
func (p *Process) RSSKiB() int64 {
	st, _ := p.MemoryKiB()
	return st["VmRSS"]
}

// MemoryKiB reads the memory lines of the process's /proc/<pid>/status (VmRSS, RssAnon, ...),
// in KiB.
func (p *Process) MemoryKiB() (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.Pid()))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		out[k] = n
	}
	return out, s.Err()
}

// ConnectionsTo counts the established TCP connections the process holds to port on this
// machine: its socket descriptors (/proc/<pid>/fd) matched against the kernel's TCP tables.
func (p *Process) ConnectionsTo(port int) (int, error) {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", p.Pid()))
	if err != nil {
		return 0, err
	}
	sockets := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.Pid(), fd.Name()))
		if inode, ok := strings.CutPrefix(target, "socket:["); err == nil && ok {
			sockets[strings.TrimSuffix(inode, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p.Pid(), table))
		if err != nil {
			return 0, err
		}
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, remotePort, _ := strings.Cut(f[2], ":")
			if rp, err := strconv.ParseInt(remotePort, 16, 32); err == nil && int(rp) == port && sockets[f[9]] {
				n++
			}
		}
	}
	return n, nil
}

// syncWriter lets a process write its log while the test reads it.
type syncWriter struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
