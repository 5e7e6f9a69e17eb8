package virtualcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
)

// ReasonAsleep is the reason of every condition a sleeping tenant holds False on purpose.
const (
	ReasonAsleep        = "Asleep"
	ReasonFallingAsleep = "FallingAsleep"
	ReasonAwake         = "Awake"
)

// awake marks a tenant that slept awake again. The condition stays, False, its transition
// time saying when the tenant woke: the shared node gives the tenant's pods that ran before
// then new host pods, as a rebooted kubelet restarts its pods. A tenant that never slept has
// no Asleep condition.
func (c conditions) awake() {
	cond := meta.FindStatusCondition(*c.List, v1alpha1.ConditionAsleep)
	if cond == nil || cond.Reason == ReasonAwake {
		return
	}
	c.Remove(v1alpha1.ConditionAsleep) // the transition time is now, also from FallingAsleep
	c.Set(v1alpha1.ConditionAsleep, false, ReasonAwake, "awake (spec.sleep.asleep is not set) since this condition's last transition")
}

// wokeAt is when the tenant last woke from sleep; zero if it never slept.
func wokeAt(vc *v1alpha1.VirtualCluster) time.Time {
	if c := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionAsleep); c != nil && c.Reason == ReasonAwake {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// reconcileAsleep keeps a sleeping tenant asleep (spec.sleep.asleep). The etcd StatefulSet and
// the control-plane Deployment are already applied with no replicas; here the shared node
// stops and its host pods of the tenant go, lent nodes stay lent, and the Asleep condition says
// whether anything of the tenant still runs in the host. Certificates keep being renewed, so
// the tenant wakes with valid ones.
func (r *Reconciler) reconcileAsleep(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions, p *tenantPKI, controlPlanePods int) (reconcile.Result, error) {
	conds.Set(v1alpha1.ConditionEtcdReady, false, ReasonAsleep, "the tenant is asleep: no etcd member runs, and its data stays on its volumes")
	conds.Set(v1alpha1.ConditionAPIServerReady, false, ReasonAsleep, "the tenant is asleep: no control-plane pod runs")

	sharedPods := 0
	if r.SharedNodes != nil {
		// The virtual node stops first: running, it would take its host pods' deletion for
		// pods that ended, and delete them in the tenant too.
		r.SharedNodes.Manager.Stop(vc.Namespace + "/" + vc.Name)
		if err := r.removeSharedPods(ctx, vc); err != nil {
			return reconcile.Result{}, err
		}
		pods := &corev1.PodList{}
		if err := r.Client.List(ctx, pods, client.InNamespace(vc.Namespace), client.MatchingLabels(clustertree.HostSelector(vc.Name))); err != nil {
			return reconcile.Result{}, err
		}
		sharedPods = len(pods.Items)
		if vc.Spec.Nodes.Shared {
			conds.Set(v1alpha1.ConditionSharedNodeReady, false, ReasonAsleep,
				"the tenant is asleep: the virtual node is stopped and the host pods of its pods are removed; they are made again when it wakes")
		}
	}
	if _, err := r.reconcileNodes(ctx, vc, conds); err != nil {
		return reconcile.Result{}, err
	}

	if running := controlPlanePods + sharedPods; running > 0 {
		conds.Set(v1alpha1.ConditionAsleep, false, ReasonFallingAsleep,
			fmt.Sprintf("falling asleep: %d pods of the tenant still run in the host (%d of etcd and the control plane, %d of the shared node)",
				running, controlPlanePods, sharedPods))
		return reconcile.Result{}, nil // the pods' deletion is watched
	}
	conds.Set(v1alpha1.ConditionAsleep, true, ReasonAsleep,
		"no process of the tenant runs in the host; spec.sleep.asleep: false wakes it")
	return reconcile.Result{RequeueAfter: max(time.Second, p.leaves.EarliestRenewal().Sub(conds.Now))}, nil
}
