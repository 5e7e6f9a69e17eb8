package nodepool

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

const (
	us    types.UID = "uid-us"
	other types.UID = "uid-other"
)

var (
	gpu   = map[string]string{"gpu": "true"}
	noGPU = map[string]string{"gpu": "false"}
)

// free is a free node; lent is one lent to tenant uid for request.
func free(name string, lbls map[string]string, available bool) Candidate {
	return Candidate{Name: name, Labels: lbls, Available: available}
}

func lent(name string, lbls map[string]string, uid types.UID, request string) Candidate {
	return Candidate{
		Name: name, Labels: lbls, Available: false,
		Tenant: &v1alpha1.TenantReference{Namespace: "team", Name: "vc", UID: uid, Request: request},
	}
}

func req(name string, count int, sel labels.Selector) Request {
	return Request{Name: name, Count: count, Selector: sel}
}

func TestSelect(t *testing.T) {
	gpuSel := labels.SelectorFromSet(labels.Set(gpu))
	all := labels.Everything()

	tests := []struct {
		name     string
		requests []Request
		pool     []Candidate
		want     Plan
	}{
		{
			name: "nothing asked, nothing lent",
			pool: []Candidate{free("a", nil, true)},
			want: Plan{},
		},
		{
			name:     "keeps nodes lent to the tenant that a request still wants",
			requests: []Request{req("r", 2, gpuSel)},
			pool:     []Candidate{lent("a", gpu, us, "r"), lent("b", gpu, us, "r"), free("c", gpu, true)},
			want:     Plan{Keep: map[string]string{"a": "r", "b": "r"}},
		},
		{
			name:     "kept nodes count towards the request; free ones fill the rest",
			requests: []Request{req("r", 3, gpuSel)},
			pool:     []Candidate{lent("b", gpu, us, "r"), free("a", gpu, true), free("c", gpu, true), free("d", gpu, true)},
			want:     Plan{Keep: map[string]string{"b": "r"}, Assign: map[string]string{"a": "r", "c": "r"}},
		},
		{
			name:     "releases nodes whose request is gone",
			requests: []Request{req("r", 1, all)},
			pool:     []Candidate{lent("a", nil, us, "gone"), lent("b", nil, us, "r")},
			want:     Plan{Keep: map[string]string{"b": "r"}, Release: []string{"a"}},
		},
		{
			name: "releases everything when there are no requests",
			pool: []Candidate{lent("b", gpu, us, "r"), lent("a", gpu, us, "s")},
			want: Plan{Release: []string{"a", "b"}},
		},
		{
			name:     "releases nodes whose labels no longer match and lends a matching one instead",
			requests: []Request{req("r", 1, gpuSel)},
			pool:     []Candidate{lent("a", noGPU, us, "r"), free("b", gpu, true)},
			want:     Plan{Assign: map[string]string{"b": "r"}, Release: []string{"a"}},
		},
		{
			name:     "releases nodes whose labels no longer match, short when nothing replaces them",
			requests: []Request{req("r", 1, gpuSel)},
			pool:     []Candidate{lent("a", nil, us, "r"), free("b", noGPU, true)},
			want: Plan{
				Release: []string{"a"},
				Short:   []Shortfall{{Request: "r", Want: 1, Have: 0}},
			},
		},
		{
			name:     "count drops by one: the last node by name goes back",
			requests: []Request{req("r", 2, all)},
			pool:     []Candidate{lent("c", nil, us, "r"), lent("a", nil, us, "r"), lent("b", nil, us, "r")},
			want:     Plan{Keep: map[string]string{"a": "r", "b": "r"}, Release: []string{"c"}},
		},
		{
			name:     "count drops by two: the last two by name go back",
			requests: []Request{req("r", 1, all)},
			pool:     []Candidate{lent("c", nil, us, "r"), lent("a", nil, us, "r"), lent("b", nil, us, "r")},
			want:     Plan{Keep: map[string]string{"a": "r"}, Release: []string{"b", "c"}},
		},
		{
			name:     "count 0 releases every node of the request and is not short",
			requests: []Request{req("r", 0, all), req("s", 1, all)},
			pool:     []Candidate{lent("a", nil, us, "r"), lent("b", nil, us, "r"), lent("c", nil, us, "s"), free("d", nil, true)},
			want:     Plan{Keep: map[string]string{"c": "s"}, Release: []string{"a", "b"}},
		},
		{
			name:     "assigns free, available, matching nodes in name order",
			requests: []Request{req("r", 2, gpuSel)},
			pool: []Candidate{
				free("d", gpu, true), free("a", noGPU, true), free("c", gpu, true),
				free("b", gpu, true), free("e", gpu, true),
			},
			want: Plan{Assign: map[string]string{"b": "r", "c": "r"}},
		},
		{
			name:     "never takes a node lent to another tenant, even a matching one",
			requests: []Request{req("r", 2, gpuSel)},
			pool:     []Candidate{lent("a", gpu, other, "r"), free("b", gpu, true), lent("c", noGPU, other, "r")},
			want: Plan{
				Assign: map[string]string{"b": "r"},
				Short:  []Shortfall{{Request: "r", Want: 2, Have: 1, LentElsewhere: 1}},
			},
		},
		{
			name:     "a node lent to a former tenant of the same name (other UID) is lent elsewhere",
			requests: []Request{req("r", 1, all)},
			pool:     []Candidate{lent("a", nil, "uid-old", "r")},
			want: Plan{
				Short: []Shortfall{{Request: "r", Want: 1, Have: 0, LentElsewhere: 1}},
			},
		},
		{
			name:     "free but unavailable matching nodes are counted, not lent",
			requests: []Request{req("r", 3, gpuSel)},
			pool: []Candidate{
				free("a", gpu, false), free("b", gpu, true), free("c", gpu, false),
				free("d", noGPU, false), lent("e", gpu, other, "x"),
			},
			want: Plan{
				Assign: map[string]string{"b": "r"},
				Short:  []Shortfall{{Request: "r", Want: 3, Have: 1, LentElsewhere: 1, Unavailable: 2}},
			},
		},
		{
			name:     "no matching node at all",
			requests: []Request{req("r", 2, gpuSel)},
			pool:     []Candidate{free("a", noGPU, true)},
			want:     Plan{Short: []Shortfall{{Request: "r", Want: 2}}},
		},
		{
			name:     "two requests never get the same free node",
			requests: []Request{req("first", 2, all), req("second", 2, gpuSel)},
			pool:     []Candidate{free("a", gpu, true), free("b", gpu, true), free("c", gpu, true)},
			want: Plan{
				Assign: map[string]string{"a": "first", "b": "first", "c": "second"},
				Short:  []Shortfall{{Request: "second", Want: 2, Have: 1}},
			},
		},
		{
			name:     "a node kept for one request is not given to another",
			requests: []Request{req("first", 1, gpuSel), req("second", 1, gpuSel)},
			pool:     []Candidate{lent("a", gpu, us, "second"), free("b", gpu, true)},
			want: Plan{
				Keep:   map[string]string{"a": "second"},
				Assign: map[string]string{"b": "first"},
			},
		},
		{
			name:     "a node being released is not lent again in the same plan",
			requests: []Request{req("r", 1, all)},
			pool:     []Candidate{lent("a", nil, us, "gone")},
			want: Plan{
				Release: []string{"a"},
				Short:   []Shortfall{{Request: "r", Want: 1}},
			},
		},
		{
			name:     "an empty selector (Everything) matches all nodes",
			requests: []Request{req("r", 3, all)},
			pool:     []Candidate{free("a", nil, true), free("b", gpu, true), free("c", map[string]string{"zone": "x"}, true)},
			want:     Plan{Assign: map[string]string{"a": "r", "b": "r", "c": "r"}},
		},
		{
			name:     "an empty selector (SelectorFromSet(nil)) matches all nodes",
			requests: []Request{req("r", 2, labels.SelectorFromSet(nil))},
			pool:     []Candidate{free("a", nil, true), free("b", gpu, true)},
			want:     Plan{Assign: map[string]string{"a": "r", "b": "r"}},
		},
		{
			name:     "release is sorted across the reasons for releasing",
			requests: []Request{req("r", 1, gpuSel)},
			pool: []Candidate{
				lent("a", gpu, us, "r"), lent("y", gpu, us, "r"), // y is an extra
				lent("b", gpu, us, "gone"), lent("z", gpu, us, "gone"), // request gone
				lent("m", noGPU, us, "r"), // labels changed
			},
			want: Plan{Keep: map[string]string{"a": "r"}, Release: []string{"b", "m", "y", "z"}},
		},
		{
			name:     "mixed: keep, assign, release and shortfall for several requests",
			requests: []Request{req("gpu", 2, gpuSel), req("any", 2, all)},
			pool: []Candidate{
				lent("n1", gpu, us, "gpu"),
				lent("n2", noGPU, us, "gpu"),
				lent("n3", gpu, other, "x"),
				free("n4", gpu, false),
				free("n5", gpu, true),
				free("n6", nil, true),
				lent("n7", nil, us, "any"),
			},
			want: Plan{
				Keep:    map[string]string{"n1": "gpu", "n7": "any"},
				Assign:  map[string]string{"n5": "gpu", "n6": "any"},
				Release: []string{"n2"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Select(us, tt.requests, tt.pool)
			assertPlan(t, got, tt.want)
			checkInvariants(t, got, tt.pool)

			// The order of the pool does not matter.
			rng := rand.New(rand.NewPCG(1, uint64(len(tt.name))))
			for i := range 20 {
				pool := slices.Clone(tt.pool)
				rng.Shuffle(len(pool), func(i, j int) { pool[i], pool[j] = pool[j], pool[i] })
				if shuffled := Select(us, tt.requests, pool); !samePlan(shuffled, got) {
					t.Fatalf("shuffle %d: pool order %v changed the plan:\n got %+v\nwant %+v", i, names(pool), shuffled, got)
				}
			}
		})
	}
}

// Select must not reorder the caller's pool.
func TestSelectDoesNotModifyPool(t *testing.T) {
	pool := []Candidate{free("c", nil, true), free("a", nil, true), free("b", nil, true)}
	Select(us, []Request{req("r", 2, labels.Everything())}, pool)
	if got := names(pool); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("pool reordered: %v", got)
	}
}

