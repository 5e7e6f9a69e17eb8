package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	criclient "k8s.io/cri-client/pkg"

	"github.com/kubenest-io/kubenest/pkg/nodepool/agent"
)

// down stops what up started and removes what it created. It works on a half-built cluster
// too, and on one already down.
func down(c config) error {
	nodes, err := c.existingNodes()
	if err != nil {
		return err
	}
	isNode := func(name string) bool { return strings.HasPrefix(name, nodePrefix) }
	var errs []error
	// The load balancer first, so that it relays nothing while the nodes go (its addresses go
	// with the bridge).
	errs = append(errs, c.stopRecorded(func(name string) bool { return name == lbProcess }))
	// Node agents (and the kubelets they run) next, so nothing restarts the pods removed next.
	errs = append(errs, c.stopRecorded(func(name string) bool { return isNode(name) && strings.HasSuffix(name, "-node-agent") }))
	for _, n := range nodes {
		errs = append(errs, c.removePods(n))
	}
	errs = append(errs, c.stopRecorded(isNode))
	for _, n := range nodes {
		errs = append(errs, c.killShims(n))
		killCgroupProcs(n.name)
	}
	// The control plane last, each component before what it depends on.
	for _, names := range [][]string{{"kube-scheduler", "kube-controller-manager"}, {"kube-apiserver"}, {"etcd"}} {
		errs = append(errs, c.stopRecorded(func(name string) bool { return slices.Contains(names, name) }))
	}
	errs = append(errs, c.stopRecorded(func(string) bool { return true }))
	errs = append(errs, c.unmountAll())
	for _, n := range nodes {
		if netnsExists(n.name) {
			errs = append(errs, run("ip", "netns", "delete", n.name))
		}
		errs = append(errs, removeCgroups(n.name))
		errs = append(errs, removePodNetworks(cniResultsDir, n.name))
	}
	if exec.Command("ip", "link", "show", bridgeName).Run() == nil {
		errs = append(errs, run("ip", "link", "delete", bridgeName))
	}
	for _, p := range []string{c.stateDir, c.runDir, filepath.Join(c.outDir, "local"), c.hostKubeconfig()} {
		errs = append(errs, os.RemoveAll(p))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.checkNothingLeft()
}

// existingNodes finds the nodes of a cluster that may be half built or half removed: by
// network namespace, state directory and cgroup.
func (c config) existingNodes() ([]node, error) {
	names := map[string]bool{}
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], nodePrefix) {
			names[f[0]] = true
		}
	}
	dirs, _ := os.ReadDir(filepath.Join(c.stateDir, "nodes"))
	for _, d := range dirs {
		names[d.Name()] = true
	}
	// And by cgroup: what an interrupted down leaves, with the processes of pods in it.
	hierarchies, _ := cgroupHierarchies()
	for _, h := range hierarchies {
		cgroups, _ := filepath.Glob(filepath.Join(h, nodePrefix+"*"))
		for _, g := range cgroups {
			names[filepath.Base(g)] = true
		}
	}
	var nodes []node
	for _, n := range nodesOf(9) {
		if names[n.name] {
			nodes = append(nodes, n)
		}
	}
	return nodes, nil
}

// removePods stops and removes every pod sandbox of a node through its containerd, so that
// the CNI plugins release their addresses and containerd's shims exit.
func (c config) removePods(n node) error {
	sock := c.containerdSocket(n)
	if _, err := os.Stat(sock); err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// A socket nobody listens on is what a machine restart leaves behind: its pods are gone
	// with the processes, and the namespace removal below takes the rest.
	rt, err := criclient.NewRemoteRuntimeService(ctx, "unix://"+sock, 30*time.Second, nil, false)
	if err != nil {
		logf("%s: containerd does not answer (%v); leaving its pods to the namespace removal", n.name, err)
		return nil
	}
	if _, err := rt.Version(ctx, ""); err != nil {
		logf("%s: containerd does not answer (%v); leaving its pods to the namespace removal", n.name, err)
		return nil
	}
	// The node agent's removal: a pod containerd stopped but cannot remove (a container whose
	// start timed out under load) does not stop the rest; killShims and killCgroupProcs end
	// what is left of it.
	if err := agent.RemovePods(ctx, rt); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	return nil
}

// killShims stops containerd shims this node's containerd started that outlived it; they name
// the node's containerd socket on their command line.
func (c config) killShims(n node) error {
	sock := c.containerdSocket(n)
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(cmdline), "containerd-shim") || !strings.Contains(string(cmdline), sock) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
			logf("%s: stopping leftover shim %d", n.name, pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return nil
}

