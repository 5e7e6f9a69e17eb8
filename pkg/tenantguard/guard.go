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
//     a tenant grants "privileged" per VirtualCluster. Under baseline also: no PersistentVolume
//     of the node's own files or devices (hostPath, local, flexVolume, fc), which a baseline
//     pod could mount through a claim; no exec, attach or port-forward into a pod bound to a
//     node that baseline would not admit (the kube-proxy); and none of the kubelet's debugging
//     handlers (exec, run, attach, port-forward, checkpoint) through nodes/proxy, nor straight
//     at a kubelet (NodeProxyAuthorizer): the kubelet's API runs any command in any container.
//
// The guard is wired into the apiserver's admission chain by nest-controlplane itself, not as
// a plugin a flag could turn off, and its settings are flags the operator owns.
package tenantguard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/component-helpers/storage/ephemeral"
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
	// Claim and Volume read a PersistentVolumeClaim and a PersistentVolume, for the volumes a
	// pod mounts by claim when it is bound to a node (nil: not checked).
	Claim  func(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	Volume func(ctx context.Context, name string) (*corev1.PersistentVolume, error)
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
		Handler:   admission.NewHandler(admission.Create, admission.Update, admission.Connect),
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
	case g.cfg.NodePodSecurity == psapi.LevelPrivileged:
		return nil // the rest keeps what runs on nodes at baseline
	case gr == api.Resource("pods") && a.GetOperation() == admission.Connect:
		return g.podConnect(ctx, a)
	case gr == api.Resource("pods"), gr == api.Resource("bindings"):
		return g.pod(ctx, a)
	case gr == api.Resource("persistentvolumes") && a.GetSubresource() == "":
		return g.persistentVolume(a)
	case gr == api.Resource("nodes") && a.GetSubresource() == "proxy" && a.GetOperation() == admission.Connect:
		return g.nodeProxy(a)
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

// pod checks a pod whenever it is written (created, changed, given ephemeral containers) and
// when it is bound to a node. Checking it only once bound would race: a binding commits to the
// pod as stored when it lands, which an update made after the guard read it may have changed.
// So every version of a pod is one that may run on a node.
func (g *Guard) pod(ctx context.Context, a admission.Attributes) error {
	subresource := a.GetSubresource()
	if a.GetResource().Resource == "bindings" {
		// POST /api/v1/namespaces/{ns}/bindings, the older form of pods/binding.
		subresource = "binding"
	}
	switch subresource {
	case "binding":
		b, ok := a.GetObject().(*api.Binding)
		if !ok || g.cfg.Pod == nil {
			return nil
		}
		pod, err := g.cfg.Pod(ctx, a.GetNamespace(), b.Name)
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: reading pod %s/%s to check it before it is bound: %w", Name, a.GetNamespace(), b.Name, err))
		}
		if err := g.check(a, pod, b.Target.Name); err != nil {
			return err
		}
		return g.claims(ctx, a, pod, b.Target.Name)
	case "", "ephemeralcontainers":
	default:
		return nil
	}
	in, ok := a.GetObject().(*api.Pod)
	if !ok {
		return nil
	}
	if old, ok := a.GetOldObject().(*api.Pod); ok && a.GetSubresource() == "" && unchangedForPodSecurity(old, in) {
		return nil
	}
	pod := &corev1.Pod{}
	if err := apiv1.Convert_core_Pod_To_v1_Pod(in, pod, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	if err := g.check(a, pod, in.Spec.NodeName); err != nil {
		return err
	}
	if in.Spec.NodeName == "" || a.GetOperation() != admission.Create {
		return nil
	}
	return g.claims(ctx, a, pod, in.Spec.NodeName)
}

// claims refuses, as pod is bound to node, a claim of it bound to a PersistentVolume of a kind
// the node itself mounts: the guard refuses those as they are written under baseline, but
// one may have been written while privileged pods were granted (its claims outlive the grant).
// A claim not bound yet is left to its binding, which can only pick a volume that exists.
func (g *Guard) claims(ctx context.Context, a admission.Attributes, pod *corev1.Pod, node string) error {
	if g.cfg.Claim == nil || g.cfg.Volume == nil {
		return nil
	}
	for i, v := range pod.Spec.Volumes {
		var claim string
		switch {
		case v.PersistentVolumeClaim != nil:
			claim = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			claim = ephemeral.VolumeClaimName(pod, &v)
		default:
			continue
		}
		pvc, err := g.cfg.Claim(ctx, pod.Namespace, claim)
		if apierrors.IsNotFound(err) || (err == nil && pvc.Spec.VolumeName == "") {
			continue
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: reading claim %s/%s of pod %s to check its volume: %w", Name, pod.Namespace, claim, pod.Name, err))
		}
		pv, err := g.cfg.Volume(ctx, pvc.Spec.VolumeName)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("%s: reading PersistentVolume %s of claim %s/%s: %w", Name, pvc.Spec.VolumeName, pod.Namespace, claim, err))
		}
		if pv.Spec.CSI != nil {
			continue
		}
		return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, fmt.Errorf(
			"%s: spec.volumes[%d]: claim %s is bound to PersistentVolume %s, a %s volume the node itself mounts from its own files, devices, drivers or network identity, which pods of this cluster must not reach on node %s under Pod Security %q (it was made while privileged pods were granted; the platform may grant them again with spec.nodes.podSecurity)",
			Name, i, claim, pv.Name, setField(pv.Spec.PersistentVolumeSource), node, g.cfg.NodePodSecurity))
	}
	return nil
}

