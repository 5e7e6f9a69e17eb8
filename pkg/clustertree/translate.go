// Package clustertree gives a tenant a virtual node backed by the host's shared nodes: pods the
// tenant's scheduler binds to that node run as pods in the VirtualCluster's host namespace, and
// their status, logs, exec and port-forward flow back. It is built on virtual-kubelet's node
// library; this file is the pure part: how a tenant pod becomes a host pod and back.
package clustertree

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/kubernetes/pkg/kubelet/envvars"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// Labels and annotations of host objects made for tenant objects.
const (
	// LabelOrigin marks host objects clustertree made; its value is OriginClusterTree.
	LabelOrigin       = "kubenest.io/origin"
	OriginClusterTree = "clustertree"

	AnnotationTenantName           = "kubenest.io/tenant-name"
	AnnotationTenantNamespace      = "kubenest.io/tenant-namespace"
	AnnotationTenantUID            = "kubenest.io/tenant-uid"
	AnnotationTenantNode           = "kubenest.io/tenant-node"
	AnnotationTenantServiceAccount = "kubenest.io/tenant-service-account"
	// AnnotationTenantResourceVersion, on a host copy of a ConfigMap or Secret, is the
	// resourceVersion of the tenant object it was copied from.
	AnnotationTenantResourceVersion = "kubenest.io/tenant-resource-version"
	// AnnotationTenantLabels and AnnotationTenantAnnotations hold the tenant pod's labels and
	// annotations as the kubelet writes a downward-API file of metadata.labels or
	// metadata.annotations, for pods that have one.
	AnnotationTenantLabels      = "kubenest.io/tenant-labels"
	AnnotationTenantAnnotations = "kubenest.io/tenant-annotations"
	// AnnotationTenantMetadata is a digest of the tenant pod's labels and annotations the host
	// pod was last made from: when it differs, the host pod's are made again.
	AnnotationTenantMetadata = "kubenest.io/tenant-metadata"
	// AnnotationTenantGeneration is the tenant pod's generation the host pod was last made
	// from: the tenant pod's status.observedGeneration once the host's kubelet has seen it.
	AnnotationTenantGeneration = "kubenest.io/tenant-generation"
)

// tenantKeyDomain is where a tenant pod's label keys (and the annotation keys its downward API
// reads) go on its host pod.
const tenantKeyDomain = "tenant.kubenest.io"

// HostKey is the host pod's key for a tenant pod's label or annotation key k: name as
// tenant.kubenest.io/name, prefix/name as prefix.tenant.kubenest.io/name; ok is false when that
// is not a valid key (a prefix longer than 234 characters), and then k is not carried so. No
// host key is one that the host's components (a CNI, a mesh, an autoscaler, or KubeNest
// itself) act on. Distinct tenant keys get distinct host keys: the host key's prefix is
// tenant.kubenest.io exactly for a key without prefix and ends in .tenant.kubenest.io
// otherwise, and stripping that suffix gives back the tenant's prefix whole.
func HostKey(k string) (key string, ok bool) {
	key = tenantKeyDomain + "/" + k
	if prefix, name, found := strings.Cut(k, "/"); found {
		key = prefix + "." + tenantKeyDomain + "/" + name
	}
	return key, len(validation.IsQualifiedName(key)) == 0
}

// isKubeNestKey says whether k is under kubenest.io. A tenant's own such labels are not
// carried on its host pod: KubeNest's keys are KubeNest's, in the host as in the tenant.
func isKubeNestKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return ok && (prefix == "kubenest.io" || strings.HasSuffix(prefix, ".kubenest.io"))
}

// hostLabelKey is the host pod's label for the tenant pod's label k, if it has one.
func hostLabelKey(k string) (string, bool) {
	if isKubeNestKey(k) {
		return "", false
	}
	return HostKey(k)
}

