package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// densityResult is what the density benchmark leaves: its figures and the tenants it created,
// still running, so that `all` can measure their memory when they have been idle.
type densityResult struct {
	figures []Figure
	tenants []*v1alpha1.VirtualCluster
	before  meminfo // the host's memory before the first tenant
}

// density creates idle tenants one by one until one is not Ready in time, the host runs short
// of memory, or the cap is reached.
func density(ctx context.Context, e *env, args []string) ([]Figure, error) {
	opts := parseDensity(args) // before anything is made: --help exits here
	ns, cleanup, err := namespace(ctx, e, "bench-density")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	r, err := runDensity(ctx, e, ns, opts)
	return r.figures, err
}

type densityOptions struct {
	limit        int
	timeout      time.Duration
	minAvailable int
	// asleep: the first this many tenants are put to sleep once Ready.
	asleep int
	idle   time.Duration
	// wakes: how many different sleeping tenants are woken, one after another, for the wake figures.
	wakes int
}

func parseDensity(args []string) densityOptions {
	fs := flag.NewFlagSet("density", flag.ExitOnError)
	limit := fs.Int("cap", 8, "at most this many tenants")
	timeout := fs.Duration("timeout", 3*time.Minute, "a tenant not Ready within this long ends the run")
	minAvailable := fs.Int("min-available-mib", 2048, "the run ends when the host has less memory available than this")
	asleep := fs.Int("asleep", 0, "put the first N tenants to sleep once Ready (each before the next is made); then, after --idle, report the operator's cost per tenant, the awake tenants' idle CPU, the host API's latency and the wakes of --wakes sleeping tenants")
	idle := fs.Duration("idle", 30*time.Second, "with --asleep: how long the tenants are left before they, the operator and the host are measured")
	wakes := fs.Int("wakes", 5, "with --asleep: wake this many different sleeping tenants, one after another, each put back to sleep before the next (the wake figures are their median and 90th percentile)")
	_ = fs.Parse(args)
	if *asleep < 0 || *asleep > *limit {
		fmt.Fprintf(os.Stderr, "density: --asleep=%d must be between 0 and --cap (%d)\n", *asleep, *limit)
		os.Exit(2)
	}
	if *wakes < 1 {
		fmt.Fprintf(os.Stderr, "density: --wakes=%d must be at least 1\n", *wakes)
		os.Exit(2)
	}
	return densityOptions{limit: *limit, timeout: *timeout, minAvailable: *minAvailable, asleep: *asleep, idle: *idle, wakes: *wakes}
}

