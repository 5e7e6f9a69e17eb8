package install

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// units is a service manager that keeps what a real one would: which units are enabled and
// running, and how often each was (re)started.
type units struct {
	reloads  int
	enabled  map[string]bool
	starts   map[string]int
	failWith error
}

func (u *units) Reload(context.Context) error { u.reloads++; return nil }
func (u *units) Enable(_ context.Context, n string) error {
	u.enabled[n] = true
	return nil
}
func (u *units) Restart(_ context.Context, n string) error {
	if u.failWith != nil {
		return u.failWith
	}
	u.starts[n]++
	return nil
}
func (u *units) Start(_ context.Context, n string) error {
	if u.starts[n] == 0 {
		u.starts[n]++
	}
	return nil
}

func TestInstall(t *testing.T) {
	root := t.TempDir()
	bin := filepath.Join(t.TempDir(), "node-agent")
	if err := os.WriteFile(bin, []byte("agent v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	sd := &units{enabled: map[string]bool{}, starts: map[string]int{}}
	opts := Options{HostRoot: root, Binary: bin, Args: []string{"--node-name=worker-1", "--kubelet-mode=systemd"}}
	ctx := context.Background()

	changed, err := Install(ctx, opts, sd)
	if err != nil || !changed {
		t.Fatalf("first install: changed %v, %v", changed, err)
	}
	got, err := os.ReadFile(filepath.Join(root, BinaryPath))
	if err != nil || string(got) != "agent v1" {
		t.Fatalf("binary on the host: %q, %v", got, err)
	}
	if fi, _ := os.Stat(filepath.Join(root, BinaryPath)); fi.Mode().Perm() != 0o755 {
		t.Errorf("binary mode %v", fi.Mode())
	}
	unit, err := os.ReadFile(filepath.Join(root, UnitDir, Unit))
	if err != nil {
		t.Fatal(err)
	}
	if want := "ExecStart=" + BinaryPath + " --node-name=worker-1 --kubelet-mode=systemd\n"; !strings.Contains(string(unit), want) {
		t.Errorf("unit lacks %q:\n%s", want, unit)
	}
	if !sd.enabled[Unit] || sd.starts[Unit] != 1 || sd.reloads != 1 {
		t.Errorf("after install: enabled %v, started %d times, %d reloads", sd.enabled[Unit], sd.starts[Unit], sd.reloads)
	}

	// The same again: nothing changes, the agent is not restarted.
	if changed, err := Install(ctx, opts, sd); err != nil || changed || sd.starts[Unit] != 1 {
		t.Errorf("second install: changed %v, %v, started %d times", changed, err, sd.starts[Unit])
	}

	// A new binary (an upgrade): the agent restarts with it.
	if err := os.WriteFile(bin, []byte("agent v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(ctx, opts, sd); err != nil || !changed || sd.starts[Unit] != 2 {
		t.Errorf("upgrade: changed %v, %v, started %d times", changed, err, sd.starts[Unit])
	}
	if got, _ := os.ReadFile(filepath.Join(root, BinaryPath)); string(got) != "agent v2" {
		t.Errorf("binary after upgrade: %q", got)
	}
	left, _ := filepath.Glob(filepath.Join(root, "opt", "kubenest", "bin", ".*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestInstallMissingBinary(t *testing.T) {
	sd := &units{enabled: map[string]bool{}, starts: map[string]int{}}
	_, err := Install(context.Background(), Options{HostRoot: t.TempDir(), Binary: "/nonexistent/node-agent"}, sd)
	if err == nil || !strings.Contains(err.Error(), "agent binary") {
		t.Errorf("err %v, want it to name the agent binary", err)
	}
	if len(sd.enabled) > 0 {
		t.Error("a unit was enabled without a binary")
	}
}

func TestUnitQuotesArguments(t *testing.T) {
	unit := UnitFile([]string{"--kubelet-arg=--node-ip=10.0.0.1", `--x=a b`, "--y=100%"})
	want := `ExecStart=/opt/kubenest/bin/node-agent --kubelet-arg=--node-ip=10.0.0.1 "--x=a b" "--y=100%%"`
	if !strings.Contains(unit, want+"\n") {
		t.Errorf("unit:\n%s\nwant line %s", unit, want)
	}
}
