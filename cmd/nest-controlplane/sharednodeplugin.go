package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	configv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// sharedNodePlugin is the tenant scheduler's plugin for the shared node:
//   - its filter keeps pods off the shared node when the shared node would refuse them
//     (sharednode.Check): such a pod goes to a lent node, or stays Pending with the refusal in
//     its PodScheduled condition, instead of being bound to a node that fails it;
//   - its score puts pods on the tenant's lent nodes before the shared node: a lent node is the
//     tenant's own, the shared node the overflow. The shared node scores 0, any other node the
//     maximum, with sharedNodeWeight: enough to outweigh how full the nodes are (a lent node's
//     requests against the shared node's sum of host nodes), not a required node affinity or a
//     taint.
const (
	sharedNodePlugin = "KubeNestSharedNode"
	sharedNodeWeight = 3
)

type sharedNodeScheduling struct{}

var (
	_ fwk.FilterPlugin      = sharedNodeScheduling{}
	_ fwk.ScorePlugin       = sharedNodeScheduling{}
	_ fwk.EnqueueExtensions = sharedNodeScheduling{}
)

func newSharedNodePlugin(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return sharedNodeScheduling{}, nil
}

func (sharedNodeScheduling) Name() string { return sharedNodePlugin }

func (sharedNodeScheduling) Filter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeInfo fwk.NodeInfo) *fwk.Status {
	if !sharednode.IsSharedNode(nodeInfo.Node()) {
		return nil
	}
	if r := sharednode.Check(pod); r != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, "node(s) were the shared node, which refuses this pod: "+r.Error())
	}
	return nil
}

func (sharedNodeScheduling) Score(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, nodeInfo fwk.NodeInfo) (int64, *fwk.Status) {
	if sharednode.IsSharedNode(nodeInfo.Node()) {
		return fwk.MinNodeScore, nil
	}
	return fwk.MaxNodeScore, nil
}

func (sharedNodeScheduling) ScoreExtensions() fwk.ScoreExtensions { return nil }

// EventsToRegister: a pod refused here may fit a node that is added (a node lent to the
// tenant) or relabelled.
func (sharedNodeScheduling) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeLabel}}}, nil
}

// newSchedulerCommand is kube-scheduler with the shared-node plugin compiled in and enabled in
// every profile. Upstream enables a plugin of its own build only through a configuration file,
// so the command is given one (--config) before it starts: the file it was given with the
// plugin added to each profile, or, without --config, the configuration its flags make (the
// deprecated client and profiling flags carry over) with the plugin in the default profile.
// The file is written in the temporary directory.
func newSchedulerCommand() *cobra.Command {
	cmd := waitFirst(scheduler.NewSchedulerCommand(scheduler.WithPlugin(sharedNodePlugin, newSharedNodePlugin)), "kubeconfig", waitForAPIServer)
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("version"); f != nil && f.Value.String() != "false" {
			return run(c, args)
		}
		path, err := writeSchedulerConfig(c.Flags())
		if err != nil {
			return err
		}
		if err := c.Flags().Set("config", path); err != nil {
			return err
		}
		klog.InfoS("Scheduler configuration written, with KubeNest's shared-node plugin in every profile", "config", path, "plugin", sharedNodePlugin)
		return run(c, args)
	}
	return cmd
}

// writeSchedulerConfig writes the configuration newSchedulerCommand gives the scheduler and
// returns its path.
func writeSchedulerConfig(flags *pflag.FlagSet) (string, error) {
	cfg, err := schedulerConfig(flags)
	if err != nil {
		return "", err
	}
	if len(cfg.Profiles) == 0 {
		cfg.Profiles = []configv1.KubeSchedulerProfile{{SchedulerName: ptr.To(corev1.DefaultSchedulerName)}}
	}
	for i := range cfg.Profiles {
		p := &cfg.Profiles[i]
		if p.Plugins == nil {
			p.Plugins = &configv1.Plugins{}
		}
		p.Plugins.MultiPoint.Enabled = append(p.Plugins.MultiPoint.Enabled, configv1.Plugin{Name: sharedNodePlugin, Weight: ptr.To[int32](sharedNodeWeight)})
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "kube-scheduler-config-*.yaml")
	if err != nil {
		return "", fmt.Errorf("writing the scheduler's configuration: %w", err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return "", fmt.Errorf("writing the scheduler's configuration: %w", err)
	}
	return f.Name(), f.Close()
}

// schedulerConfig is the configuration of --config, or the one the deprecated flags make.
func schedulerConfig(flags *pflag.FlagSet) (*configv1.KubeSchedulerConfiguration, error) {
	cfg := &configv1.KubeSchedulerConfiguration{}
	if path := flags.Lookup("config").Value.String(); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if err := yaml.UnmarshalStrict(data, cfg); err != nil {
			return nil, fmt.Errorf("--config %s: %w", path, err)
		}
		if want := configv1.SchemeGroupVersion.String(); cfg.APIVersion != want || cfg.Kind != "KubeSchedulerConfiguration" {
			return nil, fmt.Errorf("--config %s: apiVersion %q kind %q: the shared-node plugin is added to %s KubeSchedulerConfiguration only", path, cfg.APIVersion, cfg.Kind, want)
		}
		return cfg, nil
	}
	cfg.APIVersion, cfg.Kind = configv1.SchemeGroupVersion.String(), "KubeSchedulerConfiguration"
	changed := func(name string) (string, bool) {
		f := flags.Lookup(name)
		if f == nil || !f.Changed {
			return "", false
		}
		return f.Value.String(), true
	}
	var err error
	if v, ok := changed("kubeconfig"); ok {
		cfg.ClientConnection.Kubeconfig = v
	}
	if v, ok := changed("kube-api-content-type"); ok {
		cfg.ClientConnection.ContentType = v
	}
	if v, ok := changed("kube-api-qps"); ok {
		var qps float64
		qps, err = strconv.ParseFloat(v, 32)
		cfg.ClientConnection.QPS = float32(qps)
	}
	if v, ok := changed("kube-api-burst"); ok && err == nil {
		var burst int64
		burst, err = strconv.ParseInt(v, 10, 32)
		cfg.ClientConnection.Burst = int32(burst)
	}
	if v, ok := changed("profiling"); ok && err == nil {
		var on bool
		on, err = strconv.ParseBool(v)
		cfg.EnableProfiling = &on
	}
	if v, ok := changed("contention-profiling"); ok && err == nil {
		var on bool
		on, err = strconv.ParseBool(v)
		cfg.EnableContentionProfiling = &on
	}
	return cfg, err
}