// check evaluates pod, to run on node (empty: not bound yet), against the node pod security
// level, and its volumes against nodeVolumes.
func (g *Guard) check(a admission.Attributes, pod *corev1.Pod, node string) error {
	where := "on node " + node
	if node == "" {
		where = "on this cluster's nodes"
	}
	refuse := func(why string) error {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, fmt.Errorf(
			"%s: pods on this cluster's nodes must meet Pod Security %q, and pod %s/%s, to run %s, does not: %s (nodes lent to a KubeNest tenant are host machines; the platform may grant privileged pods per VirtualCluster with spec.nodes.podSecurity)",
			Name, g.cfg.NodePodSecurity, pod.Namespace, pod.Name, where, why))
	}
	evaluator, kubeProxy := g.evaluator, g.cfg.KubeProxyImage != "" && controlplane.IsTenantKubeProxyPod(pod, g.cfg.KubeProxyImage)
	if kubeProxy {
		evaluator = g.kubeProxy
	}
	if result := policy.AggregateCheckResults(evaluator.EvaluatePod(g.level, &pod.ObjectMeta, &pod.Spec)); !result.Allowed {
		return refuse(result.ForbiddenDetail())
	}
	if why := nodeVolumes(pod.Spec.Volumes); why != "" && !kubeProxy {
		return refuse(why)
	}
	return nil
}

