package virtualcluster

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// StartQueue bounds how many tenants start their control planes at the same time. A start is
// mostly CPU (the apiserver's own start is about 1.5 CPU-seconds, and with etcd, the
// controllers, the node's runtime and the host's apiserver a creation costs several more):
// thirty started together on a 2-core host all missed their probes and deadlines, restarted
// and started again, and none was Ready after five minutes. Started a few at a time, each
// starts in seconds. Tenants wait their turn first come, first served.
//
// A tenant holds its slot from when its workloads are created (or scaled up from sleep)
// until it is Ready, it sleeps or it goes, or for at most Timeout: a tenant that cannot start
// does not block the others.
//
// Turns are shared between namespaces: one namespace never holds more than all slots but
// one, and while tenants of another namespace wait, at most half (at least one). So a
// namespace that creates a hundred tenants at once, or tenants that never start and hold
// their turns until Timeout, delays another namespace's tenant by little: a turn is always
// left for it.
//
// A waiting tenant is told when its turn comes (Admitted), so it starts the moment a slot
// frees instead of at its next look; it looks again by itself only when a holder's Timeout
// ends (NextTimeout), which may free a slot without anyone giving it back.
type StartQueue struct {
	// Max is how many tenants start at once; 0 means no limit.
	Max int
	// Timeout is the longest a tenant holds a slot.
	Timeout time.Duration
	// Admitted, if set, is called with each waiting tenant whose turn has come since a slot
	// was given back or timed out: Admit would now admit it. It is called without the
	// queue's lock held, and must not block.
	Admitted func(types.NamespacedName)

	mu       sync.Mutex
	starting map[types.NamespacedName]time.Time // holders, since when
	waiting  []types.NamespacedName             // in arrival order
}

// Admit says whether tenant may start now, taking a slot if so; if not, how many tenants are
// ahead of it (starting or waiting before it). A tenant that already holds its slot is
// admitted again.
func (q *StartQueue) Admit(tenant types.NamespacedName, now time.Time) (ok bool, ahead int) {
	if q == nil || q.Max <= 0 {
		return true, 0
	}
	ok, ahead, admitted := q.admit(tenant, now)
	q.notify(admitted, tenant)
	return ok, ahead
}

// admit is Admit under the queue's lock; admitted is the other waiting tenants whose turn
// came because a holder's Timeout ended.
func (q *StartQueue) admit(tenant types.NamespacedName, now time.Time) (ok bool, ahead int, admitted []types.NamespacedName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.starting == nil {
		q.starting = map[types.NamespacedName]time.Time{}
	}
	timedOut := false
	for t, since := range q.starting {
		if now.Sub(since) > q.Timeout {
			delete(q.starting, t)
			timedOut = true
		}
	}
	ok, ahead = q.take(tenant, now)
	if timedOut {
		admitted = q.next()
	}
	return ok, ahead, admitted
}

// take gives tenant a slot if its turn has come, or puts it in line. The caller holds q.mu.
func (q *StartQueue) take(tenant types.NamespacedName, now time.Time) (ok bool, ahead int) {
	if _, holds := q.starting[tenant]; holds {
		return true, 0
	}
	if !slices.Contains(q.waiting, tenant) {
		q.waiting = append(q.waiting, tenant)
	}
	order := q.order()
	pos := slices.Index(order, tenant)
	if pos < 0 {
		// Its namespace holds all it may: everyone in line goes first.
		return false, len(q.starting) + len(order)
	}
	if pos < q.Max-len(q.starting) {
		q.waiting = slices.DeleteFunc(q.waiting, func(t types.NamespacedName) bool { return t == tenant })
		q.starting[tenant] = now
		return true, 0
	}
	return false, len(q.starting) + pos
}

// order is the waiting tenants that may get slots, in the order they get them: first, in
// arrival order, those whose namespace holds fewer than its share (half the slots), then the
// others in arrival order as long as their namespace holds fewer than all slots but one.
func (q *StartQueue) order() []types.NamespacedName {
	share, limit := max(1, q.Max/2), max(1, q.Max-1)
	holding := map[string]int{}
	for t := range q.starting {
		holding[t.Namespace]++
	}
	var first, rest []types.NamespacedName
	for _, t := range q.waiting {
		if holding[t.Namespace] < share {
			holding[t.Namespace]++
			first = append(first, t)
		} else {
			rest = append(rest, t)
		}
	}
	for _, t := range rest {
		if holding[t.Namespace] < limit {
			holding[t.Namespace]++
			first = append(first, t)
		}
	}
	return first
}

// next is the waiting tenants that Admit would admit now, in order. The caller holds q.mu.
func (q *StartQueue) next() []types.NamespacedName {
	order := q.order()
	return order[:min(len(order), max(0, q.Max-len(q.starting)))]
}

// notify tells Admitted of tenants, except skip (the tenant asking, which knows). The caller
// does not hold q.mu.
func (q *StartQueue) notify(tenants []types.NamespacedName, skip types.NamespacedName) {
	if q.Admitted == nil {
		return
	}
	for _, t := range tenants {
		if t != skip {
			q.Admitted(t)
		}
	}
}

// Done gives tenant's slot back, or its place in the queue: it is Ready, asleep or gone. The
// waiting tenants whose turn that brings are told (Admitted).
func (q *StartQueue) Done(tenant types.NamespacedName) {
	if q == nil {
		return
	}
	q.mu.Lock()
	_, held := q.starting[tenant]
	delete(q.starting, tenant)
	i := slices.Index(q.waiting, tenant)
	if i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
	var admitted []types.NamespacedName
	if held || i >= 0 {
		// A turn freed, or the line changed (a tenant told its turn had come went before
		// taking it): whoever may start now is told, again or for the first time.
		admitted = q.next()
	}
	q.mu.Unlock()
	q.notify(admitted, tenant)
}

// NextTimeout is how long until the first holder's Timeout ends (at least a second), when a
// slot may free without Done; 0 when no tenant holds one.
func (q *StartQueue) NextTimeout(now time.Time) time.Duration {
	if q == nil {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var first time.Duration
	for _, since := range q.starting {
		if in := max(time.Second, since.Add(q.Timeout).Sub(now)); first == 0 || in < first {
			first = in
		}
	}
	return first
}
