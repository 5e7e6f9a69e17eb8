//go:build benchlocal

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// TestListLatency runs a tenant control plane as processes of this machine (as
// TestIdleProcessMemory does) once per variant of the components' environment, fills a
// namespace with 1,000 ConfigMaps of 1 KiB and times LISTs of it and GETs of one of them from
// this process: what a runtime setting of KubeNest's costs a busy apiserver, without the
// cluster's network in the way.
//
//	go test -tags benchlocal -run TestListLatency -v -timeout 30m ./test/bench/
//
// BENCH_VARIANTS=default,... runs only those (comma-separated names).
func TestListLatency(t *testing.T) {
	bin := testtenant.Binaries(t)
	variants := []struct {
		name string
		env  map[string]string
	}{
		// Every variant runs with GOGC=50, as the operator's pods do.
		{name: "default"},
		{name: "KUBENEST_SHARED_ETCD=off", env: map[string]string{"KUBENEST_SHARED_ETCD": "off"}},
		{name: "KUBENEST_IDLE_GC=no-release", env: map[string]string{"KUBENEST_IDLE_GC": "no-release"}},
		{name: "KUBENEST_IDLE_GC=no-procs", env: map[string]string{"KUBENEST_IDLE_GC": "no-procs"}},
		{name: "KUBENEST_IDLE_GC=off", env: map[string]string{"KUBENEST_IDLE_GC": "off"}},
	}
	const objects, lists, gets = 1000, 50, 500
	var report []string
	for _, v := range variants {
		if !variantSelected(v.name) {
			continue
		}
		t.Run(v.name, func(t *testing.T) {
			t.Setenv("GOGC", "50")
			for k, val := range v.env {
				t.Setenv(k, val) // the processes inherit this test's environment
			}
			tenant, cfg := testtenant.RunStandalone(t, bin, testtenant.VirtualCluster("bench", "6b1f7a52-0000-4000-8000-0000000000b3"))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if err := tenant.WaitReady(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
			c := kubernetes.NewForConfigOrDie(cfg)
			ns := "bench-list"
			if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			data := map[string]string{"data": strings.Repeat("x", 1024)}
			for i := range objects {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: data}
				if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			timed := func(n int, call func() error) (p50, p99 time.Duration) {
				d := make([]time.Duration, n)
				for i := range d {
					start := time.Now()
					if err := call(); err != nil {
						t.Fatal(err)
					}
					d[i] = time.Since(start)
				}
				slices.Sort(d)
				return percentile(d, 0.5), percentile(d, 0.99)
			}
			g50, g99 := timed(gets, func() error {
				_, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "cm-0000", metav1.GetOptions{})
				return err
			})
			l50, l99 := timed(lists, func() error {
				l, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
				// objects, and the namespace's kube-root-ca.crt once the controller-manager wrote it.
				if err == nil && len(l.Items) != objects && len(l.Items) != objects+1 {
					err = fmt.Errorf("listed %d ConfigMaps, want %d", len(l.Items), objects)
				}
				return err
			})
			line := fmt.Sprintf("%-30s GET p50 %5.2f p99 %5.2f ms | LIST %d p50 %6.2f p99 %6.2f ms",
				v.name, ms(g50), ms(g99), objects, ms(l50), ms(l99))
			t.Log(line)
			report = append(report, line)
		})
	}
	t.Logf("from this process, sequential, GOGC=50:\n%s", strings.Join(report, "\n"))
}