// nodeVolumes says which of a pod's volumes baseline does not keep off the node's own disks,
// devices or network identity, or "": Pod Security baseline forbids hostPath only, while the
// kubelet also mounts, for fc and iscsi, a device the pod names (a local disk by its id),
// for flexVolume, a driver installed on the node, for gitRepo, a git run on the host, and for
// nfs, cephfs and the like, a server that trusts the node's address. The volumes restricted
// allows, and image volumes, are what a pod of a lent node may have.
func nodeVolumes(volumes []corev1.Volume) string {
	for i, v := range volumes {
		s := v.VolumeSource
		if s.ConfigMap != nil || s.CSI != nil || s.DownwardAPI != nil || s.EmptyDir != nil || s.Ephemeral != nil ||
			s.PersistentVolumeClaim != nil || s.Projected != nil || s.Secret != nil || s.Image != nil {
			continue
		}
		kind := setField(s)
		return fmt.Sprintf("spec.volumes[%d].%s: a %s volume is mounted by the node from its own devices, drivers or network identity; pods of lent nodes may have configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected and secret volumes", i, kind, kind)
	}
	return ""
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

// persistentVolume refuses, under baseline, volumes the node itself would mount from its own
// files, devices, drivers or network identity (hostPath, local, fc, iscsi, flexVolume, nfs and
// the other in-tree kinds; nodeVolumes says why for pods): a baseline pod mounts any claim,
// and the kubelet mounts what the claim's volume names. Volumes of a CSI driver are the
// driver's to mount.
func (g *Guard) persistentVolume(a admission.Attributes) error {
	pv, ok := a.GetObject().(*api.PersistentVolume)
	if !ok {
		return nil
	}
	if old, ok := a.GetOldObject().(*api.PersistentVolume); ok && equality.Semantic.DeepEqual(old.Spec.PersistentVolumeSource, pv.Spec.PersistentVolumeSource) {
		return nil // admitted before (the binder's and the protection controller's updates)
	}
	if pv.Spec.CSI != nil {
		return nil
	}
	v1pv := &corev1.PersistentVolume{}
	if err := apiv1.Convert_core_PersistentVolume_To_v1_PersistentVolume(pv, v1pv, nil); err != nil {
		return apierrors.NewInternalError(err)
	}
	kind := setField(v1pv.Spec.PersistentVolumeSource)
	return g.forbidden(a, field.ErrorList{field.Forbidden(field.NewPath("spec", kind), fmt.Sprintf(
		"%s volumes are mounted by the node from its own files, devices, drivers or network identity, which a pod of this cluster must not reach on the host machines lent to it; PersistentVolumes of CSI drivers are allowed (Pod Security %q; the platform may grant privileged pods per VirtualCluster with spec.nodes.podSecurity)",
		kind, g.cfg.NodePodSecurity))})
}

// setField is the JSON name of the field set in a v1 volume source (a struct of pointers, one
// set), or "volume".
func setField(source any) string {
	if b, err := json.Marshal(source); err == nil {
		var fields map[string]json.RawMessage
		if json.Unmarshal(b, &fields) == nil {
			for k, v := range fields {
				if string(v) != "null" {
					return k
				}
			}
		}
	}
	return "volume"
}

// podConnect refuses, under baseline, exec, attach and port-forward into a pod bound to a
// node that baseline would not admit: the operator's kube-proxy (privileged, on the host's
// network), or a pod admitted while privileged pods were granted.
func (g *Guard) podConnect(ctx context.Context, a admission.Attributes) error {
	if g.cfg.Pod == nil {
		return nil
	}
	switch a.GetSubresource() {
	case "exec", "attach", "portforward":
	default:
		return nil
	}
	pod, err := g.cfg.Pod(ctx, a.GetNamespace(), a.GetName())
	if apierrors.IsNotFound(err) {
		return nil // the request fails on its own
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("%s: reading pod %s/%s to check it before %s: %w", Name, a.GetNamespace(), a.GetName(), a.GetSubresource(), err))
	}
	if pod.Spec.NodeName == "" {
		return nil
	}
	result := policy.AggregateCheckResults(g.evaluator.EvaluatePod(g.level, &pod.ObjectMeta, &pod.Spec))
	if result.Allowed {
		return nil
	}
	return apierrors.NewForbidden(a.GetResource().GroupResource(), pod.Name, fmt.Errorf(
		"%s: pod %s/%s on node %s does not meet Pod Security %q (%s), and %s into it would run as the host machine's root (nodes lent to a KubeNest tenant are host machines)",
		Name, pod.Namespace, pod.Name, pod.Spec.NodeName, g.cfg.NodePodSecurity, result.ForbiddenDetail(), a.GetSubresource()))
}

