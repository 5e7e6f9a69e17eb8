package virtualcluster

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestStartQueue(t *testing.T) {
	now := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	q := &StartQueue{Max: 2, Timeout: time.Minute}
	// Each in a namespace of its own: the namespaces' shares are TestStartQueueSharesNamespaces's.
	a, b, c, d := types.NamespacedName{Namespace: "a", Name: "a"}, types.NamespacedName{Namespace: "b", Name: "b"},
		types.NamespacedName{Namespace: "c", Name: "c"}, types.NamespacedName{Namespace: "d", Name: "d"}
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
	for i := range 3 {
		if ok, _ := q.Admit(hog(i), now); !ok {
			t.Fatalf("alone, the namespace gets all slots but one: %s not admitted", hog(i).Name)
		}
	}
	for i := 3; i < 10; i++ {
		if ok, _ := q.Admit(hog(i), now); ok {
			t.Fatalf("Admit(%s): the namespace got its 4th slot; one is always left for another namespace", hog(i).Name)
		}
	}
	// Its three may never start (they hold their turns until Timeout): another namespace's
	// tenant starts at once all the same.
	other := types.NamespacedName{Namespace: "team-a", Name: "dev"}
	if ok, _ := q.Admit(other, now); !ok {
		t.Fatal("another namespace's tenant waits behind a namespace holding all slots but one")
	}
	late := types.NamespacedName{Namespace: "team-b", Name: "dev"}
	if ok, ahead := q.Admit(late, now); ok || ahead != 4 {
		t.Fatalf("a third namespace's tenant: %v, %d ahead; want false, only the 4 starting ahead", ok, ahead)
	}
	q.Done(hog(0))
	if ok, _ := q.Admit(hog(3), now); ok {
		t.Error("the freed slot went to the namespace holding more than its share while another waits")
	}
	if ok, _ := q.Admit(late, now); !ok {
		t.Error("the freed slot did not go to the waiting namespace's tenant")
	}
	q.Done(late)
	q.Done(other)
	if ok, _ := q.Admit(hog(3), now); !ok {
		t.Error("with nobody else waiting, the namespace gets a slot")
	}
}
