package clustertree

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
)

// The tenant's share of the shared nodes (Config.Quota). Its scheduler sees it as the virtual
// node's allocatable resources, and clustertree admits pods against it as a kubelet admits
// them against its node's: a pod bound to the shared node that does not fit beside the
// tenant's other pods there fails with reason OutOf<resource>, and an in-place resize that
// does not fit is not made. Without it, one tenant could ask the host for every shared node's
// CPU, memory and pod slots, leaving none to the others (or to the host's own pods).

// Allocatable is what the virtual node offers its tenant: the host's shared capacity, each
// resource the quota names at most the quota's amount. With a quota, it is allowed by list:
// CPU, memory, pods and ephemeral storage, and the other resources (hugepages, devices such as
// GPUs) only when the quota names them; a tenant would otherwise reserve the host's of those
// for nothing its share allows. Without a quota, all of the capacity.
func Allocatable(capacity, quota corev1.ResourceList) corev1.ResourceList {
	if quota == nil {
		return capacity.DeepCopy()
	}
	out := corev1.ResourceList{}
	for name, c := range capacity {
		q, named := quota[name]
		switch {
		case named && q.Cmp(c) < 0:
			out[name] = q.DeepCopy()
		case named || slices.Contains(unnamedResources, name):
			out[name] = c.DeepCopy()
		}
	}
	return out
}

// unnamedResources are those a quota that does not name them leaves at the host's capacity.
var unnamedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage}

// quotaError says which resource of the tenant's quota a pod does not fit in.
type quotaError struct {
	name                   corev1.ResourceName
	requested, used, quota resource.Quantity
	unnamed                bool // a resource the quota does not name and leaves out
}

func (e *quotaError) Error() string {
	if e.unnamed {
		return fmt.Sprintf("the tenant's share of the shared nodes does not include %s (requested %s): the platform names the resources its share holds besides CPU, memory, pods and ephemeral storage",
			e.name, e.requested.String())
	}
	return fmt.Sprintf("the tenant's share of the shared nodes has no room for it: %s: requested %s, %s in use of %s",
		e.name, e.requested.String(), e.used.String(), e.quota.String())
}

// Reason is the kubelet's for a pod its node has no room for: OutOfcpu, OutOfmemory, OutOfpods.
func (e *quotaError) Reason() string { return "OutOf" + string(e.name) }

// admission is a pod's requests as admitted, counted until the host pod cache holds them.
type admission struct {
	requests corev1.ResourceList
	at       time.Time
}

// admissionMemory is how long an admission counts in place of what the host pod cache says of
// the pod: far longer than the cache takes to see a write.
const admissionMemory = 30 * time.Second

// podRequests is what a host pod asks the host for, as the host's scheduler counts it (init
// containers, sidecars and pod-level resources included), and one pod slot.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	out := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out[corev1.ResourcePods] = resource.MustParse("1")
	return out
}

// admit admits a tenant pod, whose host pod asks for requests, if it fits the tenant's quota
// beside its other pods on the shared node; on a resize only what it asks for more than before
// is checked, as a kubelet does. An admitted pod counts with these requests at once, before
// the host pod cache sees it. Without a quota it admits every pod.
func (p *provider) admit(uid types.UID, requests corev1.ResourceList) error {
	if p.quota == nil {
		return nil
	}
	p.admitMu.Lock()
	defer p.admitMu.Unlock()
	others, leaving, had := p.inUse(uid)
	for name, limit := range p.quota {
		want, asked := requests[name]
		if !asked || want.Cmp(had[name]) <= 0 {
			continue
		}
		used := others[name]
		total := used.DeepCopy()
		total.Add(want)
		if total.Cmp(limit) <= 0 {
			continue
		}
		if total.Sub(leaving[name]); total.Cmp(limit) <= 0 {
			// The tenant's scheduler no longer counts the pods on their way out, the host
			// still runs them: the pod waits for them rather than fail (its controller would
			// only make another, which the scheduler would place here again).
			return fmt.Errorf("waiting for the tenant's pods leaving the shared node to free %s (%s requested, %s in use of %s)",
				name, want.String(), used.String(), limit.String())
		}
		return &quotaError{name: name, requested: want, used: used, quota: limit}
	}
	for name, want := range requests {
		if _, named := p.quota[name]; !named && !slices.Contains(unnamedResources, name) && !want.IsZero() {
			return &quotaError{name: name, requested: want, unnamed: true}
		}
	}
	p.admitted[uid] = admission{requests: requests, at: time.Now()}
	return nil
}

