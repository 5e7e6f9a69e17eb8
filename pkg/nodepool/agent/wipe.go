package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	criclient "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// kubeletState are the files in the kubelet's root directory that remember the pods of the
// cluster it served; they must not cross to the next one.
var kubeletState = []string{"cpu_manager_state", "memory_manager_state", "dra_manager_state", "pods"}

// Wipe removes what the kubelet ran for the cluster it served: every pod sandbox through the
// container runtime (so the network plugin releases their addresses), the pods' volume mounts
// and the kubelet's pod state. It runs with the kubelet stopped, and may run again.
func Wipe(ctx context.Context, runtimeEndpoint, kubeletRoot string) error {
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
	return nil
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
