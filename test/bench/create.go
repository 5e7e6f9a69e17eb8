package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// phases of a VirtualCluster's way to Ready, in order, as the times its conditions turned True.
var phases = []string{
	v1alpha1.ConditionCertificatesReady,
	v1alpha1.ConditionEtcdReady,
	v1alpha1.ConditionAPIServerReady,
	v1alpha1.ConditionReady,
}

// readyRun is one VirtualCluster's way to Ready: when each condition was first seen True, and
// when its kubeconfig first answered a kubectl-like call, all from its creation.
type readyRun struct {
	at        map[string]time.Duration
	firstCall time.Duration
}

// createReady creates VirtualClusters, one after another and then all at once, and measures
// the time from create to Ready, split by phase.
func createReady(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("create", flag.ExitOnError)
	count := fs.Int("count", 10, "VirtualClusters per series")
	_ = fs.Parse(args)
	ns, cleanup, err := namespace(ctx, e, "bench-create")
	if err != nil {
		return nil, err
	}
	defer cleanup()

	var figures []Figure
	for _, series := range []struct {
		name       string
		concurrent bool
	}{{"sequential", false}, {"concurrent", true}} {
		fmt.Printf("creating %d VirtualClusters, %s...\n", *count, series.name)
		runs, err := createSeries(ctx, e, ns, series.name[:3], *count, series.concurrent)
		if err != nil {
			return nil, err
		}
		method := fmt.Sprintf("%d VirtualClusters (NodePort, ephemeral etcd) created %s; from the create call to the condition first seen True (polled every 50 ms)", *count, map[bool]string{false: "one after another", true: "at once"}[series.concurrent])
		for _, p := range append(phases, "first kubectl call") {
			var ds []time.Duration
			for _, r := range runs {
				if p == "first kubectl call" {
					ds = append(ds, r.firstCall)
				} else {
					ds = append(ds, r.at[p])
				}
			}
			slices.Sort(ds)
			figures = append(figures,
				Figure{fmt.Sprintf("create→%s, %s, median", p, series.name), seconds(percentile(ds, 0.5)), "s", method},
				Figure{fmt.Sprintf("create→%s, %s, p90", p, series.name), seconds(percentile(ds, 0.9)), "s", method})
		}
	}
	return figures, nil
}

func createSeries(ctx context.Context, e *env, ns, prefix string, count int, concurrent bool) ([]readyRun, error) {
	runs := make([]readyRun, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		name := fmt.Sprintf("%s-%d", prefix, i)
		if concurrent {
			wg.Go(func() { runs[i], errs[i] = createOne(ctx, e, ns, name) })
			continue
		}
		runs[i], errs[i] = createOne(ctx, e, ns, name)
		if errs[i] != nil {
			break
		}
	}
	wg.Wait()
	// The tenants go before the next series starts, so each series has the host to itself.
	for i := range count {
		_ = e.host.Delete(context.Background(), &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", prefix, i)}})
	}
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l := &v1alpha1.VirtualClusterList{}
		return e.host.List(ctx, l, client.InNamespace(ns)) == nil && len(l.Items) == 0, nil
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return runs, nil
}

// createOne creates a VirtualCluster and follows it to Ready and a first answer from its API.
func createOne(ctx context.Context, e *env, ns, name string) (readyRun, error) {
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort}},
			Etcd:         v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
		},
	}
	run := readyRun{at: map[string]time.Duration{}}
	start := time.Now()
	if err := e.host.Create(ctx, vc); err != nil {
		return run, err
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, nil
		}
		for _, p := range phases {
			if _, ok := run.at[p]; !ok && meta.IsStatusConditionTrue(vc.Status.Conditions, p) {
				run.at[p] = time.Since(start)
			}
		}
		_, ready := run.at[v1alpha1.ConditionReady]
		return ready, nil
	})
	if err != nil {
		return run, fmt.Errorf("%s not Ready: %w", name, err)
	}
	tenant, err := tenantClient(ctx, e, vc)
	if err != nil {
		return run, err
	}
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	run.firstCall = time.Since(start)
	return run, err
}