// annotationCopyKey is the host pod's annotation that carries the tenant pod's annotation k for
// its downward API: HostKey(k), or, for the rare key HostKey cannot carry, a key named after a
// digest of k.
func annotationCopyKey(k string) string {
	if key, ok := HostKey(k); ok {
		return key
	}
	return digestKey("annotation", k)
}

// labelCopyKey is the host pod's annotation that carries the value of the tenant pod's label
// k, read by its downward API, when k is not one of the host pod's labels (hostLabelKey). It
// is apart from annotationCopyKey's keys, so a label and an annotation of the same key do not
// meet, and from KubeNest's other annotations (a 128-bit digest ends it).
func labelCopyKey(k string) string { return digestKey("label", k) }

func digestKey(kind, k string) string {
	sum := sha256.Sum256([]byte(k))
	return "kubenest.io/tenant-" + kind + "-" + hex.EncodeToString(sum[:16])
}

// MetadataDigest is AnnotationTenantMetadata for a tenant pod.
func MetadataDigest(tenant *corev1.Pod) string {
	sum := sha256.Sum256([]byte(fieldpath.FormatMap(tenant.Labels) + "\x00" + fieldpath.FormatMap(tenant.Annotations)))
	return hex.EncodeToString(sum[:8])
}

// HostName is the host-side name of a tenant object: <name>-x-<namespace>-x-<virtualcluster>,
// cut and hashed to a DNS label when longer, so distinct tenant objects never share a name.
// A part that itself contains "-x-" (or starts with "x-" or ends with "-x") would make two
// objects read alike (name a-x-b in c and name a in b-x-c): such a name gets a hash of its
// parts appended.
func HostName(vc, namespace, name string) string {
	joined := name + "-x-" + namespace + "-x-" + vc
	if separators(joined) != 2 {
		sum := sha256.Sum256([]byte(name + "/" + namespace + "/" + vc))
		joined += "-" + hex.EncodeToString(sum[:])[:10]
	}
	return naming.Shorten(joined, naming.MaxLength)
}

// separators counts the occurrences of "-x-" in s, overlapping ones included.
func separators(s string) int {
	n := 0
	for i := 0; i+3 <= len(s); i++ {
		if s[i:i+3] == "-x-" {
			n++
		}
	}
	return n
}

// TokenSecretName is the host Secret holding the tenant service-account tokens of a host pod.
// Its "-x-token" end is a third "-x-" part, which HostName never gives a name (it adds a hash
// to such names instead), so no copy of a tenant object, of this VirtualCluster or another of
// the namespace ("<vc>-token"), takes its name.
func TokenSecretName(hostPod string) string { return naming.Shorten(hostPod+"-x-token", 253) }

// TokenKey is the key of the token of a pod's index-th projected service-account token source.
func TokenKey(index int) string { return "token-" + strconv.Itoa(index) }

// Translator turns tenant objects into host objects for one VirtualCluster. It holds no client.
type Translator struct {
	// VirtualCluster is the VirtualCluster's name; HostNamespace its namespace in the host.
	VirtualCluster string
	HostNamespace  string
	// NodeName is the virtual node's name in the tenant.
	NodeName string
	// APIServerHost and APIServerPort are where host pods reach the tenant's apiserver: what
	// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT say.
	APIServerHost string
	APIServerPort int32
	// ClusterDNS is the tenant's cluster DNS address, the resolver of its pods that use the
	// cluster's DNS (dnsPolicy ClusterFirst); empty leaves them the node's resolver.
	ClusterDNS string
	// ServiceCIDR is the tenant's Service range, its slice of the host's tenant range: the
	// only ClusterIPs its Services have in the host. Unset, no Service is copied.
	ServiceCIDR netip.Prefix
	// HostHas says whether the host's nodes have (had) an extended resource; nil, that they
	// have them all. A tenant pod's requests of an extended resource the host does not have
	// are the tenant's own accounting (it advertised the resource on the virtual node, and its
	// scheduler counted it there): the host pod does not ask the host for it, which could
	// never give it (the host pod would stay Pending).
	HostHas func(corev1.ResourceName) bool
	// HostsImage holds nest-hosts, which writes the /etc/hosts of a pod with a subdomain
	// (etchosts.go), pulled with HostsImagePullPolicy. Empty, such a pod has the host
	// kubelet's /etc/hosts, whose FQDN line names the host pod's namespace.
	HostsImage           string
	HostsImagePullPolicy corev1.PullPolicy
}

