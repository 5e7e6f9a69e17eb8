package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
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
	tenant, err := readyTenant(ctx, e, vc, *timeout)
	if err != nil {
		return nil, err
	}
	fmt.Printf("leaving the tenant idle for %s...\n", *idle)
	if err := sleep(ctx, *idle); err != nil {
		return nil, err
	}
	awake, err := tenantUsage(ctx, e, vc)
	if err != nil {
		return nil, err
	}
	var used usage
	for _, u := range awake {
		used.workingSet += u.workingSet
		used.cpu += u.cpu
	}

	setAsleep := func(asleep bool) error {
		return e.host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: vc.Name}},
			client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"sleep":{"asleep":%t}}}`, asleep)))
	}
	var asleep, woken []time.Duration
	for i := range *rounds {
		start := time.Now()
		if err := setAsleep(true); err != nil {
			return nil, err
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
			got := &v1alpha1.VirtualCluster{}
			return e.host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil &&
				meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionAsleep), nil
		})
		if err != nil {
			return nil, fmt.Errorf("round %d: not asleep after %s: %w", i+1, *timeout, err)
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

		// From the client's side: the wake, then a request every 100 ms until one is answered.
		start = time.Now()
		if err := setAsleep(false); err != nil {
			return nil, err
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
			c, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_, err := tenant.CoreV1().Namespaces().List(c, metav1.ListOptions{})
			return err == nil, nil
		})
		if err != nil {
			return nil, fmt.Errorf("round %d: no answer after the wake within %s: %w", i+1, *timeout, err)
		}
		woken = append(woken, time.Since(start))
		fmt.Printf("  round %d: asleep in %.1fs, answered %.1fs after the wake\n", i+1, asleep[i].Seconds(), woken[i].Seconds())
	}
	slices.Sort(asleep)
	slices.Sort(woken)
	method := fmt.Sprintf("an idle tenant (default storage, no objects of its own, no nodes) put to sleep and woken %d times by patching spec.sleep.asleep", *rounds)
	return []Figure{
		{"sleep: patch→Asleep, median", percentile(asleep, 0.5).Seconds(), "s", method + "; from the patch to condition Asleep True (every pod of the tenant gone from the host)"},
		{"sleep: wake→first answer, median", percentile(woken, 0.5).Seconds(), "s", method + "; from the wake patch to the first LIST of namespaces answered through the tenant's kubeconfig, tried every 100 ms"},
		{"sleep: wake→first answer, p90", percentile(woken, 0.9).Seconds(), "s", "the same, 90th percentile"},
		{"sleep: working set freed", float64(used.workingSet) / mib, "MiB", fmt.Sprintf("what the awake tenant's containers used after %s idle (kubelet stats), all of it freed asleep (no container of the tenant runs)", *idle)},
		{"sleep: CPU freed", used.cpu * 1000, "millicores", "the same, CPU"},
	}, nil
}
