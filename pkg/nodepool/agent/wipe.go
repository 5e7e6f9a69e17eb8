package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// kubeletState are the files in the kubelet's root directory that remember the pods of the
// cluster it served; they must not cross to the next one. checkpoints holds the archives of
// containers checkpointed through the kubelet's API (their memory and files). The image pull
// records (image_manager) stay: with them the kubelet asks a pod for the credentials of a
// private image another pulled.
var kubeletState = []string{
	"cpu_manager_state", "memory_manager_state", "dra_manager_state", "allocated_pods_state", "actuated_pods_state",
	"checkpoints", "pods",
}

// ContainerLogsDir is where a kubelet links each container's log file (fixed in the kubelet).
const ContainerLogsDir = "/var/log/containers"

// Wipe removes what the kubelet ran for the cluster it served: every pod sandbox through the
// container runtime (so the network plugin releases their addresses), the pods' volume mounts,
// the kubelet's pod state, and the pods' logs (podLogsDir, and their links in
// ContainerLogsDir): a cluster the node serves next, whose pods may be granted the node's
// files, must not read what the last one's pods wrote. It runs with the kubelet stopped, and
// may run again.
func Wipe(ctx context.Context, runtimeEndpoint, kubeletRoot, podLogsDir string) error {
	rt, err := criclient.NewRemoteRuntimeService(ctx, runtimeEndpoint, 30*time.Second, nil, false)
	if err != nil {
		return fmt.Errorf("connecting to the container runtime at %s: %w", runtimeEndpoint, err)
	}
	if err := RemovePods(ctx, rt); err != nil {
		return err
	}
	if err := unmountUnder(filepath.Join(kubeletRoot, "pods")); err != nil {
		return err
	}
	for _, name := range kubeletState {
		if err := os.RemoveAll(filepath.Join(kubeletRoot, name)); err != nil {
			return fmt.Errorf("removing kubelet state %s: %w", name, err)
		}
	}
	return removePodLogs(ctx, podLogsDir, ContainerLogsDir)
}

// PodLogsDir is the kubelet's podLogsDir in its configuration file (data), /var/log/pods when
// it sets none. A directory that is not absolute and clean, or is /, is refused: the wipe
// empties it.
func PodLogsDir(data []byte) (string, error) {
	cfg := struct {
		PodLogsDir string `json:"podLogsDir"`
	}{}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("reading the kubelet configuration: %w", err)
	}
	d := cfg.PodLogsDir
	if d == "" {
		return "/var/log/pods", nil
	}
	if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
		return "", fmt.Errorf("the kubelet configuration's podLogsDir %q is not an absolute, clean path below /", d)
	}
	return d, nil
}

// podLogDir matches the name of a pod's log directory: <namespace>_<name>_<uid> (names hold no
// underscore; a static pod's UID is a hash without dashes).
var podLogDir = regexp.MustCompile(`^[a-z0-9.-]+_[a-z0-9.-]+_[0-9a-f-]+$`)

// removePodLogs removes the pods' log directories in podLogsDir (nothing else there) and the
// links in containerLogsDir that point into it; other links stay (the kubelets of other
// nodes of the same machine, as in the local cluster, keep theirs there).
func removePodLogs(ctx context.Context, podLogsDir, containerLogsDir string) error {
	var errs []error
	entries, err := os.ReadDir(podLogsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("reading the pods' logs: %w", err)
	}
	removed := 0
	for _, e := range entries {
		if !e.IsDir() || !podLogDir.MatchString(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(podLogsDir, e.Name())); err != nil {
			errs = append(errs, fmt.Errorf("removing the logs of pod %s: %w", e.Name(), err))
			continue
		}
		removed++
	}
	links, err := os.ReadDir(containerLogsDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return errors.Join(append(errs, fmt.Errorf("reading the containers' log links: %w", err))...)
	}
	inside := podLogsDir + string(filepath.Separator)
	for _, l := range links {
		link := filepath.Join(containerLogsDir, l.Name())
		target, err := os.Readlink(link)
		if err != nil { // not a link
			continue
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(containerLogsDir, target)
		}
		if strings.HasPrefix(filepath.Clean(target), inside) {
			if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("removing the log link %s: %w", link, err))
			}
		}
	}
	klog.FromContext(ctx).Info("removed the logs of the pods the kubelet ran", "dir", podLogsDir, "pods", removed)
	return errors.Join(errs...)
}

// RemovePods stops every pod sandbox of the runtime and removes it. A runtime can fail to
// remove the records of a pod it has stopped: containerd 1.6 keeps a container whose start
// timed out on a saturated node with a task it cannot delete, for good. Stopped, such a pod
// runs nothing and holds no address, so its records are left to the runtime (the next
// kubelet's garbage collection tries again) rather than the node staying between clusters.
// A pod with a container the runtime does not report exited is never left.
func RemovePods(ctx context.Context, rt internalapi.RuntimeService) error {
	log := klog.FromContext(ctx)
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	left := 0
	for _, p := range pods {
		pod := p.Metadata.Namespace + "/" + p.Metadata.Name
		if err := rt.StopPodSandbox(ctx, p.Id); err != nil {
			return fmt.Errorf("stopping pod %s: %w", pod, err)
		}
		err := rt.RemovePodSandbox(ctx, p.Id)
		if err == nil {
			continue
		}
		containers, lerr := rt.ListContainers(ctx, &runtimeapi.ContainerFilter{PodSandboxId: p.Id})
		if lerr != nil {
			return fmt.Errorf("removing pod %s: %w (and listing its containers: %v)", pod, err, lerr)
		}
		for _, c := range containers {
			if c.State != runtimeapi.ContainerState_CONTAINER_EXITED && c.State != runtimeapi.ContainerState_CONTAINER_CREATED {
				return fmt.Errorf("removing pod %s: %w (its container %s is %s)", pod, err, c.Metadata.GetName(), c.State)
			}
		}
		log.Info("the runtime keeps the records of a stopped pod; nothing of it runs, leaving them to the runtime", "pod", pod, "err", err)
		left++
	}
	log.Info("removed the pods of the cluster the kubelet served", "pods", len(pods)-left, "stoppedButKept", left)
	return nil
}

// unmountUnder unmounts, deepest first, every mount below dir (the pods' volumes).
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return err
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var mounts []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			if p := strings.ReplaceAll(f[1], `\040`, " "); strings.HasPrefix(p, prefix) {
				mounts = append(mounts, p)
			}
		}
	}
	slices.SortFunc(mounts, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}