// Refs are the tenant objects a pod needs in the host.
type Refs struct {
	// ConfigMaps and Secrets are the names of those the pod refers to, sorted. Each is copied
	// when it exists; a missing one, optional or not, is copied once it is made (the host's
	// kubelet holds the pod until then, as a kubelet does).
	ConfigMaps []string
	Secrets    []string
	// TokenSources are the pod's projected service-account token sources, in volume order;
	// source i is stored under TokenKey(i) of the pod's token Secret.
	TokenSources []corev1.ServiceAccountTokenProjection
}

// ForbiddenError says why a tenant pod may not run on the shared node.
type ForbiddenError = sharednode.Refusal

// fieldPaths maps downward-API fields whose host value differs from the tenant's to the host
// pod annotation that holds the tenant's value.
var fieldPaths = map[string]string{
	"metadata.name":           AnnotationTenantName,
	"metadata.namespace":      AnnotationTenantNamespace,
	"metadata.uid":            AnnotationTenantUID,
	"spec.nodeName":           AnnotationTenantNode,
	"spec.serviceAccountName": AnnotationTenantServiceAccount,
}

// Pod translates a tenant pod bound to the virtual node into the host pod that runs it.
// services are the tenant Services of the pod's namespace, for the service-link environment.
// It returns a *ForbiddenError when the pod asks for host privileges or for something the
// shared node cannot give.
func (t Translator) Pod(tenant *corev1.Pod, services []*corev1.Service) (*corev1.Pod, Refs, error) {
	if r := sharednode.Check(tenant); r != nil {
		return nil, Refs{}, r
	}
	hostName := HostName(t.VirtualCluster, tenant.Namespace, tenant.Name)
	refs := &refSet{}
	name := func(n string) string { return HostName(t.VirtualCluster, tenant.Namespace, n) }

	spec := tenant.Spec.DeepCopy()
	volumes := t.volumes(spec.Volumes, hostName, name, refs)
	env := t.baseEnv(tenant, services)
	containers := make([]corev1.Container, 0, len(spec.Containers))
	for _, c := range spec.Containers {
		containers = append(containers, t.container(c, env, name, refs))
	}
	inits := make([]corev1.Container, 0, len(spec.InitContainers))
	for _, c := range spec.InitContainers {
		inits = append(inits, t.container(c, env, name, refs))
	}
	// Ephemeral containers are added to a running pod (kubectl debug), never made with it:
	// the provider adds them to the host pod through its ephemeralcontainers subresource.
	var ephemeral []corev1.EphemeralContainer
	for _, ec := range spec.EphemeralContainers {
		ec.EphemeralContainerCommon = corev1.EphemeralContainerCommon(t.container(corev1.Container(ec.EphemeralContainerCommon), env, name, refs))
		ephemeral = append(ephemeral, ec)
	}
	var pullSecrets []corev1.LocalObjectReference
	for _, s := range spec.ImagePullSecrets {
		refs.secret(s.Name)
		pullSecrets = append(pullSecrets, corev1.LocalObjectReference{Name: name(s.Name)})
	}

	hostname := spec.Hostname
	if hostname == "" {
		// A pod name may have dots; a pod's hostname is a DNS label.
		hostname = naming.Shorten(strings.ReplaceAll(tenant.Name, ".", "-"), naming.MaxLength)
	}
	dnsPolicy, dnsConfig := t.dns(tenant)
	host := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        hostName,
			Namespace:   t.HostNamespace,
			Labels:      t.hostLabels(tenant.Labels),
			Annotations: refs.annotations(tenant),
		},
		Spec: corev1.PodSpec{
			Volumes:                       volumes,
			InitContainers:                inits,
			Containers:                    containers,
			EphemeralContainers:           ephemeral,
			RestartPolicy:                 spec.RestartPolicy,
			TerminationGracePeriodSeconds: maxGrace(spec.TerminationGracePeriodSeconds),
			ActiveDeadlineSeconds:         spec.ActiveDeadlineSeconds,
			DNSPolicy:                     dnsPolicy,
			DNSConfig:                     dnsConfig,
			// The host never gives a tenant pod a host credential, nor the pull Secrets of
			// the host namespace's default ServiceAccount.
			ServiceAccountName:           HostServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext:              spec.SecurityContext,
			ImagePullSecrets:             pullSecrets,
			Hostname:                     hostname,
			ShareProcessNamespace:        spec.ShareProcessNamespace,
			OS:                           spec.OS,
			HostUsers:                    spec.HostUsers,
			HostAliases:                  spec.HostAliases,
			Resources:                    spec.Resources,
		},
	}
	t.withEtcHosts(host, tenant)
	return host, refs.done(), nil
}

