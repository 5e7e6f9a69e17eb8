package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// heartbeat is how often the agent reports even when nothing changed; retryInterval how soon
// a failed pass is tried again.
const (
	heartbeat     = 20 * time.Second
	retryInterval = 2 * time.Second
)

// Config is a node agent's setup.
type Config struct {
	// NodeName is the node, and its PoolNode's name.
	NodeName string
	// Namespace holds the node's join Secret (the operator's namespace).
	Namespace string
	// StateFile records the agent's state; TenantDir holds the kubelet's files for a tenant.
	StateFile string
	TenantDir string
	// Kubelet starts and stops the kubelet; HostArgs are its flags for the host (none when
	// its unit's own settings serve the host).
	Kubelet  Kubelet
	HostArgs []string
	// KubeletConfig is the kubelet's configuration file for the host; the tenant's is
	// derived from it.
	KubeletConfig string
	// RuntimeEndpoint is the container runtime's CRI socket; KubeletRoot the kubelet's root
	// directory. Wipe, when set, replaces the wipe through them and the pods' log directory
	// of KubeletConfig (tests).
	RuntimeEndpoint string
	KubeletRoot     string
	Wipe            func(ctx context.Context) error
	// Interval is how often the agent passes without a change to its PoolNode: it keeps the
	// kubelet running and its heartbeat fresh. Changed, when set, signals a change of the
	// PoolNode (WatchPoolNode), which starts a pass at once; without it the agent only polls.
	Interval time.Duration
	Changed  <-chan struct{}
	// Version is reported in the PoolNode.
	Version string
}

// Agent moves one node's kubelet where its PoolNode says. It only ever pulls from the host's
// API, as the node itself; it listens on nothing.
type Agent struct {
	cfg  Config
	host client.Client

	lastReport     v1alpha1.AgentStatus
	lastReportTime time.Time
	// noPoolNode: the last read found no PoolNode, so there is nothing to report to.
	noPoolNode bool
}

// New returns an agent that reaches the host through host.
func New(cfg Config, host client.Client) *Agent { return &Agent{cfg: cfg, host: host} }

// Run runs passes until ctx ends. A failed pass is reported in the PoolNode and retried.
func (a *Agent) Run(ctx context.Context) error {
	log := klog.FromContext(ctx)
	log.Info("node agent started", "node", a.cfg.NodeName)
	for {
		next := a.cfg.Interval
		if err := a.pass(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "pass failed; retrying")
			a.report(ctx, "", err.Error())
			next = min(next, retryInterval)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.cfg.Changed:
		case <-time.After(next):
		}
	}
}

// pass takes the kubelet one switch (of several recorded steps) towards where it should be,
// or keeps it running where it is.
func (a *Agent) pass(ctx context.Context) error {
	state, err := Load(a.cfg.StateFile)
	if err != nil {
		return err
	}
	if state.Switching == nil && !state.Current.IsNone() {
		// Whatever the host says, or cannot say, the kubelet keeps serving where it is.
		if err := a.cfg.Kubelet.Start(ctx, a.args(state.Current)); err != nil {
			return err
		}
	}
	want, msg, err := a.want(ctx)
	if err != nil {
		return err
	}
	state, step := Plan(state, want)
	if step == "" {
		a.report(ctx, "", msg)
		return nil
	}
	// Recorded before acting: a crash from here on resumes this switch.
	if err := Save(a.cfg.StateFile, state); err != nil {
		return err
	}
	log := klog.FromContext(ctx)
	log.Info("moving the kubelet", "from", state.Current.Cluster, "to", state.Switching.Cluster, "resumingAfter", state.Done)
	for ; step != ""; step = state.Next() {
		a.report(ctx, step, "moving the kubelet to "+state.Switching.Cluster)
		if err := a.run(ctx, step, *state.Switching); err != nil {
			return fmt.Errorf("step %s towards %s: %w", step, state.Switching.Cluster, err)
		}
		state = Completed(state, step)
		if err := Save(a.cfg.StateFile, state); err != nil {
			return err
		}
		log.Info("step done", "step", step)
	}
	log.Info("the kubelet now serves", "cluster", state.Current.Cluster)
	a.report(ctx, "", "the kubelet serves "+state.Current.Cluster)
	return nil
}

