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
	log := klog.FromContext(ctx)
	rt, err := criclient.NewRemoteRuntimeService(ctx, runtimeEndpoint, 30*time.Second, nil, false)
	if err != nil {
		return fmt.Errorf("connecting to the container runtime at %s: %w", runtimeEndpoint, err)
	}
	pods, err := rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	for _, p := range pods {
		if err := rt.StopPodSandbox(ctx, p.Id); err != nil {
			return fmt.Errorf("stopping pod %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err)
		}
		if err := rt.RemovePodSandbox(ctx, p.Id); err != nil {
			return fmt.Errorf("removing pod %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err)
		}
	}
	log.Info("removed the pods of the cluster the kubelet served", "pods", len(pods))

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