// kubeletDebugHandlers are the first path segments, lower-cased, of the kubelet's handlers
// that run commands in containers, stream into them or dump them, and of its debug endpoints.
var kubeletDebugHandlers = []string{"exec", "run", "attach", "portforward", "cri", "checkpoint", "debug"}

// nodeProxy refuses, under baseline, the kubelet's debugging handlers through nodes/proxy:
// they reach every container of the node, the kube-proxy's too (pods/exec is checked above).
func (g *Guard) nodeProxy(a admission.Attributes) error {
	opts, ok := a.GetObject().(*api.NodeProxyOptions)
	if !ok {
		return nil
	}
	if handler := KubeletDebugHandler(opts.Path); handler != "" {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), fmt.Errorf(
			"%s: the kubelet's %q handler through nodes/proxy is refused on this cluster's nodes (Pod Security %q: they are host machines); use pods/exec, pods/attach, pods/portforward and pods/log, which are checked",
			Name, handler, g.cfg.NodePodSecurity))
	}
	return nil
}

// KubeletDebugHandler is the kubelet debugging handler a path reaches, or "": the first
// segment of the path, unescaped until it no longer changes and cleaned, in lower case.
func KubeletDebugHandler(p string) string {
	for range 8 {
		u, err := url.PathUnescape(p)
		if err != nil || u == p {
			break
		}
		p = u
	}
	p = strings.ToLower(path.Clean("/" + strings.ReplaceAll(p, "\\", "/")))
	first, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	first, _, _ = strings.Cut(first, ";")
	if slices.Contains(kubeletDebugHandlers, first) {
		return first
	}
	return ""
}

// NodeProxyAuthorizer is the guard's authorizer, ahead of every other (system:masters
// included). Under baseline it denies the question a kubelet asks before it serves its API to
// a client that reached it directly, not through the apiserver: may this user use the node's
// proxy subresource (exec, run, attach, port-forward: any command in any container)? Only
// the tenant's apiserver may (APIServerUser, the user of its kubelet client certificate, which
// the tenant cannot obtain: its controller-manager signs no client certificate of the cluster
// CA, and the portal's personal certificates never carry that name), and only with a client
// certificate, in no group but system:authenticated (isAPIServer); the apiserver's own
// pods/exec and nodes/proxy requests are checked in admission above.
// A kubelet's question is a SubjectAccessReview, whose attributes carry no request path; a
// request through the apiserver always has one, so those are left to the other authorizers.
type NodeProxyAuthorizer struct {
	Level         psapi.Level
	APIServerUser string
}

// Authorize denies, under baseline, nodes/proxy asked for without a path by anyone but the apiserver.
func (z NodeProxyAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if z.Level == psapi.LevelPrivileged || !a.IsResourceRequest() || a.GetAPIGroup() != "" || a.GetResource() != "nodes" ||
		a.GetSubresource() != "proxy" || a.GetPath() != "" || a.GetUser() == nil || z.isAPIServer(a.GetUser()) {
		return authorizer.DecisionNoOpinion, "", nil
	}
	return authorizer.DecisionDeny, fmt.Sprintf("%s: a kubelet of this cluster serves its proxy subresource (exec, run, attach, port-forward) to the tenant's apiserver only; use pods/exec through the apiserver", Name), nil
}

// isAPIServer says whether u is the tenant apiserver's kubelet client: its name, no group but
// the one every authenticated user has, and a client certificate as its credential (the
// kubelet's x509 authenticator says so in the credential ID, "X509SHA256=..."), which only the
// cluster CA signs: a token of another authenticator the tenant may add (an OIDC issuer in
// extraArgs) with that name is not the apiserver.
func (z NodeProxyAuthorizer) isAPIServer(u user.Info) bool {
	ids := u.GetExtra()[user.CredentialIDKey]
	return u.GetName() == z.APIServerUser && !slices.ContainsFunc(u.GetGroups(), func(g string) bool { return g != user.AllAuthenticated }) &&
		len(ids) == 1 && strings.HasPrefix(ids[0], "X509SHA256=")
}
