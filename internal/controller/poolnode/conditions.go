package poolnode

import (
	"fmt"
	"time"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// conditionSetter holds the PoolNode's conditions during one pass, with a setter per step.
type conditionSetter struct{ condition.Setter }

func (c conditionSetter) reporting(pn *v1alpha1.PoolNode, now time.Time, timeout time.Duration) {
	hb := pn.Status.Agent.HeartbeatTime
	switch {
	case hb.IsZero():
		c.Set(v1alpha1.PoolNodeConditionAgentReporting, false, "NeverReported", "no node agent has reported for this node; it cannot be lent")
	case nodepool.Reporting(pn, now, timeout):
		c.Set(v1alpha1.PoolNodeConditionAgentReporting, true, "Reporting", "the node agent reports")
	default:
		c.Set(v1alpha1.PoolNodeConditionAgentReporting, false, "Silent", "the node agent last reported at "+hb.UTC().Format(time.RFC3339))
	}
}

func (c conditionSetter) kubeletReady(ok bool, where string) {
	if ok {
		c.Set(v1alpha1.PoolNodeConditionKubeletReady, true, "Ready", where+" and is Ready")
		return
	}
	c.Set(v1alpha1.PoolNodeConditionKubeletReady, false, "NotReady", where+" but is not Ready")
}

// conditionsOf sets pn's conditions, stamped with its generation and now.
func conditionsOf(pn *v1alpha1.PoolNode, now time.Time) conditionSetter {
	return conditionSetter{condition.Setter{List: &pn.Status.Conditions, Generation: pn.Generation, Now: now}}
}

// SetQuarantine sets pn's quarantine (nil ends it) and its Clean condition together, so that
// the status write that carries one carries the other: nobody reads a quarantined node as
// clean, or a clean one as quarantined.
func SetQuarantine(pn *v1alpha1.PoolNode, q *v1alpha1.Quarantine, now time.Time) {
	pn.Status.Quarantine = q
	conditionsOf(pn, now).clean(pn)
}

// clean says whether the node is to be trusted: false while it is quarantined.
func (c conditionSetter) clean(pn *v1alpha1.PoolNode) {
	q := pn.Status.Quarantine
	if q == nil {
		c.Set(v1alpha1.PoolNodeConditionClean, true, "Clean", "no tenant that could be root on the node has had it since it was last marked clean")
		return
	}
	c.Set(v1alpha1.PoolNodeConditionClean, false, "LentPrivileged", fmt.Sprintf(
		"lent to %s since %s, which may run privileged pods on it: once the node is back it serves no cluster; reimage it, then annotate its PoolNode %s=<anything>",
		nodepool.TenantKey(&q.Tenant), q.Since.UTC().Format(time.RFC3339), v1alpha1.AnnotationMarkClean))
}
