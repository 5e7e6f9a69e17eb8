// Package install puts the node agent on a systemd host: its binary, a unit that runs it, and
// the unit enabled and running. The chart's installer DaemonSet does this on lendable nodes; the
// agent must not run as a pod itself, since it stops the kubelet and removes the node's pods
// when the node changes clusters.
//
// What it changes on a host, all under --host-root:
//   - /opt/kubenest/bin/node-agent       the agent binary
//   - /etc/systemd/system/<Unit>         the unit (Restart=always)
//   - the unit enabled and (re)started through systemd's D-Bus socket.
//
// The agent itself, once running, writes its state under /var/lib/kubenest/node-agent and,
// while the node is lent, a kubelet drop-in (see the agent's --kubelet-drop-in).
package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kubenest-io/kubenest/internal/atomicfile"
)

const (
	// BinaryPath is where the agent's binary goes on the host.
	BinaryPath = "/opt/kubenest/bin/node-agent"
	// Unit is the agent's systemd unit.
	Unit = "kubenest-node-agent.service"
	// UnitDir is where the unit file goes on the host.
	UnitDir = "/etc/systemd/system"
)

// Systemd is what the installer needs from the host's service manager.
type Systemd interface {
	Reload(ctx context.Context) error
	Enable(ctx context.Context, unit string) error
	// Restart starts the unit, or restarts it if it runs.
	Restart(ctx context.Context, unit string) error
	// Start starts the unit if it is not running.
	Start(ctx context.Context, unit string) error
}

// Options say what to install where.
type Options struct {
	// HostRoot is where the host's root filesystem is mounted ("/" when run on the host).
	HostRoot string
	// Binary is the agent binary to copy (usually this executable).
	Binary string
	// Args are the agent's flags in the unit.
	Args []string
}

// UnitFile is the agent's unit. It runs after the kubelet's and restarts whatever happens: the
// agent is what brings a lent node home.
func UnitFile(args []string) string {
	quoted := make([]string, 0, len(args)+1)
	quoted = append(quoted, BinaryPath)
	for _, a := range args {
		quoted = append(quoted, quoteArg(a))
	}
	return fmt.Sprintf(`# Written by the KubeNest node-agent installer; changes are overwritten.
[Unit]
Description=KubeNest node agent: lends this node's kubelet to tenants and brings it back
Documentation=https://github.com/kubenest-io/kubenest
After=network-online.target containerd.service kubelet.service
Wants=network-online.target

[Service]
ExecStart=%s
Restart=always
RestartSec=2
# Stopping the agent must never stop the kubelet it manages.
KillMode=process

[Install]
WantedBy=multi-user.target
`, strings.Join(quoted, " "))
}

// quoteArg quotes an argument for systemd's ExecStart when it needs it.
func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\"'\\%$;") {
		return a
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$")
	return `"` + r.Replace(a) + `"`
}

// Install writes the binary and the unit where they differ from what is there, and makes the
// unit run: restarted if anything changed, started otherwise. It reports whether it changed
// anything; running it twice changes nothing the second time.
func Install(ctx context.Context, o Options, sd Systemd) (bool, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return false, fmt.Errorf("reading the agent binary: %w", err)
	}
	binChanged, err := writeIfChanged(filepath.Join(o.HostRoot, BinaryPath), bin, 0o755)
	if err != nil {
		return false, err
	}
	unitChanged, err := writeIfChanged(filepath.Join(o.HostRoot, UnitDir, Unit), []byte(UnitFile(o.Args)), 0o644)
	if err != nil {
		return false, err
	}
	if unitChanged {
		if err := sd.Reload(ctx); err != nil {
			return true, fmt.Errorf("reloading systemd: %w", err)
		}
	}
	if err := sd.Enable(ctx, Unit); err != nil {
		return true, fmt.Errorf("enabling %s: %w", Unit, err)
	}
	changed := binChanged || unitChanged
	if changed {
		err = sd.Restart(ctx, Unit)
	} else {
		err = sd.Start(ctx, Unit)
	}
	if err != nil {
		return changed, fmt.Errorf("starting %s: %w", Unit, err)
	}
	return changed, nil
}

// writeIfChanged replaces a file atomically (and durably) when its content differs, and reports whether it did.
func writeIfChanged(path string, data []byte, mode os.FileMode) (bool, error) {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, err
	}
	if err := atomicfile.Write(path, data, mode); err != nil {
		return false, err
	}
	return true, nil
}
