package virtualcluster

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
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