func TestShortfallString(t *testing.T) {
	s := Shortfall{Request: "big-gpus", Want: 7, Have: 3, LentElsewhere: 11, Unavailable: 13}.String()
	for _, want := range []string{"big-gpus", "3 of 7", "11", "13"} {
		if !strings.Contains(s, want) {
			t.Errorf("Shortfall.String() = %q, does not mention %q", s, want)
		}
	}
	if strings.Index(s, "11") > strings.Index(s, "13") {
		t.Errorf("Shortfall.String() = %q: lent elsewhere (11) should come before unavailable (13)", s)
	}
	why := Shortfall{Request: "r", Want: 1, Unavailable: 2, Why: map[string]string{
		"b": "runs pod t/x-etcd-0 of a tenant's etcd", "a": "quarantined since it was lent to t/y"}}.String()
	if !strings.HasSuffix(why, "(a: quarantined since it was lent to t/y; b: runs pod t/x-etcd-0 of a tenant's etcd)") {
		t.Errorf("Shortfall.String() = %q: want why each node is unavailable, by node", why)
	}
}

// A node that is free but must not be lent (it runs a tenant's control plane, it is
// quarantined) is never assigned, and the shortfall says why.
func TestSelectUnavailableWhy(t *testing.T) {
	pool := []Candidate{
		{Name: "n1", Available: false, Why: "runs pod t/x-etcd-0 of a tenant's etcd"},
		{Name: "n2", Available: true},
	}
	plan := Select("uid", []Request{{Name: "r", Count: 2, Selector: labels.Everything()}}, pool)
	if _, ok := plan.Assign["n1"]; ok || len(plan.Assign) != 1 {
		t.Errorf("assigned %v: want n2 only", plan.Assign)
	}
	if len(plan.Short) != 1 || plan.Short[0].Why["n1"] != pool[0].Why {
		t.Errorf("shortfall %+v: want n1's reason", plan.Short)
	}
}

