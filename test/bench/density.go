package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

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
}

func parseDensity(args []string) densityOptions {
	fs := flag.NewFlagSet("density", flag.ExitOnError)
	limit := fs.Int("cap", 8, "at most this many tenants")
	timeout := fs.Duration("timeout", 3*time.Minute, "a tenant not Ready within this long ends the run")
	minAvailable := fs.Int("min-available-mib", 2048, "the run ends when the host has less memory available than this")
	_ = fs.Parse(args)
	return densityOptions{limit: *limit, timeout: *timeout, minAvailable: *minAvailable}
}

func runDensity(ctx context.Context, e *env, ns string, opts densityOptions) (densityResult, error) {
	before, err := hostMemory()
	if err != nil {
		return densityResult{}, err
	}
	res := densityResult{before: before}
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
	}
	after, err := hostMemory()
	if err != nil {
		return res, err
	}
	load, _ := os.ReadFile("/proc/loadavg")
	load1, _ := strconv.ParseFloat(strings.Fields(string(load) + " 0")[0], 64)
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
	return res, nil
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