// want reads where the kubelet should be: in the tenant once the operator names the node's
// join Secret, else in the host; nowhere while the node is quarantined (it was lent to a
// tenant that could be root on it, and the platform has not marked it clean).
func (a *Agent) want(ctx context.Context) (Target, string, error) {
	pn := &v1alpha1.PoolNode{}
	err := a.host.Get(ctx, client.ObjectKey{Name: a.cfg.NodeName}, pn)
	a.noPoolNode = apierrors.IsNotFound(err)
	if a.noPoolNode {
		return Host, "no PoolNode: the node is not lendable", nil
	}
	if err != nil {
		return Target{}, "", fmt.Errorf("reading PoolNode: %w", err)
	}
	t := pn.Spec.Tenant
	if t == nil || pn.Spec.JoinSecretName == "" {
		if pn.Status.Quarantine != nil {
			return None, "quarantined: the kubelet stays stopped until the node is reimaged and marked clean", nil
		}
		return Host, "", nil
	}
	return Target{Cluster: nodepool.TenantKey(t), UID: t.UID}, "", nil
}

// run runs one step of a switch towards target.
func (a *Agent) run(ctx context.Context, step string, target Target) error {
	switch step {
	case StepStopKubelet:
		return a.cfg.Kubelet.Stop(ctx)
	case StepWipe:
		if a.cfg.Wipe != nil {
			return a.cfg.Wipe(ctx)
		}
		base, err := os.ReadFile(a.cfg.KubeletConfig)
		if err != nil {
			return fmt.Errorf("reading the kubelet configuration: %w", err)
		}
		podLogs, err := PodLogsDir(base)
		if err != nil {
			return err
		}
		return Wipe(ctx, a.cfg.RuntimeEndpoint, a.cfg.KubeletRoot, podLogs)
	case StepConfigure:
		// The kubelet's identity in a tenant is forgotten whichever way it goes.
		if err := os.RemoveAll(a.cfg.TenantDir); err != nil {
			return err
		}
		if target.IsHost() || target.IsNone() {
			return nil
		}
		return a.configureTenant(ctx, target)
	case StepStartKubelet:
		if target.IsNone() {
			return nil
		}
		return a.cfg.Kubelet.Start(ctx, a.args(target))
	}
	return fmt.Errorf("unknown step %q", step)
}

