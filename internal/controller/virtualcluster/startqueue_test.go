package virtualcluster

import (
	"slices"
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

// A waiting tenant is told when its turn comes, whether a holder gives its slot back or its
// turn times out, and looks again by itself when the first holder's turn ends.
func TestStartQueueTellsWhoseTurnCame(t *testing.T) {
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	var told []string
	q := &StartQueue{Max: 2, Timeout: time.Minute, Admitted: func(t types.NamespacedName) { told = append(told, t.Name) }}
	ns := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: name, Name: name} }
	a, b, c, d, e := ns("a"), ns("b"), ns("c"), ns("d"), ns("e")
	expect := func(what string, want ...string) {
		t.Helper()
		if !slices.Equal(told, want) {
			t.Errorf("%s: told %q; want %q", what, told, want)
		}
		told = nil
	}

	if got := q.NextTimeout(now); got != 0 {
		t.Errorf("NextTimeout with no holder = %v; want 0", got)
	}
	q.Admit(a, now)
	q.Admit(b, now.Add(10*time.Second))
	q.Admit(c, now)
	q.Admit(d, now)
	q.Admit(e, now)
	expect("slots taken and tenants waiting")
	if got := q.NextTimeout(now.Add(20 * time.Second)); got != 40*time.Second {
		t.Errorf("NextTimeout = %v; want 40s, when a's turn ends", got)
	}

	q.Done(a)
	expect("a's slot given back", "c")
	q.Done(e)
	expect("a waiting tenant going: who may start is told again", "c")
	q.Done(c) // c went before it started: its slot is d's
	expect("c gone before it took its turn", "d")
	q.Admit(d, now)
	expect("d takes its slot")

	// b's turn times out, seen when someone asks: the next in line is told.
	q.Admit(e, now) // e waits again
	told = nil
	if ok, _ := q.Admit(a, now.Add(2*time.Minute)); !ok {
		t.Fatal("a not admitted after both holders timed out")
	}
	expect("b's and d's turns timed out, a asked and took one", "e")
	if got := q.NextTimeout(now.Add(2*time.Minute + 59*time.Second + 500*time.Millisecond)); got != time.Second {
		t.Errorf("NextTimeout just before a's turn ends = %v; want the 1s floor", got)
	}
}
