package virtualcluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/internal/controller/poolnode"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// Named requeue intervals of node lending.
const (
	// lendingRetryInterval: nodes are being lent or given back.
	lendingRetryInterval = 3 * time.Second
	// agentTimeout: a node whose agent has been silent this long is not lent.
	agentTimeout = 2 * time.Minute
)

// reconcileNodes lends the tenant the host nodes its promotion requests ask for, and gives
// back those no request wants any more. The PoolNode controller does the moving; this only
// decides, through each PoolNode's spec.tenant, and reports.
func (r *Reconciler) reconcileNodes(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions) (time.Duration, error) {
	pools := &v1alpha1.PoolNodeList{}
	if err := r.Client.List(ctx, pools); err != nil {
		return 0, fmt.Errorf("listing PoolNodes: %w", err)
	}
	requests, err := promotionRequests(vc)
	if err != nil {
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonInvalidSpec, err.Error())
		return 0, nil
	}
	if asked := totalCount(requests); r.MaxLentNodes > 0 && asked > r.MaxLentNodes {
		// Nothing is lent or given back until the tenant asks for no more than that.
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonOverNodeLimit, fmt.Sprintf(
			"spec.nodes.promotions ask for %d nodes, and the platform lends at most %d to a tenant (the operator's --max-lent-nodes-per-tenant); the nodes lent stay",
			asked, r.MaxLentNodes))
		return 0, nil
	}
	lent := lentTo(vc, pools.Items)
	if len(requests) == 0 && len(lent) == 0 {
		conds.Remove(v1alpha1.ConditionNodesReady)
		vc.Status.Nodes = nil
		return 0, nil
	}
	if vc.Spec.Sleep.Asleep {
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonAsleep, fmt.Sprintf(
			"the tenant is asleep: its %d lent nodes stay lent and keep their pods, and their kubelets reconnect when it wakes", len(lent)))
		return 0, nil
	}
	if len(requests) > 0 && !conds.IsTrue(v1alpha1.ConditionAPIServerReady) {
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonWaitingForAPIServer, "nodes are lent once the tenant's apiserver answers")
		return 0, nil
	}

	candidates, err := r.candidates(ctx, pools.Items)
	if err != nil {
		return 0, err
	}
	plan := nodepool.Select(vc.UID, requests, candidates)
	byName := map[string]*v1alpha1.PoolNode{}
	for i := range pools.Items {
		byName[pools.Items[i].Name] = &pools.Items[i]
	}
	log := ctrl.LoggerFrom(ctx)
	for _, name := range plan.Release {
		if err := r.lend(ctx, byName[name], nil); err != nil {
			return 0, err
		}
		log.Info("giving a node back to the host", "node", name)
	}
	for _, name := range sortedKeys(plan.Assign) {
		ref := &v1alpha1.TenantReference{Namespace: vc.Namespace, Name: vc.Name, UID: vc.UID, Request: plan.Assign[name]}
		if err := r.lend(ctx, byName[name], ref); err != nil {
			if apierrors.IsConflict(err) {
				// Another tenant took it first: decide again.
				return time.Second, nil
			}
			return 0, err
		}
		log.Info("lending a node to the tenant", "node", name, "request", ref.Request)
	}

	vc.Status.Nodes = nil
	inTenant := 0
	for _, name := range append(sortedKeys(plan.Keep), sortedKeys(plan.Assign)...) {
		pn := byName[name]
		req := plan.Keep[name] + plan.Assign[name]
		vc.Status.Nodes = append(vc.Status.Nodes, v1alpha1.LentNode{Name: name, Request: req, Phase: pn.Status.Phase})
		if _, kept := plan.Keep[name]; kept && pn.Status.Phase == v1alpha1.PoolNodeInTenant && kubeletReady(pn) {
			inTenant++
		}
	}
	slices.SortFunc(vc.Status.Nodes, func(a, b v1alpha1.LentNode) int { return cmp.Compare(a.Name, b.Name) })
	want := totalCount(requests)
	returning := 0
	for _, name := range lent {
		if _, kept := plan.Keep[name]; !kept {
			returning++
		}
	}
	switch {
	case len(plan.Short) > 0:
		var msgs []string
		for _, s := range plan.Short {
			msgs = append(msgs, s.String())
		}
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonNotEnoughNodes, strings.Join(msgs, "; "))
	case inTenant == want && returning == 0:
		conds.Set(v1alpha1.ConditionNodesReady, true, ReasonReady, fmt.Sprintf("%d lent nodes Ready in the tenant", inTenant))
		return 0, nil
	default:
		conds.Set(v1alpha1.ConditionNodesReady, false, ReasonLending,
			fmt.Sprintf("%d of %d nodes Ready in the tenant; the others are being drained, joined or given back", inTenant, want))
	}
	return lendingRetryInterval, nil
}

