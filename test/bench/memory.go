package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// components of a tenant, by container name, in the order the table shows them.
var components = []string{
	controlplane.ContainerEtcd, controlplane.ContainerAPIServer, controlplane.ContainerControllers,
	controlplane.ContainerDNS,
}

// usage is one container's memory and CPU.
type usage struct {
	workingSet, rss uint64  // bytes
	cpu             float64 // cores: the kubelet's last figure, or an average (averageCPU)
	cpuSeconds      float64 // core-seconds used since the container started, read at
	at              time.Time
	fromCgroup      bool
}

// cpuWindow is how long a CPU figure averages over: the kubelet's instant figure moves by half
// from one reading to the next on an idle container, its cumulative counter does not.
const cpuWindow = time.Minute

// cpuSince is u's CPU averaged since the earlier reading b, from the kubelet's cumulative
// counters; u's instant figure when they cannot say (no counter, a restarted container).
func (u usage) cpuSince(b usage) float64 {
	if u.at.After(b.at) && u.cpuSeconds >= b.cpuSeconds && b.cpuSeconds > 0 {
		return (u.cpuSeconds - b.cpuSeconds) / u.at.Sub(b.at).Seconds()
	}
	return u.cpu
}

// averageCPU sets the CPU of each container in after to its average since before (cpuSince).
// A container not in both keeps its instant figure.
func averageCPU(before, after map[string]usage) {
	for c, a := range after {
		if b, ok := before[c]; ok {
			a.cpu = a.cpuSince(b)
			after[c] = a
		}
	}
}

// usageOver reads what read reports twice, cpuWindow apart, and returns the second reading
// with each container's CPU averaged over the window.
func usageOver(ctx context.Context, read func() (map[string]usage, error)) (map[string]usage, error) {
	before, err := read()
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, cpuWindow); err != nil {
		return nil, err
	}
	after, err := read()
	if err != nil {
		return nil, err
	}
	averageCPU(before, after)
	return after, nil
}

const mib = 1 << 20

// memory creates idle tenants, leaves them alone, and reports what each of their components
// uses.
func memory(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("memory", flag.ExitOnError)
	tenants := fs.Int("tenants", 2, "idle tenants to measure (the figures are medians over them)")
	idle := fs.Duration("idle", 2*time.Minute, "how long the tenants are left idle before they are measured")
	var extra componentArgs
	extra.register(fs)
	_ = fs.Parse(args)
	ns, cleanup, err := namespace(ctx, e, "bench-memory")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var vcs []*v1alpha1.VirtualCluster
	for i := range *tenants {
		vc := benchVC(ns, fmt.Sprintf("idle-%d", i))
		extra.apply(vc)
		if _, err := readyTenant(ctx, e, vc, 5*time.Minute); err != nil {
			return nil, err
		}
		vcs = append(vcs, vc)
	}
	return idleMemory(ctx, e, vcs, *idle, extra.String())
}

// idleMemory waits until the youngest of the tenants has been Ready for idle, then samples
// the kubelets' stats of their containers four times, 20 s apart, and reports per component
// the median over tenants of each container's median memory over samples and its CPU averaged
// from the first sample to the last.
func idleMemory(ctx context.Context, e *env, vcs []*v1alpha1.VirtualCluster, idle time.Duration, variant string) ([]Figure, error) {
	fmt.Printf("leaving %d tenants idle for %s...\n", len(vcs), idle)
	if err := sleep(ctx, idle); err != nil {
		return nil, err
	}
	type key struct{ vc, container string }
	samples := map[key][]usage{}
	cgroupFallback := false
	for i := range 4 {
		if i > 0 {
			if err := sleep(ctx, cpuWindow/3); err != nil {
				return nil, err
			}
		}
		for _, vc := range vcs {
			got, err := tenantUsage(ctx, e, vc)
			if err != nil {
				return nil, err
			}
			for c, u := range got {
				samples[key{vc.Name, c}] = append(samples[key{vc.Name, c}], u)
				cgroupFallback = cgroupFallback || u.fromCgroup
			}
		}
	}
	// Per tenant and container: the median sample. Per component: the median tenant.
	perComponent := map[string][]usage{}
	var sums []usage
	for _, vc := range vcs {
		var sum usage
		for _, c := range components {
			s := samples[key{vc.Name, c}]
			if len(s) == 0 {
				return nil, fmt.Errorf("%s: no stats for container %s", vc.Name, c)
			}
			m := medianUsage(s)
			m.cpu = s[len(s)-1].cpuSince(s[0])
			perComponent[c] = append(perComponent[c], m)
			sum.workingSet += m.workingSet
			sum.rss += m.rss
			sum.cpu += m.cpu
		}
		sums = append(sums, sum)
	}
	source := "the kubelet's /stats/summary through the host apiserver's node proxy (what kubectl top reads)"
	if cgroupFallback {
		source += "; where the kubelet had no figure for a container, its cgroup (memory.usage_in_bytes - total_inactive_file; total_rss)"
	}
	method := fmt.Sprintf("%d idle tenants (no objects of their own, no nodes) %s after the last was Ready; each container sampled 4 times 20 s apart, median sample (CPU: the average from the first to the last), median tenant; working set = usage - inactive file pages, RSS = anonymous memory; from %s%s", len(vcs), idle, source, variant)
	var figures []Figure
	for _, c := range append(slices.Clone(components), "sum") {
		us := perComponent[c]
		if c == "sum" {
			us = sums
		}
		m := medianUsage(us)
		figures = append(figures,
			Figure{"idle tenant working set: " + c, float64(m.workingSet) / mib, "MiB", method},
			Figure{"idle tenant RSS: " + c, float64(m.rss) / mib, "MiB", method},
			Figure{"idle tenant CPU: " + c, m.cpu * 1000, "millicores", method})
	}
	return figures, nil
}