// clusterDomain is the tenant's cluster domain.
const clusterDomain = "cluster.local"

// dns is the host pod's resolver: the tenant's cluster DNS for pods that use the cluster's DNS,
// with the search path a tenant node would give; never the host's cluster DNS, whose names
// are not the tenant's.
func (t Translator) dns(tenant *corev1.Pod) (corev1.DNSPolicy, *corev1.PodDNSConfig) {
	switch tenant.Spec.DNSPolicy {
	case corev1.DNSNone:
		return corev1.DNSNone, tenant.Spec.DNSConfig.DeepCopy()
	case corev1.DNSDefault:
		return corev1.DNSDefault, tenant.Spec.DNSConfig.DeepCopy()
	}
	if t.ClusterDNS == "" {
		return corev1.DNSDefault, tenant.Spec.DNSConfig.DeepCopy()
	}
	cfg := &corev1.PodDNSConfig{
		Nameservers: []string{t.ClusterDNS},
		Searches:    []string{tenant.Namespace + ".svc." + clusterDomain, "svc." + clusterDomain, clusterDomain},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: ptr.To("5")}},
	}
	if own := tenant.Spec.DNSConfig; own != nil {
		cfg.Nameservers = append(cfg.Nameservers, own.Nameservers...)
		cfg.Searches = append(cfg.Searches, own.Searches...)
		cfg.Options = append(cfg.Options, own.Options...)
	}
	return corev1.DNSNone, cfg
}

// Object translates a tenant ConfigMap's or Secret's metadata into the host copy's.
func (t Translator) Object(tenant metav1.ObjectMeta) metav1.ObjectMeta {
	ann := map[string]string{AnnotationTenantName: tenant.Name, AnnotationTenantNamespace: tenant.Namespace}
	return metav1.ObjectMeta{
		Name:        HostName(t.VirtualCluster, tenant.Namespace, tenant.Name),
		Namespace:   t.HostNamespace,
		Labels:      t.hostLabels(nil),
		Annotations: ann,
	}
}

// TenantStatus is the tenant pod's status for a host pod's: what ran, where, with which IP.
//
// Generations are the tenant's: once the host's kubelet has seen the host pod's latest
// generation, the pod and its conditions observed the tenant generation the host pod was made
// from (AnnotationTenantGeneration); until then ObservedGeneration is 0, for the caller to keep
// what the tenant pod had.
func TenantStatus(host *corev1.Pod) corev1.PodStatus {
	s := *host.Status.DeepCopy()
	s.NominatedNodeName = ""
	if writesEtcHosts(host) {
		s.InitContainerStatuses = slices.DeleteFunc(s.InitContainerStatuses, func(c corev1.ContainerStatus) bool { return c.Name == EtcHostsName })
		if len(s.InitContainerStatuses) == 0 {
			s.InitContainerStatuses = nil
		}
		for i := range s.Conditions {
			s.Conditions[i].Message = withoutWriter(s.Conditions[i].Message)
		}
	}
	var observed int64
	if gen, err := strconv.ParseInt(host.Annotations[AnnotationTenantGeneration], 10, 64); err == nil &&
		(host.Status.ObservedGeneration == 0 || host.Status.ObservedGeneration >= host.Generation) {
		observed = gen
	}
	SetObservedGeneration(&s, observed)
	return s
}

