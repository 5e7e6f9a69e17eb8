package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// Kubelet starts and stops the node's kubelet with the flags of the cluster it is to serve.
type Kubelet interface {
	// Start runs the kubelet with args (its kubeconfig, bootstrap kubeconfig, cert directory
	// and config file for the target cluster), or leaves it running if it already runs with
	// them.
	Start(ctx context.Context, args []string) error
	// Stop stops the kubelet and waits until it has exited.
	Stop(ctx context.Context) error
}

// ProcessKubelet runs the kubelet as this process's child: the local host cluster's way, and
// any machine without systemd. The child dies with the agent, and the agent starts it again
// from its recorded state when it comes back.
type ProcessKubelet struct {
	// Binary is the kubelet binary; BaseArgs the flags it always gets (root directory, node
	// name, address, labels).
	Binary   string
	BaseArgs []string
	// LogPath receives the kubelet's output.
	LogPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	args []string
	done chan struct{}
}

// Start starts the kubelet unless it already runs with args.
func (k *ProcessKubelet) Start(ctx context.Context, args []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil && !exited(k.done) && slicesEqual(k.args, args) {
		return nil
	}
	if k.cmd != nil {
		k.stopLocked()
	}
	logFile, err := os.OpenFile(k.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command(k.Binary, append(append([]string{}, k.BaseArgs...), args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The kubelet goes when the agent goes: no kubelet is ever left serving a cluster the
	// agent has not recorded.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	k.cmd, k.args, k.done = cmd, args, done
	klog.FromContext(ctx).Info("started the kubelet", "pid", cmd.Process.Pid, "args", strings.Join(args, " "))
	return nil
}

// Stop stops the kubelet: SIGTERM, then SIGKILL after 30 seconds.
func (k *ProcessKubelet) Stop(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return nil
	}
	k.stopLocked()
	klog.FromContext(ctx).Info("stopped the kubelet")
	return nil
}

// Running says whether the kubelet child runs; when it exited on its own, the agent starts it
// again on its next pass.
func (k *ProcessKubelet) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.cmd != nil && !exited(k.done)
}

func (k *ProcessKubelet) stopLocked() {
	if !exited(k.done) {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.done:
		case <-time.After(30 * time.Second):
			_ = k.cmd.Process.Kill()
			<-k.done
		}
	}
	k.cmd, k.args = nil, nil
}

// SystemdKubelet drives a kubelet managed by systemd, as kubeadm installs it: a drop-in sets
// the flags of the cluster it serves through the variables kubeadm's unit passes on
// (KUBELET_KUBECONFIG_ARGS, KUBELET_CONFIG_ARGS); for the host, the drop-in is removed and the
// unit's own settings apply.
type SystemdKubelet struct {
	// Unit is the kubelet's unit, usually kubelet.service.
	Unit string
	// DropIn is the drop-in file the agent owns, for example
	// /etc/systemd/system/kubelet.service.d/90-kubenest.conf.
	DropIn string
}

// Start writes the drop-in for args (none for the host) and starts the unit.
func (k *SystemdKubelet) Start(ctx context.Context, args []string) error {
	if len(args) == 0 {
		if err := os.Remove(k.DropIn); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	} else {
		content := fmt.Sprintf("# Written by the KubeNest node agent while this node is lent to a tenant.\n[Service]\nEnvironment=\"KUBELET_KUBECONFIG_ARGS=%s\"\nEnvironment=\"KUBELET_CONFIG_ARGS=\"\n",
			strings.Join(args, " "))
		if err := os.MkdirAll(filepath.Dir(k.DropIn), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(k.DropIn, []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := systemctl(ctx, "daemon-reload"); err != nil {
		return err
	}
	return systemctl(ctx, "start", k.Unit)
}

// Stop stops the unit.
func (k *SystemdKubelet) Stop(ctx context.Context) error { return systemctl(ctx, "stop", k.Unit) }

func systemctl(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func exited(done chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
