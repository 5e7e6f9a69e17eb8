package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// sleepWake puts an idle tenant to sleep and wakes it, rounds times: how long it takes to fall
// asleep, how long from the wake to the first answer a client gets, and what the sleeping
// tenant no longer uses.
func sleepWake(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("sleep", flag.ExitOnError)
	rounds := fs.Int("rounds", 5, "sleep and wake this many times (the figures are medians and p90s over them)")
	idle := fs.Duration("idle", 30*time.Second, "how long the tenant is left idle before its use is measured")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long each step may take")
	_ = fs.Parse(args)
	ns, cleanup, err := namespace(ctx, e, "bench-sleep")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	vc := benchVC(ns, "sleeper")
	if _, err := readyTenant(ctx, e, vc, *timeout); err != nil {
		return nil, err
	}
	tenantCfg, err := tenantConfig(ctx, e, vc)
	if err != nil {
		return nil, err
	}
	fmt.Printf("leaving the tenant idle for %s...\n", *idle)
	if err := sleep(ctx, *idle); err != nil {
		return nil, err
	}
	awake, err := usageOver(ctx, func() (map[string]usage, error) { return tenantUsage(ctx, e, vc) })
	if err != nil {
		return nil, err
	}
	var used usage
	for _, u := range awake {
		used.workingSet += u.workingSet
		used.cpu += u.cpu
	}

	var asleep, woken []time.Duration // patch→Asleep, first request→answer
	for i := range *rounds {
		start := time.Now()
		if err := putToSleep(ctx, e, vc, *timeout); err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
		asleep = append(asleep, time.Since(start))
		if i == 0 {
			left, err := tenantUsage(ctx, e, vc)
			if err != nil {
				return nil, err
			}
			if len(left) > 0 {
				return nil, fmt.Errorf("asleep, the tenant still runs containers %v", left)
			}
		}
		if err := sleep(ctx, 2*time.Second); err != nil {
			return nil, err
		}

		took, err := firstRequest(ctx, tenantCfg, *timeout)
		if err != nil {
			return nil, fmt.Errorf("round %d: the first request to the sleeping tenant: %w", i+1, err)
		}
		woken = append(woken, took)
		fmt.Printf("  round %d: asleep in %.1fs, its first request answered in %.1fs\n", i+1, asleep[i].Seconds(), woken[i].Seconds())
		if err := waitAwake(ctx, e, vc, *timeout); err != nil {
			return nil, fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	slices.Sort(asleep)
	slices.Sort(woken)
	method := fmt.Sprintf("an idle tenant (default storage, no objects of its own, no nodes) put to sleep by patching spec.sleep.asleep and woken by a request, %d times", *rounds)
	return []Figure{
		{"sleep: patch→Asleep, median", percentile(asleep, 0.5).Seconds(), "s", method + "; from the patch to condition Asleep True (every pod of the tenant gone from the host)"},
		{"sleep: first request→answer, median", percentile(woken, 0.5).Seconds(), "s", method + "; a LIST of namespaces through the tenant's kubeconfig on a new connection, sent to the sleeping tenant: from the call to its answer (the wake gateway holds it while the tenant wakes; target 3 s)"},
		{"sleep: first request→answer, p90", percentile(woken, 0.9).Seconds(), "s", "the same, 90th percentile"},
		{"sleep: working set freed", float64(used.workingSet) / mib, "MiB", fmt.Sprintf("what the awake tenant's containers used after %s idle (kubelet stats), all of it freed asleep (no container of the tenant runs)", *idle)},
		{"sleep: CPU freed", used.cpu * 1000, "millicores", "the same, CPU"},
	}, nil
}

// firstRequest times one LIST of namespaces from the client's side, on a new connection as
// kubectl's first request is, which the wake gateway holds while a sleeping tenant wakes.
func firstRequest(ctx context.Context, tenantCfg *rest.Config, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	cfg := rest.CopyConfig(tenantCfg)
	cfg.Dial = (&net.Dialer{}).DialContext // a transport of its own, no pooled connection
	cfg.Timeout = timeout
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	if _, err := tenant.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// waitAwake waits until the tenant is Ready again, and awake (its spec says so).
func waitAwake(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.VirtualCluster{}
		return e.host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil && !got.Spec.Sleep.Asleep &&
			meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady), nil
	})
}
