// Package tenantguard is the admission the tenant's own apiserver applies to what the tenant's
// admin writes, so that a tenant cannot reach past its walls through its own cluster:
//
//   - Service addresses stay in the tenant's Service range. The range is the tenant's slice of
//     the host's tenant range; the host serves the tenant's Services under the same ClusterIPs
//     (clustertree), so an address outside the slice would be the host's or another tenant's.
//     ServiceCIDRs and ClusterIPs outside the range are refused, and so are externalIPs, which
//     would make the tenant's kube-proxy on lent nodes capture traffic to any address.
//   - Pods bound to a node meet Pod Security "baseline" (no privileged containers, host
//     namespaces, host paths or host ports), whatever the namespace's labels say: a lent node is
//     a host machine, and the tenant's admin must not become its root. The one exception is the
//     operator's kube-proxy DaemonSet, exactly as the operator builds it. A platform that trusts
//     a tenant grants "privileged" per VirtualCluster.
//
// The guard is wired into the apiserver's admission chain by nest-controlplane itself, not as
// a plugin a flag could turn off, and its settings are flags the operator owns.
package tenantguard

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	api "k8s.io/kubernetes/pkg/apis/core"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/networking"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// Name is the guard's name in admission errors and logs.
const Name = "KubeNestTenantGuard"

// Config is what the guard enforces.
type Config struct {
	// ServiceRanges are the tenant's Service ranges (--service-cluster-ip-range).
	ServiceRanges []netip.Prefix
	// NodePodSecurity is the Pod Security level every pod bound to a node must meet:
	// baseline, or privileged (nothing checked) where the platform granted it.
	NodePodSecurity psapi.Level
	// KubeProxyImage is the image of the operator's kube-proxy DaemonSet, whose pods alone may
	// be privileged under baseline (controlplane.IsTenantKubeProxyPod).
	KubeProxyImage string
	// Pod reads a pod, for bindings (which carry only its name).
	Pod func(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// Guard is the admission handler.
type Guard struct {
	*admission.Handler
	cfg Config
	// evaluator checks pods; kubeProxy checks the operator's kube-proxy, without the checks of
	// what its pod is made to have (privileged, host network, its two host paths).
	evaluator, kubeProxy policy.Evaluator
	level                psapi.LevelVersion
}

var _ admission.ValidationInterface = &Guard{}

// New makes a guard.
func New(cfg Config) (*Guard, error) {
	switch cfg.NodePodSecurity {
	case psapi.LevelBaseline, psapi.LevelPrivileged:
	default:
		return nil, fmt.Errorf("node pod security level %q: must be %s or %s", cfg.NodePodSecurity, psapi.LevelBaseline, psapi.LevelPrivileged)
	}
	if len(cfg.ServiceRanges) == 0 {
		return nil, fmt.Errorf("the tenant's Service ranges must be set")
	}
	checks := policy.DefaultChecks()
	evaluator, err := policy.NewEvaluator(checks, nil)
	if err != nil {
		return nil, err
	}
	kubeProxy, err := policy.NewEvaluator(slices.DeleteFunc(checks, func(c policy.Check) bool {
		return c.ID == "privileged" || c.ID == "hostNamespaces" || c.ID == "hostPathVolumes"
	}), nil)
	if err != nil {
		return nil, err
	}
	return &Guard{
		Handler:   admission.NewHandler(admission.Create, admission.Update),
		cfg:       cfg,
		evaluator: evaluator,
		kubeProxy: kubeProxy,
		level:     psapi.LevelVersion{Level: cfg.NodePodSecurity, Version: psapi.LatestVersion()},
	}, nil
}

// Validate refuses what would reach past the tenant.
func (g *Guard) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	gr := a.GetResource().GroupResource()
	switch {
	case gr == api.Resource("services") && a.GetSubresource() == "":
		return g.service(a)
	case gr == networking.Resource("servicecidrs") && a.GetSubresource() == "":
		return g.serviceCIDR(a)
	case gr == api.Resource("pods"):
		return g.pod(ctx, a)
	}
	return nil
}

func (g *Guard) forbidden(a admission.Attributes, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(),
		fmt.Errorf("%s: %s", Name, errs.ToAggregate().Error()))
}

// service keeps a Service's addresses in the tenant's range.
func (g *Guard) service(a admission.Attributes) error {
	svc, ok := a.GetObject().(*api.Service)
	if !ok {
		return nil
	}
	var old *api.Service
	if o, ok := a.GetOldObject().(*api.Service); ok {
		old = o
	}
	var errs field.ErrorList
	spec := field.NewPath("spec")
	for i, ip := range svc.Spec.ClusterIPs {
		if ip == "" || ip == api.ClusterIPNone {
			continue
		}
		if msg := g.outsideRange(ip); msg != "" {
			errs = append(errs, field.Forbidden(spec.Child("clusterIPs").Index(i), msg))
		}
	}
	if ip := svc.Spec.ClusterIP; len(svc.Spec.ClusterIPs) == 0 && ip != "" && ip != api.ClusterIPNone {
		if msg := g.outsideRange(ip); msg != "" {
			errs = append(errs, field.Forbidden(spec.Child("clusterIP"), msg))
		}
	}
	if len(svc.Spec.ExternalIPs) > 0 && (old == nil || !slices.Equal(old.Spec.ExternalIPs, svc.Spec.ExternalIPs)) {
		errs = append(errs, field.Forbidden(spec.Child("externalIPs"),
			"external IPs are not allowed in a KubeNest tenant: the tenant's kube-proxy would capture traffic to those addresses on the host nodes lent to it"))
	}
	return g.forbidden(a, errs)
}

