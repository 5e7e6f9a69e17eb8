package virtualcluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// TestNotOnlyHeartbeat: a PoolNode update that only moves its agent's heartbeat re-runs no
// tenant; the first heartbeat and any other change do.
func TestNotOnlyHeartbeat(t *testing.T) {
	now := time.Now()
	base := &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: "worker-2", ResourceVersion: "1"}}
	base.Status.Phase = v1alpha1.PoolNodeInHost
	base.Status.Agent.HeartbeatTime = metav1.NewTime(now)
	beat := func(mutate func(*v1alpha1.PoolNode)) *v1alpha1.PoolNode {
		pn := base.DeepCopy()
		pn.ResourceVersion = "2"
		pn.Status.Agent.HeartbeatTime = metav1.NewTime(now.Add(10 * time.Second))
		if mutate != nil {
			mutate(pn)
		}
		return pn
	}
	first := base.DeepCopy()
	first.Status.Agent.HeartbeatTime = metav1.Time{}
	for _, c := range []struct {
		name      string
		old, new  *v1alpha1.PoolNode
		reconcile bool
	}{
		{"only the heartbeat moved", base, beat(nil), false},
		{"the first heartbeat", first, beat(nil), true},
		{"the heartbeat and the phase", base, beat(func(pn *v1alpha1.PoolNode) { pn.Status.Phase = v1alpha1.PoolNodeUnreachable }), true},
		{"the agent's step", base, beat(func(pn *v1alpha1.PoolNode) { pn.Status.Agent.Step = "StopKubelet" }), true},
		{"the tenant it is lent to", base, beat(func(pn *v1alpha1.PoolNode) {
			pn.Spec.Tenant = &v1alpha1.TenantReference{Namespace: "t", Name: "a", UID: "u"}
		}), true},
		{"a label", base, beat(func(pn *v1alpha1.PoolNode) { pn.Labels = map[string]string{"zone": "b"} }), true},
	} {
		if got := notOnlyHeartbeat.Update(event.UpdateEvent{ObjectOld: c.old, ObjectNew: c.new}); got != c.reconcile {
			t.Errorf("%s: reconcile %v, want %v", c.name, got, c.reconcile)
		}
	}
}

// TestNotClusterTreeChurn: the host pods and copies clustertree makes for a tenant's workloads
// re-run the tenant only when they go; the tenant's own control-plane pods always do.
func TestNotClusterTreeChurn(t *testing.T) {
	workload := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-x-default-x-alpha", Labels: clustertree.HostSelector("alpha")}}
	controlPlane := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "alpha-controlplane-1", Labels: naming.For("alpha").Labels(naming.ComponentControlPlane)}}
	for _, c := range []struct {
		name           string
		pod            *corev1.Pod
		create, update bool
	}{
		{"a shared-node host pod", workload, false, false},
		{"a control-plane pod", controlPlane, true, true},
	} {
		if got := notClusterTreeChurn.Create(event.CreateEvent{Object: c.pod}); got != c.create {
			t.Errorf("%s made: reconcile %v, want %v", c.name, got, c.create)
		}
		if got := notClusterTreeChurn.Update(event.UpdateEvent{ObjectOld: c.pod, ObjectNew: c.pod}); got != c.update {
			t.Errorf("%s changed: reconcile %v, want %v", c.name, got, c.update)
		}
		if !notClusterTreeChurn.Delete(event.DeleteEvent{Object: c.pod}) {
			t.Errorf("%s gone: no reconcile", c.name)
		}
	}
}
