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
type StartQueue struct {
	// Max is how many tenants start at once; 0 means no limit.
	Max int
	// Timeout is the longest a tenant holds a slot.
	Timeout time.Duration

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
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.starting == nil {
		q.starting = map[types.NamespacedName]time.Time{}
	}
	for t, since := range q.starting {
		if now.Sub(since) > q.Timeout {
			delete(q.starting, t)
		}
	}
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

// Done gives tenant's slot back, or its place in the queue: it is Ready, asleep or gone.
func (q *StartQueue) Done(tenant types.NamespacedName) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.starting, tenant)
	if i := slices.Index(q.waiting, tenant); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
}