// unmountAll unmounts, deepest first, every mount under the state and run directories (pod
// volumes, container root filesystems, sandbox /dev/shm).
func (c config) unmountAll() error {
	var errs []error
	for range 3 {
		mounts := c.ourMounts()
		if len(mounts) == 0 {
			return nil
		}
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	return errors.Join(errs...)
}

func (c config) ourMounts() []string {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		p := strings.ReplaceAll(f[1], `\040`, " ")
		if under(p, c.stateDir) || under(p, c.runDir) ||
			strings.HasPrefix(p, "/run/netns/"+nodePrefix) || strings.HasPrefix(p, "/var/run/netns/"+nodePrefix) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// killCgroupProcs kills the processes still in the node's cgroups: containers whose pods
// containerd could not stop, orphaned when their shims went.
func killCgroupProcs(name string) {
	hierarchies, _ := cgroupHierarchies()
	killed := map[int]bool{}
	for _, h := range hierarchies {
		_ = filepath.WalkDir(filepath.Join(h, name), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 && !killed[pid] {
					killed[pid] = true
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	if len(killed) > 0 {
		logf("%s: killed %d processes left in its cgroups", name, len(killed))
		time.Sleep(time.Second) // the kernel empties the cgroups once they have exited
	}
}

// removeCgroups removes the node's cgroup tree in every hierarchy, leaves first.
func removeCgroups(name string) error {
	hierarchies, err := cgroupHierarchies()
	if err != nil {
		return nil
	}
	var errs []error
	for _, h := range hierarchies {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cniResultsDir is where libcni caches each pod network's result.
const cniResultsDir = "/var/lib/cni/results"

// removePodNetworks removes what the node's pods' networks leave when their containerd is gone
// without tearing them down (its processes were killed while the machine kept running, so
// removePods could not ask it): each pod's network namespace, a mount that outlives every
// process, and the CNI results cached for the pod. The node's network is named after it, so
// its cached results say which namespaces were its pods' (and their loopback twins, which
// containerd caches under the shared name cni-loopback, by the same sandbox ID).
func removePodNetworks(resultsDir, node string) error {
	var errs []error
	for _, f := range podNetworkResults(resultsDir, node) {
		if f.netns != "" {
			if err := syscall.Unmount(f.netns, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting pod network namespace %s: %w", f.netns, err))
			} else if err := os.Remove(f.netns); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		for _, cached := range f.files {
			if err := os.Remove(cached); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// podNetwork is one pod sandbox's network as libcni cached it: the namespace (empty when the
// result names none this package would remove) and the cache files to remove.
type podNetwork struct {
	netns string
	files []string
}

// podNetworkResults reads the node's cached CNI results in resultsDir. Only a namespace under
// /run/netns (or /var/run/netns) named cni-* (containerd's) is returned for removal.
func podNetworkResults(resultsDir, node string) []podNetwork {
	cached, _ := filepath.Glob(filepath.Join(resultsDir, node+"-*"))
	var out []podNetwork
	for _, f := range cached {
		pn := podNetwork{files: []string{f}}
		var r struct {
			ContainerID string `json:"containerId"`
			Result      struct {
				Interfaces []struct {
					Sandbox string `json:"sandbox"`
				} `json:"interfaces"`
			} `json:"result"`
		}
		if data, err := os.ReadFile(f); err == nil && json.Unmarshal(data, &r) == nil {
			for _, i := range r.Result.Interfaces {
				dir, name := filepath.Split(filepath.Clean(i.Sandbox))
				if (dir == "/run/netns/" || dir == "/var/run/netns/") && strings.HasPrefix(name, "cni-") {
					pn.netns = filepath.Clean(i.Sandbox)
				}
			}
			if r.ContainerID != "" && !strings.ContainsRune(r.ContainerID, '/') {
				pn.files = append(pn.files, filepath.Join(resultsDir, "cni-loopback-"+r.ContainerID+"-lo"))
			}
		}
		out = append(out, pn)
	}
	return out
}

func netnsExists(name string) bool {
	_, err := os.Stat("/var/run/netns/" + name)
	return err == nil
}

// checkNothingLeft reports anything of the cluster that survived.
func (c config) checkNothingLeft() error {
	var left []string
	if m := c.ourMounts(); len(m) > 0 {
		left = append(left, fmt.Sprintf("%d mounts (first %s)", len(m), m[0]))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && (strings.Contains(string(cmdline), c.stateDir) || strings.Contains(string(cmdline), c.runDir)) {
			left = append(left, "process "+strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("left behind: %s", strings.Join(left, "; "))
	}
	logf("nothing of the local cluster is left")
	return nil
}

// under says whether path is dir or inside it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
