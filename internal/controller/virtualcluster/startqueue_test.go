package virtualcluster

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestStartQueue(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	q := &StartQueue{Max: 2, Timeout: time.Minute}
	a, b, c, d := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}, types.NamespacedName{Name: "c"}, types.NamespacedName{Name: "d"}
	admit := func(who types.NamespacedName, at time.Time, wantOK bool, wantAhead int) {
		t.Helper()
		if ok, ahead := q.Admit(who, at); ok != wantOK || ahead != wantAhead {
			t.Errorf("Admit(%s) = %v, %d ahead; want %v, %d", who.Name, ok, ahead, wantOK, wantAhead)
		}
	}
	admit(a, now, true, 0)
	admit(b, now, true, 0)
	admit(c, now, false, 2) // two starting
	admit(d, now, false, 3) // and c before it
	admit(a, now, true, 0)  // a holder asking again keeps its slot

	// First come, first served: a slot freed goes to c, not to d asking first.
	q.Done(a)
	admit(d, now, false, 2)
	admit(c, now, true, 0)
	admit(d, now, false, 2)

	// A tenant that cannot start gives its slot up after Timeout.
	admit(d, now.Add(2*time.Minute), true, 0)

	// Going while waiting leaves the queue.
	q.Done(d)
	q.Done(c)
	admit(a, now.Add(2*time.Minute), true, 0)
	admit(b, now.Add(2*time.Minute), true, 0)
	admit(c, now.Add(2*time.Minute), false, 2)
	q.Done(c)
	q.Done(b)
	admit(d, now.Add(2*time.Minute), true, 0)

	var unlimited *StartQueue
	if ok, _ := unlimited.Admit(a, now); !ok {
		t.Error("no queue: every tenant starts")
	}
	if ok, _ := (&StartQueue{}).Admit(a, now); !ok {
		t.Error("Max 0: every tenant starts")
	}
}