func assertPlan(t *testing.T, got, want Plan) {
	t.Helper()
	if !samePlan(got, want) {
		t.Errorf("Select() =\n  Keep %v\n  Assign %v\n  Release %v\n  Short %+v\nwant\n  Keep %v\n  Assign %v\n  Release %v\n  Short %+v",
			got.Keep, got.Assign, got.Release, got.Short, want.Keep, want.Assign, want.Release, want.Short)
	}
}

// samePlan compares plans, an empty map or slice being the same as a nil one.
func samePlan(a, b Plan) bool {
	eqMap := func(x, y map[string]string) bool {
		if len(x) == 0 && len(y) == 0 {
			return true
		}
		return reflect.DeepEqual(x, y)
	}
	eqSlice := func(x, y any) bool {
		vx, vy := reflect.ValueOf(x), reflect.ValueOf(y)
		if vx.Len() == 0 && vy.Len() == 0 {
			return true
		}
		return reflect.DeepEqual(x, y)
	}
	return eqMap(a.Keep, b.Keep) && eqMap(a.Assign, b.Assign) &&
		eqSlice(a.Release, b.Release) && eqSlice(a.Short, b.Short)
}

// checkInvariants checks what must hold for any plan: a node is in at most one of Keep,
// Assign and Release; only free, available nodes are assigned; only the tenant's own nodes
// are kept or released; Release is sorted; Keep and Assign are non-nil.
func checkInvariants(t *testing.T, p Plan, pool []Candidate) {
	t.Helper()
	if p.Keep == nil || p.Assign == nil {
		t.Errorf("Keep and Assign must be non-nil maps: %+v", p)
	}
	byName := map[string]Candidate{}
	for _, c := range pool {
		byName[c.Name] = c
	}
	seen := map[string]string{}
	mark := func(n, where string) {
		if prev, ok := seen[n]; ok {
			t.Errorf("node %s is in both %s and %s", n, prev, where)
		}
		seen[n] = where
	}
	for n := range p.Keep {
		mark(n, "Keep")
		if c := byName[n]; c.Tenant == nil || c.Tenant.UID != us {
			t.Errorf("kept node %s is not the tenant's", n)
		}
	}
	for n := range p.Assign {
		mark(n, "Assign")
		if c := byName[n]; c.Tenant != nil || !c.Available {
			t.Errorf("assigned node %s is not free and available", n)
		}
	}
	for _, n := range p.Release {
		mark(n, "Release")
		if c := byName[n]; c.Tenant == nil || c.Tenant.UID != us {
			t.Errorf("released node %s is not the tenant's", n)
		}
	}
	if !slices.IsSorted(p.Release) {
		t.Errorf("Release is not sorted: %v", p.Release)
	}
}

