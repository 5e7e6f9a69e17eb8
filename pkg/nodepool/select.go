// Package nodepool decides which host nodes are lent to which tenant, and how a lent node
// moves between the host and the tenant. The decisions here are pure: they take what the
// operator or the node agent observed and say what to do.
package nodepool

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// ControlPlaneSelector selects every tenant's etcd and control-plane pods in the host: a node
// that runs one is never lent, since lending drains it.
var ControlPlaneSelector = func() labels.Selector {
	component, err := labels.NewRequirement(naming.LabelComponent, selection.In, []string{naming.ComponentEtcd, naming.ComponentControlPlane})
	if err != nil {
		panic(err)
	}
	tenant, err := labels.NewRequirement(naming.LabelVirtualCluster, selection.Exists, nil)
	if err != nil {
		panic(err)
	}
	return labels.NewSelector().Add(*component, *tenant)
}()

// Candidate is a lendable node as selection sees it.
type Candidate struct {
	// Name of the node and of its PoolNode.
	Name string
	// Labels of the host Node.
	Labels map[string]string
	// Tenant is who the node is lent to; nil when it is free.
	Tenant *v1alpha1.TenantReference
	// Available says a free node can be lent now: it is in the host, Ready, and its node agent
	// reports; and it runs no tenant's control plane and is not quarantined.
	Available bool
	// Why says, for a free node that is not available, why not.
	Why string
}

// Request asks for Count nodes matching Selector.
type Request struct {
	Name     string
	Count    int
	Selector labels.Selector
}

// Shortfall says a request cannot be met: it wants Want nodes and has Have; of the other nodes
// matching its selector, LentElsewhere are lent to other tenants and Unavailable are free but
// not Ready or without a reporting node agent.
type Shortfall struct {
	Request       string
	Want, Have    int
	LentElsewhere int
	Unavailable   int
	// Why are the reasons the unavailable nodes gave, by node name.
	Why map[string]string
}

func (s Shortfall) String() string {
	msg := fmt.Sprintf("not enough free nodes for request %s: it has %d of %d; of the other matching nodes %d are lent to other tenants and %d are not available",
		s.Request, s.Have, s.Want, s.LentElsewhere, s.Unavailable)
	var why []string
	for _, n := range slices.Sorted(maps.Keys(s.Why)) {
		why = append(why, n+": "+s.Why[n])
	}
	if len(why) > 0 {
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return msg
}

// Plan is what selection decided for one tenant.
type Plan struct {
	// Keep are nodes already lent to the tenant that stay, by node name: their request.
	Keep map[string]string
	// Assign are nodes to lend now, by node name: their request.
	Assign map[string]string
	// Release are nodes to give back to the host: no request wants them any more.
	Release []string
	// Short are the requests that cannot be met in full.
	Short []Shortfall
}

// Select decides which nodes the tenant with uid should have for its requests. It keeps what
// the tenant has when a request still wants it, gives back what no request wants (extra nodes
// first by name, last to first), and lends free, available, matching nodes by name. It never
// takes a node lent to another tenant.
func Select(uid types.UID, requests []Request, pool []Candidate) Plan {
	plan := Plan{Keep: map[string]string{}, Assign: map[string]string{}}
	pool = slices.Clone(pool)
	slices.SortFunc(pool, func(a, b Candidate) int { return cmp.Compare(a.Name, b.Name) })

	wanted := map[string]Request{}
	for _, r := range requests {
		wanted[r.Name] = r
	}
	// What the tenant has, per request, that the request still wants.
	have := map[string][]string{}
	for _, c := range pool {
		if c.Tenant == nil || c.Tenant.UID != uid {
			continue
		}
		r, ok := wanted[c.Tenant.Request]
		if !ok || !r.Selector.Matches(labels.Set(c.Labels)) {
			plan.Release = append(plan.Release, c.Name)
			continue
		}
		have[r.Name] = append(have[r.Name], c.Name)
	}
	for _, r := range requests {
		nodes := have[r.Name]
		if extra := len(nodes) - r.Count; extra > 0 {
			plan.Release = append(plan.Release, nodes[len(nodes)-extra:]...)
			nodes = nodes[:r.Count]
		}
		for _, n := range nodes {
			plan.Keep[n] = r.Name
		}
	}
	for _, r := range requests {
		got := min(len(have[r.Name]), r.Count)
		short := Shortfall{Request: r.Name, Want: r.Count}
		for _, c := range pool {
			if !r.Selector.Matches(labels.Set(c.Labels)) {
				continue
			}
			_, taken := plan.Assign[c.Name]
			switch {
			case c.Tenant != nil && c.Tenant.UID != uid:
				short.LentElsewhere++
			case c.Tenant != nil || taken:
			case !c.Available:
				short.Unavailable++
				if c.Why != "" {
					if short.Why == nil {
						short.Why = map[string]string{}
					}
					short.Why[c.Name] = c.Why
				}
			case got < r.Count:
				plan.Assign[c.Name] = r.Name
				got++
			}
		}
		if got < r.Count {
			short.Have = got
			plan.Short = append(plan.Short, short)
		}
	}
	slices.Sort(plan.Release)
	return plan
}
