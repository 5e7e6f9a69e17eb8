package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// readyRun is one VirtualCluster's way to Ready: when each step was first seen, from its
// creation (see steps).
type readyRun struct {
	at map[string]time.Duration
}

// createReady creates VirtualClusters, one after another and then all at once, and measures
// the time from create to Ready, split by step.
func createReady(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	count := fs.Int("count", 10, "VirtualClusters per series")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long one VirtualCluster may take to be Ready")
	settle := fs.Duration("settle", 5*time.Second, "after a tenant is deleted, how long the host gets to finish tearing it down (containers, network, kube-proxy rules) before the next creation")
	type seriesSpec struct {
		flag, name, prefix string
		concurrent         bool
		ephemeral          bool
	}
	allSeries := []seriesSpec{
		{"sequential", "sequential", "seq", false, false},
		{"ephemeral", "sequential, ephemeral etcd", "eph", false, true},
		{"concurrent", "concurrent", "con", true, false},
	}
	only := fs.String("series", "sequential,ephemeral,concurrent", "which series to run, comma-separated: sequential, ephemeral (sequential with etcd on an emptyDir), concurrent (all --count at once: the burst)")
	var extra componentArgs
	extra.register(fs)
	_ = fs.Parse(args)
	var chosen []seriesSpec
	for _, name := range strings.Split(*only, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(allSeries, func(s seriesSpec) bool { return s.flag == name })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "create: --series: %q is not one of sequential, ephemeral, concurrent\n", name)
			os.Exit(2)
		}
		chosen = append(chosen, allSeries[i])
	}
	ns, cleanup, err := namespace(ctx, e, "bench-create")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	t, err := newTracker(ctx, e, ns)
	if err != nil {
		return nil, err
	}
	defer t.close()

	var figures []Figure
	medians := map[string]time.Duration{}
	for _, series := range chosen {
		fmt.Printf("creating %d VirtualClusters, %s...\n", *count, series.name)
		runs, notReady, err := createSeries(ctx, e, t, ns, series.prefix, *count, series.concurrent, series.ephemeral, *timeout, *settle, &extra)
		if err != nil {
			return nil, err
		}
		storage := "on a volume claim of the default StorageClass (on the local cluster, local-path: a directory its local volumes process makes)"
		if series.ephemeral {
			storage = "on an emptyDir (etcd.storage.ephemeral)"
		}
		method := fmt.Sprintf("%d VirtualClusters (NodePort, 1 etcd member %s) created %s (the tenants before deleted and %s given to the host to finish tearing them down); from the create call to the step first seen by a watch of the host (conditions of the VirtualCluster; its etcd and control-plane pods); the first kubectl call is the first successful namespace list with the kubeconfig Secret, retried every 50 ms%s", *count, storage, map[bool]string{false: "one after another, each alone on the host", true: "at once"}[series.concurrent], *settle, extra.String())
		for _, s := range steps {
			var ds []time.Duration
			for _, r := range runs {
				if d, ok := r.at[s]; ok {
					ds = append(ds, d)
				}
			}
			slices.Sort(ds)
			if s == stepReady {
				medians[series.prefix] = percentile(ds, 0.5)
			}
			figures = append(figures,
				Figure{fmt.Sprintf("create→%s, %s, median", s, series.name), seconds(percentile(ds, 0.5)), "s", method},
				Figure{fmt.Sprintf("create→%s, %s, p90", s, series.name), seconds(percentile(ds, 0.9)), "s", method})
			if s == stepReady && series.concurrent && len(ds) > 0 && notReady == 0 {
				figures = append(figures, Figure{fmt.Sprintf("create→Ready, %s, all %d Ready", series.name, *count), seconds(ds[len(ds)-1]), "s",
					method + "; the slowest of the burst (issue 23's target for 30 at once: 3 minutes)"})
			}
			if s == stepReady && series.concurrent {
				figures = append(figures, Figure{fmt.Sprintf("create→Ready, %s, Ready within %s", series.name, *timeout), float64(*count - notReady), "tenants",
					method + fmt.Sprintf("; of %d; the medians and p90s above are of these", *count)})
			}
		}
	}
	if medians["eph"] > 0 {
		figures = append(figures, Figure{"create→Ready, sequential, volume claim / ephemeral etcd, median", medians["seq"].Seconds() / medians["eph"].Seconds(), "ratio",
			"the sequential series' create→Ready medians: etcd on a volume claim (the default) over etcd on an emptyDir"})
	}
	return figures, nil
}