// lend sets whom a node is lent to (nil gives it back), failing with a conflict if the node
// changed meanwhile: two tenants never get the same node.
func (r *Reconciler) lend(ctx context.Context, pn *v1alpha1.PoolNode, to *v1alpha1.TenantReference) error {
	patch := client.MergeFromWithOptions(pn.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pn.Spec.Tenant = to
	if err := r.Client.Patch(ctx, pn, patch); err != nil {
		return fmt.Errorf("updating PoolNode %s: %w", pn.Name, err)
	}
	return nil
}

// candidates describes the lendable nodes for selection. A free node is available when it is
// in the host and Ready there, and its node agent reports; and when it runs no tenant's etcd or
// control plane (lending drains a node, which would move them, and empty an ephemeral etcd)
// and is not quarantined.
func (r *Reconciler) candidates(ctx context.Context, pools []v1alpha1.PoolNode) ([]nodepool.Candidate, error) {
	now := r.Clock.Now()
	controlPlanes, err := r.controlPlaneNodes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]nodepool.Candidate, 0, len(pools))
	for _, pn := range pools {
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: pn.Name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		why := ""
		switch {
		case pn.Status.Quarantine != nil:
			why = fmt.Sprintf("quarantined since it was lent to %s, which could be root on it", nodepool.TenantKey(&pn.Status.Quarantine.Tenant))
		case controlPlanes[pn.Name] != "":
			why = "runs " + controlPlanes[pn.Name]
		}
		out = append(out, nodepool.Candidate{
			Name:   pn.Name,
			Labels: node.Labels,
			Tenant: pn.Spec.Tenant,
			Available: pn.Spec.Tenant == nil && why == "" && nodepool.InHost(&pn) && nodepool.Reporting(&pn, now, agentTimeout) &&
				nodeReady(node) && (!node.Spec.Unschedulable || node.Annotations["kubenest.io/cordoned"] == "true"),
			Why: why,
		})
	}
	return out, nil
}