// configureTenant writes the kubelet's files for the tenant from the node's join Secret: a
// bootstrap kubeconfig (the kubelet asks the tenant for its own certificate with it), the
// tenant's CA, and a configuration derived from the host's with the tenant's DNS.
func (a *Agent) configureTenant(ctx context.Context, target Target) error {
	join := &corev1.Secret{}
	key := client.ObjectKey{Namespace: a.cfg.Namespace, Name: nodepool.JoinSecretName(a.cfg.NodeName)}
	if err := a.host.Get(ctx, key, join); err != nil {
		return fmt.Errorf("reading the join Secret: %w", err)
	}
	if types.UID(join.Data[nodepool.JoinKeyTenantUID]) != target.UID {
		return errors.New("the join Secret is for another tenant; waiting for the operator to renew it")
	}
	base, err := os.ReadFile(a.cfg.KubeletConfig)
	if err != nil {
		return fmt.Errorf("reading the kubelet configuration: %w", err)
	}
	caPath := filepath.Join(a.cfg.TenantDir, "ca.crt")
	kubeletConfig, err := TenantKubeletConfig(base, caPath, string(join.Data[nodepool.JoinKeyClusterDNS]), string(join.Data[nodepool.JoinKeyClusterDomain]))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(a.cfg.TenantDir, "pki"), 0o700); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"bootstrap-kubeconfig": join.Data[nodepool.JoinKeyBootstrapKubeconfig],
		"ca.crt":               join.Data[nodepool.JoinKeyCA],
		"kubelet.yaml":         kubeletConfig,
	} {
		if err := os.WriteFile(filepath.Join(a.cfg.TenantDir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// args are the kubelet's flags for target. In a tenant, the node registers with the label
// lent nodes carry (v1alpha1.LabelLent).
func (a *Agent) args(target Target) []string {
	if target.IsHost() {
		return a.cfg.HostArgs
	}
	d := a.cfg.TenantDir
	return []string{
		"--config=" + filepath.Join(d, "kubelet.yaml"),
		"--kubeconfig=" + filepath.Join(d, "kubeconfig"),
		"--bootstrap-kubeconfig=" + filepath.Join(d, "bootstrap-kubeconfig"),
		"--cert-dir=" + filepath.Join(d, "pki"),
		"--node-labels=" + v1alpha1.LabelLent + "=true",
	}
}

// TenantKubeletConfig derives the kubelet's configuration for a tenant from the host's: the
// same node settings, with the tenant's CA for its apiserver's client certificate, the
// tenant's cluster DNS, client certificate rotation on, no static pods, and nothing of the
// machine's own served to the tenant: no system log handler (nodes/proxy would read the host's
// /var/log) and no read-only port.
func TenantKubeletConfig(base []byte, caPath, clusterDNS, clusterDomain string) ([]byte, error) {
	cfg := map[string]any{}
	if err := yaml.Unmarshal(base, &cfg); err != nil {
		return nil, fmt.Errorf("reading the kubelet configuration: %w", err)
	}
	auth, _ := cfg["authentication"].(map[string]any)
	if auth == nil {
		auth = map[string]any{}
	}
	x509, _ := auth["x509"].(map[string]any)
	if x509 == nil {
		x509 = map[string]any{}
	}
	x509["clientCAFile"] = caPath
	auth["x509"] = x509
	cfg["authentication"] = auth
	if clusterDNS != "" {
		cfg["clusterDNS"] = []string{clusterDNS}
	}
	if clusterDomain != "" {
		cfg["clusterDomain"] = clusterDomain
	}
	cfg["rotateCertificates"] = true
	// The host's static pods are the host's: a lent node does not run them for the tenant.
	delete(cfg, "staticPodPath")
	cfg["enableSystemLogHandler"] = false
	cfg["enableSystemLogQuery"] = false
	cfg["readOnlyPort"] = 0
	return yaml.Marshal(cfg)
}

// report writes the agent's status into its PoolNode when it changed, or a heartbeat is due.
// It only touches status.agent.
func (a *Agent) report(ctx context.Context, step, message string) {
	if a.noPoolNode {
		return
	}
	state, err := Load(a.cfg.StateFile)
	if err != nil {
		message = err.Error()
	}
	st := v1alpha1.AgentStatus{
		Cluster: state.Current.Cluster, TenantUID: state.Current.UID,
		Step: step, Message: message, Version: a.cfg.Version,
	}
	now := time.Now()
	if st == a.lastReport && now.Sub(a.lastReportTime) < heartbeat {
		return
	}
	// Every field is written, empty ones too: a merge patch leaves out what it omits.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"agent": map[string]any{
		"cluster": st.Cluster, "tenantUID": st.TenantUID, "step": st.Step, "message": st.Message,
		"version": st.Version, "heartbeatTime": metav1.NewTime(now),
	}}})
	if err != nil {
		return
	}
	pn := &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName}}
	if err := a.host.Status().Patch(ctx, pn, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if !apierrors.IsNotFound(err) {
			klog.FromContext(ctx).Error(err, "reporting to the PoolNode")
		}
		return
	}
	a.lastReport, a.lastReportTime = st, now
}
