package poolnode

import (
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