// serviceCIDR keeps ServiceCIDRs in the tenant's range.
func (g *Guard) serviceCIDR(a admission.Attributes) error {
	sc, ok := a.GetObject().(*networking.ServiceCIDR)
	if !ok {
		return nil
	}
	var errs field.ErrorList
	for i, c := range sc.Spec.CIDRs {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			continue // validation says so
		}
		if !g.covers(p) {
			errs = append(errs, field.Forbidden(field.NewPath("spec", "cidrs").Index(i),
				fmt.Sprintf("%s is outside this tenant's Service range %s: the host serves the tenant's Services under the same addresses, and every other address is the host's or another tenant's", c, g.ranges())))
		}
	}
	return g.forbidden(a, errs)
}

func (g *Guard) outsideRange(ip string) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "" // validation says so
	}
	for _, r := range g.cfg.ServiceRanges {
		if r.Contains(addr.Unmap()) {
			return ""
		}
	}
	return fmt.Sprintf("%s is outside this tenant's Service range %s", ip, g.ranges())
}

func (g *Guard) covers(p netip.Prefix) bool {
	for _, r := range g.cfg.ServiceRanges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr().Unmap()) {
			return true
		}
	}
	return false
}

func (g *Guard) ranges() string {
	var s []string
	for _, r := range g.cfg.ServiceRanges {
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// pod checks a pod when it is bound to a node: created with spec.nodeName, bound by the
// scheduler, given ephemeral containers, or changed while bound.
func (g *Guard) pod(ctx context.Context, a admission.Attributes) error {
	if g.cfg.NodePodSecurity == psapi.LevelPrivileged {
		return nil
	}
	switch a.GetSubresource() {
	case "binding":
		b, ok := a.GetObject().(*api.Binding)
		if !ok || g.cfg.Pod == nil {
			return nil
		}
		pod, err := g.cfg.Pod(ctx, a.GetNamespace(), b.Name)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: reading pod %s/%s to check it before it is bound: %w", Name, a.GetNamespace(), b.Name, err))
		}
		return g.check(a, pod, b.Target.Name)
	case "", "ephemeralcontainers":
	default:
		return nil
	}
	in, ok := a.GetObject().(*api.Pod)
	if !ok || in.Spec.NodeName == "" {
		return nil
	}
	if old, ok := a.GetOldObject().(*api.Pod); ok && a.GetSubresource() == "" && unchangedForPodSecurity(old, in) {
		return nil
	}
	pod := &corev1.Pod{}
	if err := apiv1.Convert_core_Pod_To_v1_Pod(in, pod, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	return g.check(a, pod, in.Spec.NodeName)
}

// check evaluates pod, to run on node, against the node pod security level.
func (g *Guard) check(a admission.Attributes, pod *corev1.Pod, node string) error {
	evaluator := g.evaluator
	if g.cfg.KubeProxyImage != "" && controlplane.IsTenantKubeProxyPod(pod, g.cfg.KubeProxyImage) {
		evaluator = g.kubeProxy
	}
	result := policy.AggregateCheckResults(evaluator.EvaluatePod(g.level, &pod.ObjectMeta, &pod.Spec))
	if result.Allowed {
		return nil
	}
	return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, fmt.Errorf(
		"%s: pods on this cluster's nodes must meet Pod Security %q, and pod %s/%s, to run on node %s, does not: %s (nodes lent to a KubeNest tenant are host machines; the platform may grant privileged pods per VirtualCluster with spec.nodes.podSecurity)",
		Name, g.cfg.NodePodSecurity, pod.Namespace, pod.Name, node, result.ForbiddenDetail()))
}

// unchangedForPodSecurity says whether an update leaves the pod's spec, images included (the
// kube-proxy exemption holds for one image only), and the annotations that carry security
// profiles as they were: labels and the like change on pods admitted before, and nothing new
// runs.
func unchangedForPodSecurity(old, in *api.Pod) bool {
	if !equality.Semantic.DeepEqual(old.Spec, in.Spec) {
		return false
	}
	for _, ann := range []map[string]string{in.Annotations, old.Annotations} {
		for k := range ann {
			if (strings.Contains(k, "apparmor") || strings.Contains(k, "seccomp")) && in.Annotations[k] != old.Annotations[k] {
				return false
			}
		}
	}
	return true
}