// SetObservedGeneration sets the generation a pod status and its conditions observed.
func SetObservedGeneration(s *corev1.PodStatus, gen int64) {
	s.ObservedGeneration = gen
	for i := range s.Conditions {
		s.Conditions[i].ObservedGeneration = gen
	}
}

// HostSelector selects the host objects clustertree made for a VirtualCluster.
func HostSelector(vc string) map[string]string {
	return map[string]string{naming.LabelVirtualCluster: vc, LabelOrigin: OriginClusterTree}
}

// hostLabels are a host object's labels: the tenant's that may be carried, each under its
// hostLabelKey, and HostSelector's. No other key reaches the host.
func (t Translator) hostLabels(tenant map[string]string) map[string]string {
	l := make(map[string]string, len(tenant)+2)
	for k, v := range tenant {
		if key, ok := hostLabelKey(k); ok {
			l[key] = v
		}
	}
	maps.Copy(l, HostSelector(t.VirtualCluster))
	return l
}

// annotations are the host pod's annotations: which tenant pod it runs, and what of the tenant
// pod's labels and annotations its downward API reads (fieldPath noted which); no other tenant
// annotation. Whole maps are written as the kubelet writes a downward-API file of them, so the
// host pod's file reads the same as the tenant's would.
func (r *refSet) annotations(tenant *corev1.Pod) map[string]string {
	ann := map[string]string{
		AnnotationTenantName:           tenant.Name,
		AnnotationTenantNamespace:      tenant.Namespace,
		AnnotationTenantUID:            string(tenant.UID),
		AnnotationTenantNode:           tenant.Spec.NodeName,
		AnnotationTenantServiceAccount: tenant.Spec.ServiceAccountName,
		AnnotationTenantMetadata:       MetadataDigest(tenant),
		AnnotationTenantGeneration:     strconv.FormatInt(tenant.Generation, 10),
	}
	// A missing label or annotation reads as empty, on the host as in the tenant.
	for k := range r.annotationKeys {
		if v, ok := tenant.Annotations[k]; ok {
			ann[annotationCopyKey(k)] = v
		}
	}
	for k := range r.labelKeys {
		if v, ok := tenant.Labels[k]; ok {
			ann[labelCopyKey(k)] = v
		}
	}
	if r.allLabels {
		ann[AnnotationTenantLabels] = fieldpath.FormatMap(tenant.Labels)
	}
	if r.allAnnotations {
		ann[AnnotationTenantAnnotations] = fieldpath.FormatMap(tenant.Annotations)
	}
	return ann
}

// downwardAPIItems points downward-API volume items at the host pod's copies of the tenant
// pod's fields (see fieldPath).
func (r *refSet) downwardAPIItems(items []corev1.DownwardAPIVolumeFile) {
	for i := range items {
		if f := items[i].FieldRef; f != nil {
			f.FieldPath = r.fieldPath(f.FieldPath)
		}
	}
}