func runDensity(ctx context.Context, e *env, ns string, opts densityOptions) (densityResult, error) {
	before, err := hostMemory()
	if err != nil {
		return densityResult{}, err
	}
	res := densityResult{before: before}
	var operatorBefore usage
	if opts.asleep > 0 {
		if operatorBefore, err = operatorUsage(ctx, e); err != nil {
			return res, err
		}
	}
	var first, last time.Duration
	stop := fmt.Sprintf("the cap (%d)", opts.limit)
	for i := range opts.limit {
		m, err := hostMemory()
		if err != nil {
			return res, err
		}
		if m.available < uint64(opts.minAvailable)*mib {
			stop = fmt.Sprintf("host memory available below %d MiB", opts.minAvailable)
			break
		}
		vc := benchVC(ns, fmt.Sprintf("dense-%d", i))
		start := time.Now()
		if _, err := readyTenant(ctx, e, vc, opts.timeout); err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			stop = fmt.Sprintf("tenant %d not Ready within %s", i+1, opts.timeout)
			break
		}
		d := time.Since(start)
		if i == 0 {
			first = d
		}
		last = d
		res.tenants = append(res.tenants, vc)
		fmt.Printf("  %d tenants Ready (the last in %.1fs); host memory available %d MiB\n", i+1, d.Seconds(), m.available/mib)
		if i < opts.asleep {
			if err := putToSleep(ctx, e, vc, opts.timeout); err != nil {
				return res, err
			}
		}
	}
	after, err := hostMemory()
	if err != nil {
		return res, err
	}
	load1 := loadAverage()
	n := len(res.tenants)
	method := fmt.Sprintf("tenants (NodePort, 1 etcd member on a claim of the default StorageClass) created one by one, each when the one before was Ready and answered, until %s; host memory from /proc/meminfo of this machine (the local cluster's nodes are its network namespaces), MemTotal - MemAvailable", stop)
	res.figures = []Figure{
		{"density: tenants Ready", float64(n), "tenants", method},
		{"density: host memory used before", float64(before.used()) / mib, "MiB", method},
		{"density: host memory used after", float64(after.used()) / mib, "MiB", method},
		{"density: host memory available after", float64(after.available) / mib, "MiB", method + fmt.Sprintf("; of %d MiB", after.total/mib)},
		{"density: load average (1 min) after", load1, "", "/proc/loadavg; this machine has " + strconv.Itoa(runtime.NumCPU()) + " cores"},
		{"density: create→answering, first tenant", first.Seconds(), "s", method},
		{"density: create→answering, last tenant", last.Seconds(), "s", method},
	}
	if n > 0 {
		res.figures = append(res.figures, Figure{"density: host memory per tenant", float64(int64(after.used())-int64(before.used())) / float64(n) / mib, "MiB", method + "; (used after - used before) / tenants: everything a tenant costs the host (its containers, their shims and sandboxes, the operator's share), measured right after the last was Ready"})
	}
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if opts.asleep > 0 && n > 0 {
		more, err := sleepingDensity(ctx, e, res.tenants, min(opts.asleep, n), operatorBefore, opts)
		res.figures = append(res.figures, more...)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// putToSleep sets the tenant's spec.sleep.asleep and waits until nothing of it runs.
func putToSleep(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster, timeout time.Duration) error {
	err := e.host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Namespace, Name: vc.Name}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"sleep":{"asleep":true}}}`)))
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.VirtualCluster{}
		return e.host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAsleep), nil
	})
	if err != nil {
		return fmt.Errorf("tenant %s not asleep within %s: %w", vc.Name, timeout, err)
	}
	return nil
}

// sleepingDensity measures a host that holds tenants of which the first asleep sleep: after
// opts.idle, the operator's cost per tenant, the awake ones' idle CPU and memory, the host
// API's latency, and the time a sleeping one takes to answer its first request.
func sleepingDensity(ctx context.Context, e *env, tenants []*v1alpha1.VirtualCluster, asleep int, operatorBefore usage, opts densityOptions) ([]Figure, error) {
	n, awake := len(tenants), len(tenants)-asleep
	fmt.Printf("%d tenants, %d of them asleep; leaving them for %s...\n", n, asleep, opts.idle)
	if err := sleep(ctx, opts.idle); err != nil {
		return nil, err
	}
	const operator = "kubenest-operator" // a key no tenant's container has: theirs are tenant/container
	use, err := usageOver(ctx, func() (map[string]usage, error) {
		op, err := operatorUsage(ctx, e)
		if err != nil {
			return nil, err
		}
		all := map[string]usage{operator: op}
		for _, vc := range tenants[asleep:] {
			use, err := tenantUsage(ctx, e, vc)
			if err != nil {
				return nil, err
			}
			for c, u := range use {
				all[vc.Name+"/"+c] = u
			}
		}
		return all, nil
	})
	if err != nil {
		return nil, err
	}
	op := use[operator]
	var awakeUse usage
	for c, u := range use {
		if c != operator {
			awakeUse.workingSet += u.workingSet
			awakeUse.cpu += u.cpu
		}
	}
	mem, err := hostMemory()
	if err != nil {
		return nil, err
	}
	// The host API as the operator and people use it: LISTs of the VirtualClusters.
	var lat []time.Duration
	for range 100 {
		start := time.Now()
		if err := e.host.List(ctx, &v1alpha1.VirtualClusterList{}, client.InNamespace(tenants[0].Namespace)); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	load1 := loadAverage()
	woke, err := wakeSome(ctx, e, tenants[:asleep], opts)
	if err != nil {
		return nil, err
	}
	method := fmt.Sprintf("%d tenants, %d asleep, %d awake and idle, measured after %s", n, asleep, awake, opts.idle)
	wakeMethod := fmt.Sprintf("%s; a LIST of namespaces on a new connection to a sleeping tenant, from the call to its answer, %d tenants spread over the sleeping ones, one after another, each put back to sleep before the next", method, len(woke))
	figures := []Figure{
		{"density: tenants asleep", float64(asleep), "tenants", method},
		{"density: tenants awake", float64(awake), "tenants", method},
		{"density: host memory available, tenants asleep", float64(mem.available) / mib, "MiB", method + "; /proc/meminfo MemAvailable"},
		{"density: operator memory per tenant", (float64(op.workingSet) - float64(operatorBefore.workingSet)) / float64(n) / mib, "MiB",
			method + "; (the operator pod's working set now - before the first tenant) / tenants, kubelet stats (target 2 MiB)"},
		{"density: operator CPU per tenant", op.cpu * 1000 / float64(n), "millicores", method + "; the operator pod's CPU over a minute / tenants, kubelet stats (target 1 millicore)"},
		{"density: host API LIST p99", percentile(lat, 0.99).Seconds() * 1000, "ms", method + "; 100 LISTs of the VirtualClusters of the benchmark's namespace, one after another (target under 1 s)"},
		{"density: load average (1 min) when measured", load1, "", method + "; /proc/loadavg, before the wakes"},
		{"density: a sleeping tenant's first request→answer, median", percentile(woke, 0.5).Seconds(), "s", wakeMethod + " (target 3 s)"},
		{"density: a sleeping tenant's first request→answer, p90", percentile(woke, 0.9).Seconds(), "s", wakeMethod},
	}
	if awake > 0 {
		figures = append(figures,
			Figure{"density: idle CPU per awake tenant", awakeUse.cpu * 1000 / float64(awake), "millicores", method + "; the awake tenants' containers' CPU over a minute, kubelet stats (target 15 millicores)"},
			Figure{"density: working set per awake tenant", float64(awakeUse.workingSet) / float64(awake) / mib, "MiB", method + "; the same, memory"})
	}
	return figures, nil
}

// wakeSome wakes opts.wakes of the sleeping tenants (spread evenly over them), one after
// another, each by a request through its kubeconfig, and puts each back to sleep before the
// next: how long each first request took, sorted.
func wakeSome(ctx context.Context, e *env, sleeping []*v1alpha1.VirtualCluster, opts densityOptions) ([]time.Duration, error) {
	count := min(opts.wakes, len(sleeping))
	var woke []time.Duration
	for i := range count {
		vc := sleeping[i*len(sleeping)/count]
		cfg, err := tenantConfig(ctx, e, vc)
		if err != nil {
			return nil, err
		}
		d, err := firstRequest(ctx, cfg, opts.timeout)
		if err != nil {
			return nil, fmt.Errorf("waking %s: %w", vc.Name, err)
		}
		fmt.Printf("  sleeping tenant %s answered its first request in %.1fs\n", vc.Name, d.Seconds())
		woke = append(woke, d)
		if err := waitAwake(ctx, e, vc, opts.timeout); err != nil {
			return nil, fmt.Errorf("%s not Ready after its wake: %w", vc.Name, err)
		}
		if err := putToSleep(ctx, e, vc, opts.timeout); err != nil {
			return nil, err
		}
	}
	slices.Sort(woke)
	return woke, nil
}

// loadAverage is this machine's load average over the last minute (0 if unreadable).
func loadAverage() float64 {
	raw, _ := os.ReadFile("/proc/loadavg")
	load, _ := strconv.ParseFloat(strings.Fields(string(raw) + " 0")[0], 64)
	return load
}

// operatorUsage is what the operator's pods use (kubelet stats).
func operatorUsage(ctx context.Context, e *env) (usage, error) {
	pods := &corev1.PodList{}
	if err := e.host.List(ctx, pods, client.InNamespace("kubenest-system")); err != nil {
		return usage{}, err
	}
	var ops []corev1.Pod
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Name, "kubenest-operator-") && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			ops = append(ops, p)
		}
	}
	if len(ops) == 0 {
		return usage{}, errors.New("no running kubenest-operator pod in kubenest-system")
	}
	use, err := podsUsage(ctx, e, ops)
	if err != nil {
		return usage{}, err
	}
	var total usage
	for _, u := range use {
		total.workingSet += u.workingSet
		total.cpu += u.cpu
		total.cpuSeconds += u.cpuSeconds
		total.at = u.at
	}
	return total, nil
}

type meminfo struct{ total, available uint64 }

func (m meminfo) used() uint64 { return m.total - m.available }

func hostMemory() (meminfo, error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return meminfo{}, err
	}
	var m meminfo
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			m.total = kb << 10
		case "MemAvailable:":
			m.available = kb << 10
		}
	}
	if m.total == 0 || m.available == 0 {
		return m, errors.New("/proc/meminfo has no MemTotal or MemAvailable")
	}
	return m, nil
}
