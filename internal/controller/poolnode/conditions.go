package poolnode

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

type conditionSetter struct {
	list       *[]metav1.Condition
	generation int64
	now        time.Time
}

func (c conditionSetter) set(typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(c.list, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: c.generation, LastTransitionTime: metav1.NewTime(c.now),
	})
}

func (c conditionSetter) reporting(pn *v1alpha1.PoolNode, now time.Time, timeout time.Duration) {
	hb := pn.Status.Agent.HeartbeatTime
	switch {
	case hb.IsZero():
		c.set(v1alpha1.PoolNodeConditionAgentReporting, false, "NeverReported", "no node agent has reported for this node; it cannot be lent")
	case nodepool.Reporting(pn, now, timeout):
		c.set(v1alpha1.PoolNodeConditionAgentReporting, true, "Reporting", "the node agent reports")
	default:
		c.set(v1alpha1.PoolNodeConditionAgentReporting, false, "Silent", "the node agent last reported at "+hb.UTC().Format(time.RFC3339))
	}
}

func (c conditionSetter) kubeletReady(ok bool, where string) {
	if ok {
		c.set(v1alpha1.PoolNodeConditionKubeletReady, true, "Ready", where+" and is Ready")
		return
	}
	c.set(v1alpha1.PoolNodeConditionKubeletReady, false, "NotReady", where+" but is not Ready")
}
