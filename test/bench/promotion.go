package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// promotion lends a host node to a tenant and takes it back, and times both ways, by the
// phases its PoolNode goes through.
func promotion(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("promotion", flag.ExitOnError)
	timeout := fs.Duration("timeout", 5*time.Minute, "how long each way may take")
	_ = fs.Parse(args)

	// A free lendable node, in the host.
	pools := &v1alpha1.PoolNodeList{}
	if err := e.host.List(ctx, pools); err != nil {
		return nil, err
	}
	var node string
	for _, pn := range pools.Items {
		if pn.Spec.Tenant == nil && pn.Status.Phase == v1alpha1.PoolNodeInHost {
			node = pn.Name
			break
		}
	}
	if node == "" {
		return nil, fmt.Errorf("no PoolNode is free and InHost (of %d): label a host node %s=true", len(pools.Items), v1alpha1.LabelLendable)
	}

	ns, cleanup, err := namespace(ctx, e, "bench-promotion")
	if err != nil {
		return nil, err
	}
	// Deleting the tenant gives the node back; wait for it, so the next benchmark has it.
	defer func() {
		cleanup()
		_ = waitPoolNode(context.Background(), e, node, 3*time.Minute, v1alpha1.PoolNodeInHost)
	}()
	vc := benchVC(ns, "promotion")
	tenant, err := readyTenant(ctx, e, vc, 5*time.Minute)
	if err != nil {
		return nil, err
	}

	fmt.Printf("lending %s to the tenant...\n", node)
	start := time.Now()
	if err := setPromotion(ctx, e, vc, 1); err != nil {
		return nil, err
	}
	lend := map[string]time.Duration{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
		notePhase(ctx, e, node, start, lend)
		n, err := tenant.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil || !nodeReady(n) {
			return false, nil
		}
		if _, ok := lend["tenant Node Ready"]; !ok {
			lend["tenant Node Ready"] = time.Since(start)
		}
		got := &v1alpha1.VirtualCluster{}
		return e.host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil &&
			meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionNodesReady), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s not Ready in the tenant after %s (seen: %v)", node, *timeout, lend)
	}
	lend["NodesReady"] = time.Since(start)

	fmt.Printf("giving %s back to the host...\n", node)
	start = time.Now()
	if err := setPromotion(ctx, e, vc, 0); err != nil {
		return nil, err
	}
	back := map[string]time.Duration{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
		notePhase(ctx, e, node, start, back)
		if _, err := tenant.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil && back["gone from the tenant"] == 0 {
			back["gone from the tenant"] = time.Since(start)
		}
		// The host Node's Ready condition is as the kubelet left it when it went: the kubelet is
		// back when it renews its host Lease again.
		lease := &coordinationv1.Lease{}
		if e.host.Get(ctx, client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: node}, lease) == nil &&
			lease.Spec.RenewTime != nil && lease.Spec.RenewTime.After(start) && back["host kubelet back"] == 0 {
			back["host kubelet back"] = time.Since(start)
		}
		n := &corev1.Node{}
		return e.host.Get(ctx, client.ObjectKey{Name: node}, n) == nil && nodeReady(n) && !n.Spec.Unschedulable &&
			back[string(v1alpha1.PoolNodeInHost)] > 0 && back["host kubelet back"] > 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s not back in the host after %s (seen: %v)", node, *timeout, back)
	}
	back["host Node Ready and schedulable"] = time.Since(start)

	method := fmt.Sprintf("node %s lent to an idle tenant (spec.nodes.promotions count 0→1) and given back (1→0); times from the patch to the step first seen, polling every 100 ms; the host kubelet is back when it renews its Lease in the host", node)
	var figures []Figure
	for _, s := range []string{string(v1alpha1.PoolNodeDraining), string(v1alpha1.PoolNodeJoiningTenant), string(v1alpha1.PoolNodeInTenant), "tenant Node Ready", "NodesReady"} {
		if d, ok := lend[s]; ok {
			figures = append(figures, Figure{"promotion: lend → " + s, d.Seconds(), "s", method})
		}
	}
	for _, s := range []string{string(v1alpha1.PoolNodeReturning), "gone from the tenant", string(v1alpha1.PoolNodeInHost), "host kubelet back", "host Node Ready and schedulable"} {
		if d, ok := back[s]; ok {
			figures = append(figures, Figure{"promotion: return → " + s, d.Seconds(), "s", method})
		}
	}
	return figures, nil
}

func setPromotion(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster, count int32) error {
	patch := fmt.Sprintf(`{"spec":{"nodes":{"promotions":[{"name":"workers","count":%d}]}}}`, count)
	return e.host.Patch(ctx, vc, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// notePhase records when a PoolNode was first seen in each phase.
func notePhase(ctx context.Context, e *env, node string, start time.Time, seen map[string]time.Duration) {
	pn := &v1alpha1.PoolNode{}
	if e.host.Get(ctx, client.ObjectKey{Name: node}, pn) != nil || pn.Status.Phase == "" {
		return
	}
	if _, ok := seen[string(pn.Status.Phase)]; !ok {
		seen[string(pn.Status.Phase)] = time.Since(start)
	}
}

func waitPoolNode(ctx context.Context, e *env, node string, timeout time.Duration, phase v1alpha1.PoolNodePhase) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		pn := &v1alpha1.PoolNode{}
		return e.host.Get(ctx, client.ObjectKey{Name: node}, pn) == nil && pn.Status.Phase == phase, nil
	})
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