// controlPlaneNodes are the host nodes that run a tenant's etcd or control-plane pod, with
// the first such pod found on each, as "pod <namespace>/<name>".
func (r *Reconciler) controlPlaneNodes(ctx context.Context) (map[string]string, error) {
	pods, err := cpnamespace.ControlPlanePods(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, p := range pods {
		if _, seen := out[p.Spec.NodeName]; !seen {
			out[p.Spec.NodeName] = fmt.Sprintf("pod %s/%s of a tenant's %s", p.Namespace, p.Name, p.Labels[naming.LabelComponent])
		}
	}
	return out, nil
}

// quarantine marks the nodes lent to vc, when vc may run privileged pods on them: whatever ran
// there as root may have changed the machine, so the node serves no cluster once it leaves
// the tenant, until the platform reimages it and marks it clean.
func (r *Reconciler) quarantine(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	if !vc.Spec.Nodes.Privileged() {
		return nil
	}
	pools := &v1alpha1.PoolNodeList{}
	if err := r.Client.List(ctx, pools); err != nil {
		return fmt.Errorf("listing PoolNodes: %w", err)
	}
	for i := range pools.Items {
		pn := &pools.Items[i]
		lent := (pn.Spec.Tenant != nil && pn.Spec.Tenant.UID == vc.UID && pn.Spec.JoinSecretName != "") || pn.Status.Agent.TenantUID == vc.UID
		if !lent || pn.Status.Quarantine != nil {
			continue
		}
		// Locked: the write carries the whole conditions list, read from a cache that may be behind.
		patch := client.MergeFromWithOptions(pn.DeepCopy(), client.MergeFromWithOptimisticLock{})
		now := r.Clock.Now()
		poolnode.SetQuarantine(pn, &v1alpha1.Quarantine{
			Tenant: v1alpha1.TenantReference{Namespace: vc.Namespace, Name: vc.Name, UID: vc.UID, Request: tenantRequest(pn)},
			Since:  metav1.NewTime(now),
		}, now)
		if err := r.Client.Status().Patch(ctx, pn, patch); err != nil {
			return fmt.Errorf("quarantining PoolNode %s: %w", pn.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("the tenant may run privileged pods on a node lent to it: the node is quarantined when it returns", "node", pn.Name)
		r.Recorder.Eventf(pn, vc, corev1.EventTypeWarning, "Quarantined", "Lend",
			"lent to %s/%s, which may run privileged pods: reimage the node and mark it clean (annotation %s) after it returns", vc.Namespace, vc.Name, v1alpha1.AnnotationMarkClean)
	}
	return nil
}

func tenantRequest(pn *v1alpha1.PoolNode) string {
	if pn.Spec.Tenant != nil {
		return pn.Spec.Tenant.Request
	}
	return ""
}

// promotionRequests turns the spec's promotions into selection requests.
func promotionRequests(vc *v1alpha1.VirtualCluster) ([]nodepool.Request, error) {
	var out []nodepool.Request
	for i, p := range vc.Spec.Nodes.Promotions {
		sel, err := metav1.LabelSelectorAsSelector(&p.Selector)
		if err != nil {
			return nil, fmt.Errorf("spec.nodes.promotions[%d].selector: %w", i, err)
		}
		out = append(out, nodepool.Request{Name: p.Name, Count: int(p.Count), Selector: sel})
	}
	return out, nil
}

// totalCount is how many nodes requests ask for.
func totalCount(requests []nodepool.Request) int {
	n := 0
	for _, q := range requests {
		n += q.Count
	}
	return n
}

// lentTo lists the nodes lent to vc, or whose kubelet still serves it.
func lentTo(vc *v1alpha1.VirtualCluster, pools []v1alpha1.PoolNode) []string {
	var out []string
	for _, pn := range pools {
		if (pn.Spec.Tenant != nil && pn.Spec.Tenant.UID == vc.UID) || pn.Status.Agent.TenantUID == vc.UID {
			out = append(out, pn.Name)
		}
	}
	return out
}

func kubeletReady(pn *v1alpha1.PoolNode) bool {
	for _, c := range pn.Status.Conditions {
		if c.Type == v1alpha1.PoolNodeConditionKubeletReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// releaseNodes gives back every node lent to vc and reports how many have not yet returned to
// the host: a deleted tenant waits for its nodes.
func (r *Reconciler) releaseNodes(ctx context.Context, vc *v1alpha1.VirtualCluster) (int, error) {
	pools := &v1alpha1.PoolNodeList{}
	if err := r.Client.List(ctx, pools); err != nil {
		return 0, fmt.Errorf("listing PoolNodes: %w", err)
	}
	away := 0
	for i := range pools.Items {
		pn := &pools.Items[i]
		if pn.Spec.Tenant != nil && pn.Spec.Tenant.UID == vc.UID {
			if err := r.lend(ctx, pn, nil); err != nil {
				return 0, err
			}
			ctrl.LoggerFrom(ctx).Info("giving a node back to the host: the tenant is being deleted", "node", pn.Name)
		}
		if pn.Status.Agent.TenantUID == vc.UID || (pn.Spec.Tenant != nil && pn.Spec.Tenant.UID == vc.UID) {
			away++
		}
	}
	return away, nil
}