// forget drops what admit recorded of a pod whose host pod was not written after all.
func (p *provider) forget(uid types.UID) {
	if p.quota == nil {
		return
	}
	p.admitMu.Lock()
	defer p.admitMu.Unlock()
	delete(p.admitted, uid)
}

// inUse is what the tenant's running pods on the shared node ask for, but the pod uid, and
// what that one asks for: the host pods that have not ended, each with its latest admitted
// requests if the cache may not show them yet, and the pods admitted whose host pods the cache
// does not hold yet. leaving is the part of others that host pods on their way out ask for:
// deleted, or whose tenant pod is gone or has ended, which the tenant's scheduler no longer
// counts. The caller holds admitMu.
func (p *provider) inUse(uid types.UID) (others, leaving, had corev1.ResourceList) {
	others, leaving, had = corev1.ResourceList{}, corev1.ResourceList{}, corev1.ResourceList{}
	now := time.Now()
	for u, a := range p.admitted {
		if now.Sub(a.at) > admissionMemory {
			delete(p.admitted, u)
		}
	}
	hostPods, _ := p.hostPods.Pods(p.tr.HostNamespace).List(labels.SelectorFromSet(HostSelector(p.tr.VirtualCluster)))
	seen := map[types.UID]bool{}
	for _, hp := range hostPods {
		u := types.UID(hp.Annotations[AnnotationTenantUID])
		seen[u] = true
		if podutil.IsPodTerminal(hp) {
			continue
		}
		requests := podRequests(hp)
		if a, ok := p.admitted[u]; ok {
			requests = a.requests
		}
		if u == uid {
			had = requests
			continue
		}
		others = quotav1.Add(others, requests)
		if p.leaving(hp) {
			leaving = quotav1.Add(leaving, requests)
		}
	}
	for u, a := range p.admitted {
		if !seen[u] && u != uid {
			others = quotav1.Add(others, a.requests)
		}
	}
	return others, leaving, had
}

// leaving says whether a host pod is on its way out: deleted, or its tenant pod gone or ended.
func (p *provider) leaving(hp *corev1.Pod) bool {
	if hp.DeletionTimestamp != nil {
		return true
	}
	tenant, err := p.tenantPods.Pods(hp.Annotations[AnnotationTenantNamespace]).Get(hp.Annotations[AnnotationTenantName])
	return err != nil || string(tenant.UID) != hp.Annotations[AnnotationTenantUID] || podutil.IsPodTerminal(tenant)
}

// ParseQuota reads a quota written as the operator's --shared-node-quota takes it:
// comma-separated name=quantity pairs ("cpu=2,memory=4Gi,pods=110"), a resource a pod may
// request (cpu, memory, ephemeral-storage, hugepages-<size>, an extended resource such as
// nvidia.com/gpu) or pods. Empty: no quota (nil).
func ParseQuota(s string) (corev1.ResourceList, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for _, pair := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		rn := corev1.ResourceName(strings.TrimSpace(name))
		if !ok || rn == "" {
			return nil, fmt.Errorf("%q: want name=quantity, such as cpu=2", pair)
		}
		if _, dup := out[rn]; dup {
			return nil, fmt.Errorf("%s: given twice", rn)
		}
		switch {
		case rn == corev1.ResourcePods, rn == corev1.ResourceCPU, rn == corev1.ResourceMemory, rn == corev1.ResourceEphemeralStorage,
			v1helper.IsHugePageResourceName(rn), v1helper.IsExtendedResourceName(rn):
		default:
			return nil, fmt.Errorf("%s: not a resource pods request (cpu, memory, ephemeral-storage, hugepages-<size>, an extended resource such as example.com/gpu) nor pods", rn)
		}
		q, err := resource.ParseQuantity(strings.TrimSpace(value))
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a quantity: %w", rn, value, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s: %s is negative", rn, q.String())
		}
		out[rn] = q
	}
	return out, nil
}

// FormatQuota writes a quota as ParseQuota reads it, its resources in order.
func FormatQuota(quota corev1.ResourceList) string {
	pairs := make([]string, 0, len(quota))
	for name, q := range quota {
		pairs = append(pairs, string(name)+"="+q.String())
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}