func names(pool []Candidate) []string {
	out := make([]string, len(pool))
	for i, c := range pool {
		out[i] = c.Name
	}
	return out
}

// A larger pool: many requests and nodes, checked only for invariants and order independence.
func TestSelectLargePoolInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	zones := []string{"a", "b", "c"}
	for round := range 50 {
		var pool []Candidate
		for i := range 30 {
			name := "node-" + strconv.Itoa(i)
			lbls := map[string]string{"zone": zones[rng.IntN(len(zones))]}
			switch rng.IntN(4) {
			case 0:
				pool = append(pool, lent(name, lbls, other, "x"))
			case 1:
				pool = append(pool, lent(name, lbls, us, []string{"za", "zb", "any", "gone"}[rng.IntN(4)]))
			default:
				pool = append(pool, free(name, lbls, rng.IntN(3) > 0))
			}
		}
		requests := []Request{
			req("za", rng.IntN(6), labels.SelectorFromSet(labels.Set{"zone": "a"})),
			req("zb", rng.IntN(6), labels.SelectorFromSet(labels.Set{"zone": "b"})),
			req("any", rng.IntN(6), labels.Everything()),
		}
		got := Select(us, requests, pool)
		checkInvariants(t, got, pool)
		// Every request has exactly min(count, what it reports) nodes, and reports a
		// shortfall exactly when it has fewer than it wants.
		per := map[string]int{}
		for _, r := range got.Keep {
			per[r]++
		}
		for _, r := range got.Assign {
			per[r]++
		}
		short := map[string]Shortfall{}
		for _, s := range got.Short {
			short[s.Request] = s
		}
		for _, r := range requests {
			s, isShort := short[r.Name]
			switch {
			case per[r.Name] > r.Count:
				t.Errorf("round %d: request %s has %d nodes, wants %d", round, r.Name, per[r.Name], r.Count)
			case per[r.Name] < r.Count && (!isShort || s.Have != per[r.Name] || s.Want != r.Count):
				t.Errorf("round %d: request %s has %d of %d nodes, shortfall %+v", round, r.Name, per[r.Name], r.Count, s)
			case per[r.Name] == r.Count && isShort:
				t.Errorf("round %d: request %s is met but reported short: %+v", round, r.Name, s)
			}
		}
		// A short request leaves no free, available, matching node unlent.
		for _, s := range got.Short {
			var sel labels.Selector
			for _, r := range requests {
				if r.Name == s.Request {
					sel = r.Selector
				}
			}
			for _, c := range pool {
				_, assigned := got.Assign[c.Name]
				if c.Tenant == nil && c.Available && !assigned && sel.Matches(labels.Set(c.Labels)) {
					t.Errorf("round %d: request %s is short but free node %s was left", round, s.Request, c.Name)
				}
			}
		}
		slices.Reverse(pool)
		if rev := Select(us, requests, pool); !samePlan(rev, got) {
			t.Errorf("round %d: reversing the pool changed the plan", round)
		}
	}
}