// baseEnv is what every container gets before its own variables (which override it): the
// tenant apiserver's address and the tenant's service links.
func (t Translator) baseEnv(tenant *corev1.Pod, services []*corev1.Service) []corev1.EnvVar {
	port := strconv.Itoa(int(t.APIServerPort))
	hostPort := net.JoinHostPort(t.APIServerHost, port) // [ipv6]:port
	env := []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: t.APIServerHost},
		{Name: "KUBERNETES_SERVICE_PORT", Value: port},
		{Name: "KUBERNETES_SERVICE_PORT_HTTPS", Value: port},
		{Name: "KUBERNETES_PORT", Value: "tcp://" + hostPort},
		{Name: "KUBERNETES_PORT_443_TCP", Value: "tcp://" + hostPort},
		{Name: "KUBERNETES_PORT_443_TCP_PROTO", Value: "tcp"},
		{Name: "KUBERNETES_PORT_443_TCP_PORT", Value: port},
		{Name: "KUBERNETES_PORT_443_TCP_ADDR", Value: t.APIServerHost},
	}
	if tenant.Spec.EnableServiceLinks == nil || *tenant.Spec.EnableServiceLinks {
		var links []*corev1.Service
		for _, s := range services {
			if s.Namespace == tenant.Namespace && s.Name != "kubernetes" && corev1helperIsServiceIPSet(s) {
				links = append(links, s)
			}
		}
		slices.SortFunc(links, func(a, b *corev1.Service) int { return strings.Compare(a.Name, b.Name) })
		env = append(env, envvars.FromServices(links)...)
	}
	return env
}

func corev1helperIsServiceIPSet(s *corev1.Service) bool {
	return s.Spec.ClusterIP != corev1.ClusterIPNone && s.Spec.ClusterIP != ""
}

func (t Translator) container(c corev1.Container, base []corev1.EnvVar, name func(string) string, refs *refSet) corev1.Container {
	env := append(slices.Clone(base), c.Env...)
	for i := range env {
		if vf := env[i].ValueFrom; vf != nil {
			switch {
			case vf.ConfigMapKeyRef != nil:
				refs.configMap(vf.ConfigMapKeyRef.Name)
				vf.ConfigMapKeyRef.Name = name(vf.ConfigMapKeyRef.Name)
			case vf.SecretKeyRef != nil:
				refs.secret(vf.SecretKeyRef.Name)
				vf.SecretKeyRef.Name = name(vf.SecretKeyRef.Name)
			case vf.FieldRef != nil:
				vf.FieldRef.FieldPath = refs.fieldPath(vf.FieldRef.FieldPath)
			}
		}
	}
	c.Env = env
	c.Resources = t.hostResources(c.Resources)
	for i := range c.EnvFrom {
		if r := c.EnvFrom[i].ConfigMapRef; r != nil {
			refs.configMap(r.Name)
			r.Name = name(r.Name)
		}
		if r := c.EnvFrom[i].SecretRef; r != nil {
			refs.secret(r.Name)
			r.Name = name(r.Name)
		}
	}
	return c
}

// hostResources is what a container asks the host for: its resources without the extended
// resources the host does not have (HostHas).
func (t Translator) hostResources(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	if t.HostHas == nil {
		return r
	}
	tenantOnly := func(name corev1.ResourceName, _ resource.Quantity) bool {
		return v1helper.IsExtendedResourceName(name) && !t.HostHas(name)
	}
	if r.Limits != nil {
		r.Limits = maps.Clone(r.Limits)
		maps.DeleteFunc(r.Limits, tenantOnly)
	}
	if r.Requests != nil {
		r.Requests = maps.Clone(r.Requests)
		maps.DeleteFunc(r.Requests, tenantOnly)
	}
	return r
}

// fieldPath is the host pod's field that holds what a downward-API reference to the tenant
// pod's field p reads, and notes what the host pod must carry for it.
func (r *refSet) fieldPath(p string) string {
	annotation := func(key string) string { return "metadata.annotations['" + key + "']" }
	if ann, ok := fieldPaths[p]; ok {
		return annotation(ann)
	}
	switch p {
	case "metadata.labels":
		r.allLabels = true
		return annotation(AnnotationTenantLabels)
	case "metadata.annotations":
		r.allAnnotations = true
		return annotation(AnnotationTenantAnnotations)
	}
	switch path, key, ok := fieldpath.SplitMaybeSubscriptedPath(p); {
	case ok && path == "metadata.labels":
		if hostKey, carried := hostLabelKey(key); carried {
			return "metadata.labels['" + hostKey + "']"
		}
		addKey(&r.labelKeys, key)
		return annotation(labelCopyKey(key))
	case ok && path == "metadata.annotations":
		addKey(&r.annotationKeys, key)
		return annotation(annotationCopyKey(key))
	}
	return p
}