// medianUsage is, field by field, the median of us.
func medianUsage(us []usage) usage {
	ws, rss, cpu := make([]uint64, len(us)), make([]uint64, len(us)), make([]float64, len(us))
	for i, u := range us {
		ws[i], rss[i], cpu[i] = u.workingSet, u.rss, u.cpu
	}
	slices.Sort(ws)
	slices.Sort(rss)
	slices.Sort(cpu)
	return usage{workingSet: ws[len(ws)/2], rss: rss[len(rss)/2], cpu: cpu[len(cpu)/2]}
}

// tenantUsage reads what each container of a tenant's host pods uses, by container name,
// from the kubelets that run them: its control plane's, in its control-plane namespace (as the
// host's VirtualCluster says), and its shared-node pods', in its own.
func tenantUsage(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster) (map[string]usage, error) {
	got := &v1alpha1.VirtualCluster{}
	if err := e.host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		return nil, err
	}
	var pods []corev1.Pod
	for _, ns := range slices.Compact([]string{controlplane.Namespace(got), vc.Namespace}) {
		l := &corev1.PodList{}
		if err := e.host.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}); err != nil {
			return nil, err
		}
		pods = append(pods, l.Items...)
	}
	return podsUsage(ctx, e, pods)
}

// podsUsage is what each container of the running pods uses, by container name, from the
// kubelet's stats or, where they have none, the container's cgroup.
func podsUsage(ctx context.Context, e *env, pods []corev1.Pod) (map[string]usage, error) {
	out := map[string]usage{}
	summaries := map[string]*statsv1alpha1.Summary{}
	for _, p := range pods {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		node := p.Spec.NodeName
		if _, ok := summaries[node]; !ok {
			s, err := nodeSummary(ctx, e, node)
			if err != nil {
				return nil, err
			}
			summaries[node] = s
		}
		var ps *statsv1alpha1.PodStats
		for i := range summaries[node].Pods {
			if summaries[node].Pods[i].PodRef.UID == string(p.UID) {
				ps = &summaries[node].Pods[i]
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			var u usage
			var ok bool
			if ps != nil {
				u, ok = fromSummary(ps, cs.Name)
			}
			if !ok {
				var err error
				if u, err = fromCgroup(node, string(p.UID), cs.ContainerID); err != nil {
					return nil, fmt.Errorf("%s/%s container %s: no stats from the kubelet, and %w", p.Namespace, p.Name, cs.Name, err)
				}
			}
			out[cs.Name] = u
		}
	}
	return out, nil
}

func nodeSummary(ctx context.Context, e *env, node string) (*statsv1alpha1.Summary, error) {
	raw, err := e.hostCS.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("stats of node %s: %w", node, err)
	}
	s := &statsv1alpha1.Summary{}
	if err := json.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("stats of node %s: %w", node, err)
	}
	return s, nil
}

func fromSummary(ps *statsv1alpha1.PodStats, container string) (usage, bool) {
	for _, c := range ps.Containers {
		if c.Name != container || c.Memory == nil || c.Memory.WorkingSetBytes == nil {
			continue
		}
		u := usage{workingSet: *c.Memory.WorkingSetBytes}
		if c.Memory.RSSBytes != nil {
			u.rss = *c.Memory.RSSBytes
		}
		if c.CPU != nil && c.CPU.UsageNanoCores != nil {
			u.cpu = float64(*c.CPU.UsageNanoCores) / 1e9
		}
		if c.CPU != nil && c.CPU.UsageCoreNanoSeconds != nil {
			u.cpuSeconds, u.at = float64(*c.CPU.UsageCoreNanoSeconds)/1e9, c.CPU.Time.Time
		}
		return u, true
	}
	return usage{}, false
}

// memoryCgroups is the cgroup v1 memory hierarchy.
var memoryCgroups = "/sys/fs/cgroup/memory"

// fromCgroup reads a container's memory from its cgroup (v1, as the local cluster's kubelets
// use, each with the node's name as cgroup root). It works only on the machine that runs the
// node, which for the local cluster is this one.
func fromCgroup(node, podUID, containerID string) (usage, error) {
	_, id, _ := strings.Cut(containerID, "://")
	if id == "" {
		return usage{}, fmt.Errorf("no container ID")
	}
	var dir string
	for _, pattern := range []string{"%s/%s/kubepods/pod%s/%s", "%s/%s/kubepods/*/pod%s/%s"} {
		m, _ := filepath.Glob(fmt.Sprintf(pattern, memoryCgroups, node, podUID, id))
		if len(m) == 1 {
			dir = m[0]
		}
	}
	if dir == "" {
		return usage{}, fmt.Errorf("no cgroup of container %s under %s/%s", id, memoryCgroups, node)
	}
	read := func(f string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		return string(b), err
	}
	raw, err := read("memory.usage_in_bytes")
	if err != nil {
		return usage{}, err
	}
	total, err := strconv.ParseUint(strings.TrimSpace(raw), 10, 64)
	if err != nil {
		return usage{}, err
	}
	stat, err := read("memory.stat")
	if err != nil {
		return usage{}, err
	}
	fields := map[string]uint64{}
	for _, l := range strings.Split(stat, "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			fields[k], _ = strconv.ParseUint(v, 10, 64)
		}
	}
	u := usage{workingSet: total, rss: fields["total_rss"], fromCgroup: true}
	if inactive := fields["total_inactive_file"]; inactive < total {
		u.workingSet = total - inactive
	}
	return u, nil
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
