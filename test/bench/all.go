package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// all runs every benchmark, with sizes for a small machine (the 2-core one BENCHMARKS.md
// describes: about 15 minutes), and create once more at the end, on the host the others
// used. A benchmark that fails is reported and the others still run.
func all(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("all", flag.ExitOnError)
	count := fs.Int("count", 10, "create: VirtualClusters per series")
	pods := fs.Int("pods", 200, "throughput: pods per Deployment")
	limit := fs.Int("cap", 8, "density: at most this many tenants")
	idle := fs.Duration("idle", 2*time.Minute, "memory: how long the density tenants are left idle before they are measured")
	_ = fs.Parse(args)

	var figures []Figure
	var errs []error
	run := func(name string, f func() ([]Figure, error)) {
		if ctx.Err() != nil {
			return
		}
		start := time.Now()
		fmt.Printf("== %s\n", name)
		got, err := f()
		figures = append(figures, got...)
		if err != nil {
			fmt.Printf("== %s failed after %s: %v\n", name, time.Since(start).Round(time.Second), err)
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
			return
		}
		fmt.Printf("== %s took %s\n", name, time.Since(start).Round(time.Second))
	}
	run("create", func() ([]Figure, error) { return createReady(ctx, e, []string{fmt.Sprintf("--count=%d", *count)}) })
	run("latency", func() ([]Figure, error) { return apiLatency(ctx, e, nil) })
	run("promotion", func() ([]Figure, error) { return promotion(ctx, e, nil) })
	run("snapshot", func() ([]Figure, error) { return snapshotRestore(ctx, e, nil) })
	run("sleep", func() ([]Figure, error) { return sleepWake(ctx, e, nil) })
	// The density tenants, once idle, are the ones whose memory is measured.
	run("density and memory", func() ([]Figure, error) {
		opts := parseDensity([]string{fmt.Sprintf("--cap=%d", *limit)})
		ns, cleanup, err := namespace(ctx, e, "bench-density")
		if err != nil {
			return nil, err
		}
		defer cleanup()
		d, err := runDensity(ctx, e, ns, opts)
		if err != nil {
			return d.figures, err
		}
		if len(d.tenants) == 0 {
			return d.figures, errors.New("no tenant became Ready")
		}
		mem, err := idleMemory(ctx, e, d.tenants, *idle, "")
		figures := append(d.figures, mem...)
		if err != nil {
			return figures, err
		}
		after, err := hostMemory()
		if err != nil {
			return figures, err
		}
		return append(figures, Figure{"density: host memory per tenant, idle", float64(int64(after.used())-int64(d.before.used())) / float64(len(d.tenants)) / mib, "MiB",
			fmt.Sprintf("(host memory used after %s idle - before the first tenant) / %d tenants, from /proc/meminfo (MemTotal - MemAvailable)", *idle, len(d.tenants))}), nil
	})
	run("throughput", func() ([]Figure, error) { return throughput(ctx, e, []string{fmt.Sprintf("--pods=%d", *pods)}) })
	// Last, on the host the runs above have just used (tenants, hundreds of pods and Services
	// come and gone; throughput waits until the nodes are done with its pods): create→Ready
	// there, against the first run's on the host as it was. What the host keeps of them shows
	// here; the tail of their teardown does not.
	run("create after the others", func() ([]Figure, error) {
		got, err := createReady(ctx, e, []string{"--count=5", "--series=sequential"})
		for i := range got {
			got[i].Name = strings.Replace(got[i].Name, ", sequential,", ", sequential, after the other benchmarks,", 1)
			got[i].Method += "; after the other benchmarks of this run (throughput last, once the host's nodes were done with its pods), on the host they used"
		}
		return got, err
	})
	return figures, errors.Join(append(errs, ctx.Err())...)
}