// volumes translates a pod's volumes, which sharednode.Check has allowed: the other types
// never reach here.
func (t Translator) volumes(in []corev1.Volume, hostPod string, name func(string) string, refs *refSet) []corev1.Volume {
	out := make([]corev1.Volume, 0, len(in))
	for _, v := range in {
		switch {
		case v.EmptyDir != nil:
		case v.ConfigMap != nil:
			refs.configMap(v.ConfigMap.Name)
			v.ConfigMap.Name = name(v.ConfigMap.Name)
		case v.Secret != nil:
			refs.secret(v.Secret.SecretName)
			v.Secret.SecretName = name(v.Secret.SecretName)
		case v.DownwardAPI != nil:
			refs.downwardAPIItems(v.DownwardAPI.Items)
		case v.Projected != nil:
			for j := range v.Projected.Sources {
				s := &v.Projected.Sources[j]
				switch {
				case s.ConfigMap != nil:
					refs.configMap(s.ConfigMap.Name)
					s.ConfigMap.Name = name(s.ConfigMap.Name)
				case s.Secret != nil:
					refs.secret(s.Secret.Name)
					s.Secret.Name = name(s.Secret.Name)
				case s.DownwardAPI != nil:
					refs.downwardAPIItems(s.DownwardAPI.Items)
				case s.ServiceAccountToken != nil:
					// The token is the tenant's, requested from the tenant for this pod and
					// kept fresh in the pod's token Secret; never a host token.
					key := TokenKey(len(refs.tokens))
					refs.tokens = append(refs.tokens, *s.ServiceAccountToken)
					*s = corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: TokenSecretName(hostPod)},
						Items:                []corev1.KeyToPath{{Key: key, Path: s.ServiceAccountToken.Path}},
					}}
				}
			}
		}
		out = append(out, v)
	}
	return out
}

// refSet collects, without duplicates, what a pod refers to.
type refSet struct {
	configMaps, secrets []string
	tokens              []corev1.ServiceAccountTokenProjection
	// What its downward API reads of the pod's metadata: single annotations, single labels the
	// host pod does not carry as labels, all labels, all annotations.
	annotationKeys, labelKeys map[string]bool
	allLabels, allAnnotations bool
}

// addKey adds k to the set *keys.
func addKey(keys *map[string]bool, k string) {
	if *keys == nil {
		*keys = map[string]bool{}
	}
	(*keys)[k] = true
}

func (r *refSet) configMap(n string) { r.configMaps = addRef(r.configMaps, n) }
func (r *refSet) secret(n string)    { r.secrets = addRef(r.secrets, n) }

func addRef(refs []string, name string) []string {
	if slices.Contains(refs, name) {
		return refs
	}
	return append(refs, name)
}

func (r *refSet) done() Refs {
	slices.Sort(r.configMaps)
	slices.Sort(r.secrets)
	return Refs{ConfigMaps: r.configMaps, Secrets: r.secrets, TokenSources: r.tokens}
}

// MaxGracePeriodSeconds bounds the grace a tenant pod gets in the host, to end it or to evict
// it: a shared node is the host's, and a tenant's pods that took hours to end (a process that
// ignores SIGTERM, with terminationGracePeriodSeconds of years) would hold a drain of any host
// node, a node lent to another tenant's among them, and their own tenant's sleep.
const MaxGracePeriodSeconds int64 = 300

// maxGrace is seconds, at most MaxGracePeriodSeconds; nil stays nil (the default, 30 s).
func maxGrace(seconds *int64) *int64 {
	if seconds == nil {
		return nil
	}
	return ptr.To(min(*seconds, MaxGracePeriodSeconds))
}