// createSeries creates count tenants, one after another or all at once, and returns when
// each was Ready. One not Ready within timeout ends a sequential series with an error; in a
// concurrent one (a burst) the others are still reported, and notReady counts those that
// were not.
func createSeries(ctx context.Context, e *env, t *tracker, ns, prefix string, count int, concurrent, ephemeral bool, timeout, settle time.Duration, extra *componentArgs) (runs []readyRun, notReady int, err error) {
	// The deleted tenants' pods are gone from the API before their containers and network are.
	if err := sleep(ctx, settle); err != nil {
		return nil, 0, err
	}
	runs = make([]readyRun, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if concurrent {
			wg.Go(func() { runs[i], errs[i] = createOne(ctx, e, t, ns, name, ephemeral, timeout, extra) })
			continue
		}
		runs[i], errs[i] = createOne(ctx, e, t, ns, name, ephemeral, timeout, extra)
		if errs[i] != nil {
			break
		}
		// Each tenant of the sequential series has the host to itself: the one before goes first.
		deleteTenants(e, ns, name)
		fmt.Printf("  %s Ready in %.1fs\n", name, runs[i].at[stepReady].Seconds())
		if i < count-1 {
			if errs[i] = sleep(ctx, settle); errs[i] != nil {
				break
			}
		}
	}
	wg.Wait()
	// The tenants go before the next series starts, so each series has the host to itself.
	deleteTenants(e, ns)
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, err)
			runs[i] = readyRun{} // not counted in the figures
		}
	}
	switch {
	case len(failed) == 0:
		return runs, 0, nil
	case !concurrent || len(failed) == count || ctx.Err() != nil:
		return nil, 0, errors.Join(failed...)
	}
	fmt.Printf("  %d of %d Ready within %s; not Ready: %v\n", count-len(failed), count, timeout, errors.Join(failed...))
	return runs, len(failed), nil
}

// deleteTenants deletes the named VirtualClusters of ns, or all of them when no name is given,
// and waits until they are gone.
func deleteTenants(e *env, ns string, names ...string) {
	ctx := context.Background()
	if len(names) == 0 {
		_ = e.host.DeleteAllOf(ctx, &v1alpha1.VirtualCluster{}, client.InNamespace(ns))
	}
	for _, n := range names {
		_ = e.host.Delete(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}})
	}
	left := 0
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l := &v1alpha1.VirtualClusterList{}
		if e.host.List(ctx, l, client.InNamespace(ns)) != nil {
			return false, nil
		}
		for _, vc := range l.Items {
			if len(names) == 0 || slices.Contains(names, vc.Name) {
				return false, nil
			}
		}
		left = len(l.Items)
		return true, nil
	})
	if left == 0 {
		// The namespace's last tenant took its control-plane namespace with it; the next
		// tenant is measured making it again, not waiting for this one to go.
		waitControlPlaneNamespaceGone(e, ns)
	}
}

// createOne creates a VirtualCluster and follows it to Ready and a first answer from its API.
func createOne(ctx context.Context, e *env, t *tracker, ns, name string, ephemeral bool, timeout time.Duration, extra *componentArgs) (readyRun, error) {
	vc := benchVC(ns, name)
	if ephemeral {
		vc.Spec.Etcd.Storage = v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}
	}
	extra.apply(vc)
	t.forget(name)
	start := time.Now()
	if err := e.host.Create(ctx, vc); err != nil {
		return readyRun{}, err
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return t.has(name, stepReady), nil
	})
	if err != nil {
		return readyRun{at: t.since(name, start)}, fmt.Errorf("%s not Ready: %w", name, err)
	}
	if err := e.host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
		return readyRun{}, err
	}
	tenant, err := tenantClient(ctx, e, vc)
	if err != nil {
		return readyRun{}, err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	t.mark(name, stepFirstKubectlCall, time.Now())
	return readyRun{at: t.since(name, start)}, err
}
