// Package condition sets the conditions of one object's status during one reconcile pass:
// each stamped with the generation it describes and the pass's time.
package condition

import (
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Setter writes into List; Generation and Now stamp what it writes.
type Setter struct {
	List       *[]metav1.Condition
	Generation int64
	Now        time.Time
}

// Set sets condition typ to True (ok) or False with reason and message; its transition time
// changes only when its status does.
func (c Setter) Set(typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(c.List, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message,
		ObservedGeneration: c.Generation, LastTransitionTime: metav1.NewTime(c.Now),
	})
}

// IsTrue says whether condition typ is True.
func (c Setter) IsTrue(typ string) bool { return meta.IsStatusConditionTrue(*c.List, typ) }

// Remove removes condition typ.
func (c Setter) Remove(typ string) { meta.RemoveStatusCondition(c.List, typ) }
