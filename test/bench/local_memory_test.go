//go:build benchlocal

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// TestIdleProcessMemory runs an idle tenant control plane as processes of this machine (the
// smoke test's harness: the operator's own certificates and flags) once per variant, and
// reports each process's memory after it has been idle; no cluster needed. It shows what a
// Go runtime setting or a component flag would save before anyone changes the operator:
//
//	BENCH_IDLE=2m go test -tags benchlocal -run TestIdleProcessMemory -v -timeout 30m ./test/bench/
//
// BENCH_VARIANTS=baseline,GOGC=50 runs only those (comma-separated names).
//
// The variants run one after another, so each has the machine to itself.
func TestIdleProcessMemory(t *testing.T) {
	idle := 2 * time.Minute
	if v := os.Getenv("BENCH_IDLE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		idle = d
	}
	bin := testtenant.Binaries(t)
	variants := []struct {
		name      string
		env       map[string]string
		apiserver map[string]string
		kcm       map[string]string
		scheduler map[string]string
	}{
		{name: "baseline"},
		{name: "GOGC=50", env: map[string]string{"GOGC": "50"}},
		// As the operator runs them before idlegc (the collector paced while idle, the default).
		{name: "GOGC=50 KUBENEST_IDLE_GC=off", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "off"}},
		{name: "GOGC=50 KUBENEST_SHARED_ETCD=off", env: map[string]string{"GOGC": "50", "KUBENEST_SHARED_ETCD": "off"}},
		{name: "GOGC=50 KUBENEST_IDLE_GC=no-release", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "no-release"}},
		{name: "GOGC=50 KUBENEST_IDLE_GC=no-procs", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "no-procs"}},
		// Paced for a collection every 15 s (the default until 2026-11-29) or 30 s while idle
		// instead of 60 s.
		{name: "GOGC=50 KUBENEST_IDLE_GC=interval=15s", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "interval=15s"}},
		{name: "GOGC=50 KUBENEST_IDLE_GC=interval=30s", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "interval=30s"}},
		{name: "GOGC=50 KUBENEST_IDLE_GC=interval=60s", env: map[string]string{"GOGC": "50", "KUBENEST_IDLE_GC": "interval=60s"}},
		// Work queue metrics on (internal/workqueuemetrics turns them off by default): each named
		// queue's goroutine wakes every 500 ms.
		{name: "GOGC=50 KUBENEST_WORKQUEUE_METRICS=on", env: map[string]string{"GOGC": "50", "KUBENEST_WORKQUEUE_METRICS": "on"}},
		{name: "GOGC=25", env: map[string]string{"GOGC": "25"}},
		// A soft limit (every process gets it; only the apiserver's heap comes near it).
		{name: "GOMEMLIMIT=100MiB", env: map[string]string{"GOMEMLIMIT": "100MiB"}},
		{name: "apiserver --watch-cache=false", apiserver: map[string]string{"watch-cache": "false"}},
		{name: "GOGC=50 apiserver --watch-cache=false", env: map[string]string{"GOGC": "50"}, apiserver: map[string]string{"watch-cache": "false"}},
		// No watch cache for the resources an idle tenant's controllers watch but nobody lists
		// often (each cache wakes once a second); their watches then go to etcd.
		// The default leaves 22 rarely listed resources without a watch cache; this caches them.
		{name: "apiserver --watch-cache-sizes= (every resource cached)", apiserver: map[string]string{"watch-cache-sizes": ""}},
		{name: "apiserver --enable-priority-and-fairness=false", apiserver: map[string]string{"enable-priority-and-fairness": "false"}},
		// The apiserver counts every resource's objects in etcd once a minute (for APF's
		// estimate of a LIST's cost) and reads the database size every 30 s: no polling.
		// Measured 2026-11-27: no saving (58.0 millicores in all, 56.2 with polling).
		{name: "apiserver without etcd metric polling", apiserver: map[string]string{"etcd-count-metric-poll-period": "0", "etcd-db-metric-poll-interval": "0"}},
		// Not a saving: the apiserver's heap profile, in $BENCH_PPROF_DIR, says what the heap holds.
		{name: "apiserver --profiling=true", apiserver: map[string]string{"profiling": "true"}},
		{name: "controller-manager --concurrent-gc-syncs=1 --controllers=*,bootstrapsigner,tokencleaner,-horizontalpodautoscaling,-cronjob,-ttl-after-finished,-resourcequota",
			kcm: map[string]string{"concurrent-gc-syncs": "1", "controllers": "*,bootstrapsigner,tokencleaner,-horizontalpodautoscaling,-cronjob,-ttl-after-finished,-resourcequota"}},
		// Upstream's default: a peer endpoint lease written to etcd every 10 s (the operator
		// turns the gate off; pkg/controlplane apiServerFlags says why).
		{name: "apiserver peer endpoint leases", apiserver: map[string]string{"feature-gates": "DetectCacheInconsistency=false,UnknownVersionInteroperabilityProxy=true"}},
		// Upstream's default: every cached resource listed from etcd every 5 to 7.5 minutes
		// to check its watch cache.
		{name: "apiserver watch cache consistency checks", apiserver: map[string]string{"feature-gates": "DetectCacheInconsistency=true,UnknownVersionInteroperabilityProxy=false"}},
		// The controllers' lease as a control plane of several replicas has it, renewed every
		// 3 s (a lone one, the default, renews it every 8 s).
		{name: "lease renewed every 3s (several replicas)", kcm: haLease},
	}
	var report []string
	for _, v := range variants {
		if !variantSelected(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			for k, val := range v.env {
				t.Setenv(k, val) // the processes inherit this test's environment
			}
			vc := testtenant.VirtualCluster("bench", "6b1f7a52-0000-4000-8000-0000000000b1")
			vc.Spec.ControlPlane.APIServer.ExtraArgs = v.apiserver
			vc.Spec.ControlPlane.ControllerManager.ExtraArgs = v.kcm
			vc.Spec.ControlPlane.Scheduler.ExtraArgs = v.scheduler
			tenant, cfg := testtenant.RunStandalone(t, bin, vc)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := tenant.WaitReady(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			ready := time.Since(tenant.Started)
			cpuBefore := map[string]int64{}
			for _, p := range tenant.Processes {
				cpuBefore[p.Name] = cpuTicks(t, p)
			}
			idleStart := time.Now()
			time.Sleep(idle)
			idleFor := time.Since(idleStart)
			if dir := os.Getenv("BENCH_PPROF_DIR"); dir != "" && v.apiserver["profiling"] == "true" {
				rest := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()
				for _, p := range []struct{ file, profile, param, value string }{
					{"apiserver.heap", "heap", "gc", "1"},
					{"apiserver.goroutines", "goroutine", "debug", "1"},
				} {
					b, err := rest.Get().AbsPath("/debug/pprof/"+p.profile).Param(p.param, p.value).DoRaw(context.Background())
					if err != nil {
						t.Fatalf("%s profile: %v", p.profile, err)
					}
					if err := os.WriteFile(filepath.Join(dir, p.file), b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			line := fmt.Sprintf("%-40s ready %5.1fs", v.name, ready.Seconds())
			var anon, rss int64
			var cpu float64
			for _, p := range tenant.Processes {
				if p.Exited() {
					t.Fatalf("%s exited:\n%s", p.Name, p.Tail())
				}
				st, err := p.MemoryKiB()
				if err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				anon += st["RssAnon"]
				rss += st["VmRSS"]
				milli := float64(cpuTicks(t, p)-cpuBefore[p.Name]) * 1000 / clockTicks / idleFor.Seconds()
				cpu += milli
				line += fmt.Sprintf(" | %s anon %3d rss %3d cpu %4.1fm", p.Name, st["RssAnon"]/1024, st["VmRSS"]/1024, milli)
			}
			line += fmt.Sprintf(" | sum anon %3d rss %3d MiB cpu %4.1fm", anon/1024, rss/1024, cpu)
			t.Log(line)
			report = append(report, line)
		})
	}
	t.Logf("after %s idle (MiB; anon = RssAnon, rss = VmRSS incl. the binary's file pages; cpu = millicores while idle):\n%s", idle, strings.Join(report, "\n"))
}

// haLease is the controllers' lease of a control plane of several replicas: renewed every
// 3 s, given up after 10 s without renewing, taken over 13 s after the last renewal.
var haLease = map[string]string{"leader-elect-retry-period": "3s", "leader-elect-renew-deadline": "10s", "leader-elect-lease-duration": "13s"}

// clockTicks is the unit of /proc/<pid>/stat's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTicks is the CPU time (user + system, in clock ticks) of the process this test started for p.
func cpuTicks(t *testing.T, p *testtenant.Process) int64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after its ")"; utime and
	// stime are the 14th and 15th fields, the 12th and 13th after it.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}

// variantSelected says whether a local benchmark runs its variant of this name:
// BENCH_VARIANTS lists the names to run, comma-separated; empty runs them all.
func variantSelected(name string) bool {
	only := os.Getenv("BENCH_VARIANTS")
	return only == "" || strings.Contains(","+only+",", ","+name+",")
}
