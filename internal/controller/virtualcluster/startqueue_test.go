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

// A namespace that creates many tenants at once does not hold the others' back.
func TestStartQueueSharesNamespaces(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	q := &StartQueue{Max: 4, Timeout: time.Minute}
	hog := func(i int) types.NamespacedName {
		return types.NamespacedName{Namespace: "hog", Name: string(rune('a' + i))}
	}
	for i := range 4 {
		if ok, _ := q.Admit(hog(i), now); !ok {
			t.Fatalf("alone, the namespace gets every slot: %s not admitted", hog(i).Name)
		}
	}
	for i := 4; i < 10; i++ {
		if ok, ahead := q.Admit(hog(i), now); ok || ahead != i {
			t.Fatalf("Admit(%s) = %v, %d ahead; want false, %d", hog(i).Name, ok, ahead, i)
		}
	}
	other := types.NamespacedName{Namespace: "team-a", Name: "dev"}
	if ok, ahead := q.Admit(other, now); ok || ahead != 4 {
		t.Fatalf("the other namespace's tenant: %v, %d ahead; want false, only the 4 starting ahead", ok, ahead)
	}
	q.Done(hog(0))
	if ok, _ := q.Admit(hog(4), now); ok {
		t.Error("the freed slot went to the namespace holding more than its share")
	}
	if ok, _ := q.Admit(other, now); !ok {
		t.Error("the freed slot did not go to the other namespace's tenant")
	}
	q.Done(hog(1))
	if ok, _ := q.Admit(hog(4), now); !ok {
		t.Error("with nobody else waiting, the namespace gets the slot")
	}
}
