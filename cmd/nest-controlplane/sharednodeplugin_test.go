package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// TestSchedulerConfig checks the configuration the scheduler is started with: the shared-node
// plugin in every profile (weighted), and what the flags or the given --config said kept.
func TestSchedulerConfig(t *testing.T) {
	load := func(t *testing.T, args ...string) *configv1.KubeSchedulerConfiguration {
		t.Helper()
		t.Setenv("TMPDIR", t.TempDir())
		cmd := newSchedulerCommand()
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		path, err := writeSchedulerConfig(cmd.Flags())
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg := &configv1.KubeSchedulerConfiguration{}
		if err := yaml.UnmarshalStrict(data, cfg); err != nil {
			t.Fatalf("%v in\n%s", err, data)
		}
		for _, p := range cfg.Profiles {
			if len(p.Plugins.MultiPoint.Enabled) == 0 || p.Plugins.MultiPoint.Enabled[len(p.Plugins.MultiPoint.Enabled)-1].Name != sharedNodePlugin {
				t.Errorf("profile %s: multiPoint plugins %+v, want %s among them", *p.SchedulerName, p.Plugins.MultiPoint.Enabled, sharedNodePlugin)
			}
		}
		return cfg
	}

	t.Run("from flags", func(t *testing.T) {
		cfg := load(t, "--kubeconfig=/pki/scheduler.kubeconfig", "--profiling=false", "--kube-api-qps=20", "--leader-elect=true")
		if len(cfg.Profiles) != 1 || *cfg.Profiles[0].SchedulerName != "default-scheduler" {
			t.Errorf("profiles %+v, want the default-scheduler profile", cfg.Profiles)
		}
		if cfg.ClientConnection.Kubeconfig != "/pki/scheduler.kubeconfig" || cfg.ClientConnection.QPS != 20 || cfg.EnableProfiling == nil || *cfg.EnableProfiling {
			t.Errorf("client connection %+v, profiling %v: the flags were not carried over", cfg.ClientConnection, cfg.EnableProfiling)
		}
	})

	t.Run("from --config", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		given := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /given.kubeconfig
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packing
  plugins:
    multiPoint:
      enabled:
      - name: NodeResourcesFit
`
		if err := os.WriteFile(path, []byte(given), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := load(t, "--config="+path)
		if len(cfg.Profiles) != 2 || cfg.ClientConnection.Kubeconfig != "/given.kubeconfig" || cfg.Profiles[1].Plugins.MultiPoint.Enabled[0].Name != "NodeResourcesFit" {
			t.Errorf("got %+v, want the given configuration with the plugin added", cfg)
		}
	})

	t.Run("a --config of another version is refused", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte("apiVersion: kubescheduler.config.k8s.io/v1beta3\nkind: KubeSchedulerConfiguration\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := newSchedulerCommand()
		if err := cmd.ParseFlags([]string{"--config=" + path}); err != nil {
			t.Fatal(err)
		}
		if _, err := writeSchedulerConfig(cmd.Flags()); err == nil || !strings.Contains(err.Error(), "v1beta3") {
			t.Errorf("got %v, want an error naming the version", err)
		}
	})
}
