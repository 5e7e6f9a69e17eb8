package controlplane

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Paths inside the tenant component containers.
const (
	// BinaryPath is the nest-controlplane binary in the image.
	BinaryPath = "/usr/local/bin/nest-controlplane"
	// EtcdBinaryPath is the nest-etcd binary in the image.
	EtcdBinaryPath = "/usr/local/bin/nest-etcd"
	// PKIDir is where the control-plane pod mounts its certificates Secret.
	PKIDir = "/etc/kubenest/pki"
	// KubeletSignerDir is where the controller-manager mounts the kubelet signer.
	KubeletSignerDir = "/etc/kubenest/kubelet-signer"
	// EtcdPKIDir is where etcd mounts its certificates Secret.
	EtcdPKIDir = "/etc/etcd/pki"
	// EtcdDataDir is where etcd's volume is mounted.
	EtcdDataDir = "/var/lib/etcd"

	// nonRootID is the user and group every tenant component runs as.
	nonRootID = 65532
	// maxEtcdQuota is etcd's own default backend quota, 2 GiB.
	maxEtcdQuota = 2 << 30
)

// Container names of the control-plane pod and of etcd.
const (
	ContainerAPIServer   = "kube-apiserver"
	ContainerControllers = "kube-controllers" // kube-controller-manager and kube-scheduler
	ContainerEtcd        = "etcd"
)

// EtcdStatefulSet runs the tenant's etcd members. Members find each other through the peer
// Service's per-pod DNS names, talk TLS to each other and to clients, and require client
// certificates signed by the tenant's etcd CA on both ports. certsHash is the ContentHash of
// the etcd CA, which etcd does not reload. A change to what this builds (the image, at every
// operator upgrade) rolls the members of tenants with volume claims, one at a time; an
// ephemeral member would lose the tenant's data, so its StatefulSet updates OnDelete: the pod
// keeps what it started with until it is replaced for another reason, and the operator
// replaces it only for a new etcd CA (EtcdPodsToReplace).
func EtcdStatefulSet(vc *v1alpha1.VirtualCluster, s Settings, certsHash string) *appsv1.StatefulSet {
	names := naming.For(vc.Name)
	spec := vc.Spec.Etcd
	replicas := etcdMembers(vc)
	var members []string
	for i := range replicas {
		pod := etcdMemberPod(vc, i)
		members = append(members, fmt.Sprintf("%s=https://%s:%d", pod, etcdMemberHost(vc, pod), EtcdPeerPort))
	}
	self := etcdMemberHost(vc, "$(POD_NAME)")
	pki := func(file string) string { return EtcdPKIDir + "/" + file }
	flags := map[string]string{
		"name":                        "$(POD_NAME)",
		"data-dir":                    EtcdDataDir + "/data",
		"listen-client-urls":          fmt.Sprintf("https://0.0.0.0:%d", EtcdClientPort),
		"advertise-client-urls":       fmt.Sprintf("https://%s:%d", self, EtcdClientPort),
		"listen-peer-urls":            fmt.Sprintf("https://0.0.0.0:%d", EtcdPeerPort),
		"initial-advertise-peer-urls": fmt.Sprintf("https://%s:%d", self, EtcdPeerPort),
		"initial-cluster":             strings.Join(members, ","),
		"initial-cluster-state":       "new",
		"initial-cluster-token":       string(vc.UID),
		"listen-metrics-urls":         fmt.Sprintf("http://0.0.0.0:%d", EtcdMetricsPort),
		"quota-backend-bytes":         fmt.Sprint(etcdQuota(spec.Storage)),
		"cert-file":                   pki(LeafEtcdServer.CertFile()),
		"key-file":                    pki(LeafEtcdServer.KeyFile()),
		"trusted-ca-file":             pki(KeyCACert),
		"client-cert-auth":            "true",
		"peer-cert-file":              pki(LeafEtcdPeer.CertFile()),
		"peer-key-file":               pki(LeafEtcdPeer.KeyFile()),
		"peer-trusted-ca-file":        pki(KeyCACert),
		"peer-client-cert-auth":       "true",
		// Peer certificates name the peer Service's wildcard, not each member's address; the
		// etcd CA (which only this tenant's members hold certificates of) authenticates peers.
		"peer-skip-client-san-verification": "true",
		// The client port serves gRPC alone, with gRPC's own server. A TLS port that also
		// serves HTTP makes etcd serve gRPC through net/http's HTTP/2 server instead: 13 %
		// more of etcd's CPU for the same writes, 8 % more idle (BENCHMARKS.md). Nothing of a
		// tenant's uses etcd's HTTP endpoints (/health, /version, the gRPC gateway) on the
		// client port; the probes use the metrics port.
		"listen-client-http-urls": fmt.Sprintf("https://127.0.0.1:%d", EtcdClientHTTPPort),
	}
	container := corev1.Container{
		Name:            ContainerEtcd,
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Command:         []string{EtcdBinaryPath},
		Args:            args(flags, nil),
		Env: append([]corev1.EnvVar{{
			Name:      "POD_NAME",
			ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}},
		}}, goRuntimeEnv(ContainerEtcd)...),
		Ports: []corev1.ContainerPort{
			containerPort("client", EtcdClientPort),
			containerPort("peer", EtcdPeerPort),
			containerPort("metrics", EtcdMetricsPort),
		},
		StartupProbe:    httpProbe("/readyz", "metrics", corev1.URISchemeHTTP, 1, 300),
		ReadinessProbe:  httpProbe("/readyz", "metrics", corev1.URISchemeHTTP, 5, 3),
		LivenessProbe:   httpProbe("/livez", "metrics", corev1.URISchemeHTTP, 10, 6),
		Resources:       withDefaultRequests(spec.Resources, idleCPU["etcd"], "48Mi"),
		SecurityContext: containerSecurityContext(),
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: EtcdDataDir},
			{Name: "certs", MountPath: EtcdPKIDir, ReadOnly: true},
		},
	}
	volumes := []corev1.Volume{secretVolume("certs", names.EtcdCertsSecret())}
	var claims []corev1.PersistentVolumeClaim
	if pvc := spec.Storage.PersistentVolumeClaim; pvc != nil {
		claims = []corev1.PersistentVolumeClaim{{
			TypeMeta:   typeMeta("v1", "PersistentVolumeClaim"),
			ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: memberLabels(vc, naming.ComponentEtcd)},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				StorageClassName: pvc.StorageClassName,
				Resources: corev1.VolumeResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceStorage: pvc.Size},
				},
			},
		}}
	} else {
		empty := &corev1.EmptyDirVolumeSource{}
		if e := spec.Storage.Ephemeral; e != nil {
			empty.SizeLimit = e.SizeLimit
		}
		volumes = append(volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: empty}})
	}
	labels := names.Labels(naming.ComponentEtcd)
	return &appsv1.StatefulSet{
		TypeMeta:   typeMeta("apps/v1", "StatefulSet"),
		ObjectMeta: objectMeta(vc, names.EtcdStatefulSet(), naming.ComponentEtcd),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(replicas),
			ServiceName: names.EtcdPeerService(),
			// Members start together: with OrderedReady the first would wait for a quorum that
			// the others, not yet created, would have to form.
			PodManagementPolicy:  appsv1.ParallelPodManagement,
			UpdateStrategy:       etcdUpdateStrategy(spec.Storage),
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			VolumeClaimTemplates: claims,
			// Claims are kept, whatever happens to the StatefulSet: the operator deletes them
			// itself with the tenant, and a StatefulSet deleted by someone else comes back to
			// its data. (Delete would also have the StatefulSet controller add itself as the
			// claim's owner just after creating it, racing the scheduler's own update of the
			// claim: a conflict, and the etcd pod scheduled 1-2 s later.)
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: podTemplate(s, labels, memberLabels(vc, naming.ComponentEtcd), certsHash, corev1.PodSpec{
				Containers: []corev1.Container{container},
				Volumes:    volumes,
			}),
		},
	}
}

// etcdUpdateStrategy rolls members with volume claims, and leaves an ephemeral member alone.
func etcdUpdateStrategy(storage v1alpha1.EtcdStorage) appsv1.StatefulSetUpdateStrategy {
	if storage.Ephemeral != nil {
		return appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}
	return appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
}

// EtcdPodsToReplace are the running etcd pods of sts, an ephemeral tenant's (OnDelete), that
// trust another etcd CA than its template: only these must go, and with them their data, since
// etcd cannot reload its CA.
func EtcdPodsToReplace(sts *appsv1.StatefulSet, pods []corev1.Pod) []corev1.Pod {
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		return nil
	}
	want := sts.Spec.Template.Annotations[naming.AnnotationConfigHash]
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Annotations[naming.AnnotationConfigHash] != want {
			out = append(out, p)
		}
	}
	return out
}

// ControlPlaneDeployment runs the tenant's kube-apiserver, and its kube-controller-manager and
// kube-scheduler in one process (nest-controlplane controllers), together in each pod. The
// controller-manager and scheduler reach the apiserver over the pod's loopback. certsHash is
// the ContentHash of the control-plane certificates Secret. It returns an error when the spec
// asks for something it cannot do, naming the field.
func ControlPlaneDeployment(vc *v1alpha1.VirtualCluster, s Settings, certsHash string) (*appsv1.Deployment, error) {
	names := naming.For(vc.Name)
	cp := vc.Spec.ControlPlane
	replicas := ptr.Deref(cp.Replicas, 1)
	apiserver := apiServerFlags(vc, s)
	kcm := controllerManagerFlags(vc)
	sched := schedulerFlags(vc)
	// In a fixed order, so that the error, which ends up in a condition, is the same every pass.
	for _, c := range []struct {
		field string
		flags Flags
	}{
		{"spec.controlPlane.apiServer.extraArgs", apiserver},
		{"spec.controlPlane.controllerManager.extraArgs", kcm},
		{"spec.controlPlane.scheduler.extraArgs", sched},
	} {
		if err := c.flags.Validate(c.field); err != nil {
			return nil, err
		}
	}
	if err := shareProcessFlags(&kcm, &sched); err != nil {
		return nil, err
	}

	certs := corev1.VolumeMount{Name: "certs", MountPath: PKIDir, ReadOnly: true}
	tmp := corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}
	component := func(name string, command []string, args []string, res corev1.ResourceRequirements) corev1.Container {
		return corev1.Container{
			Name:            name,
			Image:           s.Image,
			ImagePullPolicy: s.ImagePullPolicy,
			Command:         append([]string{BinaryPath}, command...),
			Args:            args,
			Resources:       res,
			Env:             goRuntimeEnv(name),
			SecurityContext: containerSecurityContext(),
			VolumeMounts:    []corev1.VolumeMount{certs, tmp},
		}
	}
	api := component(ContainerAPIServer, []string{"apiserver"}, apiserver.Args(),
		withDefaultRequests(cp.APIServer.Resources, idleCPU["apiserver"], "160Mi"))
	api.Env = append(api.Env, corev1.EnvVar{
		Name:      "POD_IP",
		ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}},
	})
	api.Ports = []corev1.ContainerPort{containerPort("https", APIServerPort)}
	api.StartupProbe = httpProbe("/livez", "https", corev1.URISchemeHTTPS, 1, 300)
	api.ReadinessProbe = httpProbe("/readyz", "https", corev1.URISchemeHTTPS, 3, 3)
	api.LivenessProbe = httpProbe("/livez", "https", corev1.URISchemeHTTPS, 10, 6)

	// One process, two components: each keeps its flags and serving port; the process ends
	// when either stops. Apart, the scheduler cost 15 MiB of package state and runtime; in the
	// controller-manager's process, 1 (BENCHMARKS.md).
	ctrl := component(ContainerControllers, []string{"controllers"},
		slices.Concat(kcm.Args(), []string{controllersSeparator}, sched.Args()),
		sumResources(withDefaultRequests(cp.ControllerManager.Resources, idleCPU["controller-manager"], "64Mi"),
			withDefaultRequests(cp.Scheduler.Resources, idleCPU["scheduler"], "32Mi")))
	ctrl.VolumeMounts = append(ctrl.VolumeMounts, corev1.VolumeMount{Name: "kubelet-signer", MountPath: KubeletSignerDir, ReadOnly: true})
	// The process serves the tenant's NodePorts at the shared node's address, to ClusterIPs
	// of this range only (nest-controlplane controllers --help).
	ctrl.Env = append(ctrl.Env, corev1.EnvVar{Name: ServiceCIDREnv, Value: s.ServiceCIDR})
	ctrl.Ports = []corev1.ContainerPort{
		containerPort("kcm-https", ControllerManagerPort),
		containerPort("sched-https", SchedulerPort),
	}
	// The controller-manager and the scheduler start once the apiserver is ready and have no
	// startup or readiness probe: the pod's readiness, which puts it behind the apiserver
	// Service, is the apiserver's alone and does not wait a second more for them. The liveness
	// probe (one per container) asks the controller-manager, and allows two minutes, the
	// apiserver's start included; a scheduler that stops ends the process.
	ctrl.LivenessProbe = httpProbe("/healthz", "kcm-https", corev1.URISchemeHTTPS, 10, 12)

	labels := names.Labels(naming.ComponentControlPlane)
	return &appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: objectMeta(vc, names.ControlPlaneDeployment(), naming.ComponentControlPlane),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			// A new pod is Ready before an old one goes, so a roll (new certificates, new
			// flags) never leaves the tenant without an apiserver.
			Strategy: appsv1.DeploymentStrategy{
				Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{
					MaxUnavailable: ptr.To(intstr.FromInt32(0)),
					MaxSurge:       ptr.To(intstr.FromInt32(1)),
				},
			},
			Template: podTemplate(s, labels, memberLabels(vc, naming.ComponentControlPlane), certsHash, corev1.PodSpec{
				Containers: []corev1.Container{api, ctrl, dnsContainer(s, []corev1.VolumeMount{certs})},
				Volumes: []corev1.Volume{
					secretVolume("certs", names.ControlPlaneCertsSecret()),
					secretVolume("kubelet-signer", names.KubeletSignerSecret()),
					{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			}),
		},
	}, nil
}

// ServiceCIDREnv is the controllers container's variable that names the tenant's Service
// range, and turns on its NodePort proxy.
const ServiceCIDREnv = "KUBENEST_SERVICE_CIDR"

// controllersSeparator parts the controller-manager's arguments from the scheduler's in the
// controllers container (nest-controlplane controllers).
const controllersSeparator = "--"

// SplitControllersArgs splits the controllers container's arguments into the
// controller-manager's and the scheduler's; ok is false unless they hold exactly one separator.
func SplitControllersArgs(args []string) (cm, sched []string, ok bool) {
	i := slices.Index(args, controllersSeparator)
	if i < 0 || slices.Contains(args[i+1:], controllersSeparator) {
		return nil, nil, false
	}
	return args[:i], args[i+1:], true
}

// Flags are a component's command-line flags in three layers: those the operator owns, which
// nothing may override; defaults, which extra flags may override; and the tenant's extra flags.
type Flags struct {
	Owned    map[string]string
	Defaults map[string]string
	Extra    map[string]string
}

// Validate says, naming field, which extra flag tries to override an owned one.
func (f Flags) Validate(field string) error {
	for _, k := range slices.Sorted(maps.Keys(f.Extra)) {
		if _, owned := f.Owned[k]; owned {
			return fmt.Errorf("%s: flag --%s is set by the operator and cannot be overridden", field, k)
		}
	}
	return nil
}

// Args are the flags as sorted "--name=value" arguments.
func (f Flags) Args() []string {
	return args(f.Owned, f.Defaults, f.Extra)
}

// OwnedFlagNames are, sorted per field of spec.controlPlane (apiServer, controllerManager,
// scheduler), the flags the operator owns: what the VirtualCluster CRD's validation rules
// reject in extraArgs.
func OwnedFlagNames() map[string][]string {
	vc := &v1alpha1.VirtualCluster{}
	s := DefaultSettings()
	return map[string][]string{
		"apiServer":         slices.Sorted(maps.Keys(apiServerFlags(vc, s).Owned)),
		"controllerManager": slices.Sorted(maps.Keys(controllerManagerFlags(vc).Owned)),
		"scheduler":         slices.Sorted(maps.Keys(schedulerFlags(vc).Owned)),
	}
}

// processFlags are the flags of the controller-manager and the scheduler that configure their
// process rather than the component: logging, feature gates and emulated version (one
// registry per process), and metrics (one registry). The two run in one process, so these
// must be the same on both sides (the CRD refuses two values, and so does shareProcessFlags
// for a VirtualCluster admitted before that rule).
var processFlags = []string{
	"allow-metric-labels", "allow-metric-labels-manifest", "disabled-metrics", "emulated-version",
	"feature-gates", "log-flush-frequency", "log-json-info-buffer-size", "log-json-split-stream",
	"log-text-info-buffer-size", "log-text-split-stream", "logging-format",
	"min-compatibility-version", "show-hidden-metrics-for-version", "v", "vmodule",
}

// ProcessFlagNames are processFlags, sorted: what the VirtualCluster CRD's rule on
// spec.controlPlane refuses to see set differently for the controller-manager and the scheduler.
func ProcessFlagNames() []string { return slices.Sorted(slices.Values(processFlags)) }

// shareProcessFlags gives the controller-manager and the scheduler the same process flags:
// one set in either's extraArgs applies to both; set differently in the two, it is an error
// naming both fields.
func shareProcessFlags(kcm, sched *Flags) error {
	shared := map[string]string{}
	for _, name := range processFlags {
		a, inKCM := kcm.Extra[name]
		b, inSched := sched.Extra[name]
		switch {
		case inKCM && inSched && a != b:
			return fmt.Errorf("spec.controlPlane.scheduler.extraArgs: --%s=%s differs from --%s=%s in spec.controlPlane.controllerManager.extraArgs: "+
				"the controller-manager and the scheduler run in one process, which has one --%s", name, b, name, a, name)
		case inKCM:
			shared[name] = a
		case inSched:
			shared[name] = b
		}
	}
	// Copies: Extra is the VirtualCluster's own map.
	kcm.Extra = withFlags(kcm.Extra, shared)
	sched.Extra = withFlags(sched.Extra, shared)
	return nil
}

// withFlags is a copy of m with add added.
func withFlags(m, add map[string]string) map[string]string {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}

// args merges layers of flags, later layers overriding earlier ones, into sorted arguments.
func args(layers ...map[string]string) []string {
	merged := map[string]string{}
	for _, l := range layers {
		maps.Copy(merged, l)
	}
	out := make([]string, 0, len(merged))
	for _, k := range slices.Sorted(maps.Keys(merged)) {
		out = append(out, "--"+k+"="+merged[k])
	}
	return out
}

// memberLabels label the pods and volume claims of vc's component: its selector's labels and,
// in the control-plane namespace, the VirtualCluster's namespace (byVirtualClusterLabel).
func memberLabels(vc *v1alpha1.VirtualCluster, component string) map[string]string {
	labels := naming.For(vc.Name).Labels(component)
	if ns := Namespace(vc); ns != vc.Namespace {
		labels[naming.LabelVirtualClusterNamespace] = vc.Namespace
	}
	return labels
}

// podTemplate is a control-plane pod template: labels select its pods (the spread among them
// too), podLabels label them.
func podTemplate(s Settings, labels, podLabels map[string]string, certsHash string, spec corev1.PodSpec) corev1.PodTemplateSpec {
	spec.Affinity = awayFromLendableNodes(s)
	// Members of one tenant on different machines where the nodes allow it: losing one node
	// then costs a HA tenant one etcd member and one apiserver, not its quorum.
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew:           1,
		TopologyKey:       corev1.LabelHostname,
		WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector:     &metav1.LabelSelector{MatchLabels: labels},
	}}
	// Tenant components never talk to the host's API: no host token in their pods.
	spec.AutomountServiceAccountToken = ptr.To(false)
	spec.EnableServiceLinks = ptr.To(false)
	spec.SecurityContext = podSecurityContext()
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      podLabels,
			Annotations: map[string]string{naming.AnnotationConfigHash: certsHash},
		},
		Spec: spec,
	}
}

// awayFromLendableNodes keeps a tenant's pods that hold its data (etcd, the control plane, a
// snapshot and the claim it pins to its node) off nodes that may be lent to tenants: lending a
// node drains it, which would move (and, with ephemeral storage, empty) a tenant's etcd, so a
// node that runs one is never lent. A preference alone loses to the scheduler's other scores
// (a busier node, members spread over hostnames), and one tenant's pod would then keep the node
// from every tenant; Settings.ControlPlanesOnLendableNodes makes it one.
func awayFromLendableNodes(s Settings) *corev1.Affinity {
	notLendable := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: v1alpha1.LabelLendable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"true"},
	}}}
	if s.ControlPlanesOnLendableNodes {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: notLendable,
		}}}}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{notLendable}},
	}}
}

func podSecurityContext() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To[int64](nonRootID),
		RunAsGroup:     ptr.To[int64](nonRootID),
		FSGroup:        ptr.To[int64](nonRootID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

func containerSecurityContext() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

func secretVolume(name, secret string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: secret, DefaultMode: ptr.To[int32](0o440)},
	}}
}

func containerPort(name string, port int32) corev1.ContainerPort {
	return corev1.ContainerPort{Name: name, ContainerPort: port, Protocol: corev1.ProtocolTCP}
}

func httpProbe(path, port string, scheme corev1.URIScheme, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: path, Port: intstr.FromString(port), Scheme: scheme,
		}},
		PeriodSeconds:    period,
		TimeoutSeconds:   5,
		FailureThreshold: failures,
	}
}

// idleCPU is the CPU a component requests when the tenant sets none: about what it uses idle
// (BENCHMARKS.md, "Idle CPU: work queues": etcd 9.9, apiserver 19.0, controller-manager and
// scheduler 6.2 millicores), so that the host's scheduler packs idle tenants by what they use.
// Requests twice as high left a 2-core node full at 18 awake tenants using half of it. A
// tenant that works harder sets its own.
var idleCPU = map[string]string{"etcd": "10m", "apiserver": "20m", "controller-manager": "5m", "scheduler": "2m"}

// withDefaultRequests fills in CPU and memory requests the tenant left unset.
func withDefaultRequests(r corev1.ResourceRequirements, cpu, mem string) corev1.ResourceRequirements {
	r = *r.DeepCopy()
	if r.Requests == nil {
		r.Requests = corev1.ResourceList{}
	}
	for name, def := range map[corev1.ResourceName]string{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem} {
		_, req := r.Requests[name]
		_, lim := r.Limits[name]
		if !req && !lim {
			r.Requests[name] = resource.MustParse(def)
		}
	}
	return r
}

// sumResources are the requests and limits of two components run in one container: the sums
// of their requests, and, for a resource that either limits, the sum of its limit and the
// other's (or, when the other has none, the other's request).
func sumResources(a, b corev1.ResourceRequirements) corev1.ResourceRequirements {
	// What a component without a request is given: its limit (as the API server defaults it).
	request := func(r corev1.ResourceRequirements, n corev1.ResourceName) resource.Quantity {
		if q, ok := r.Requests[n]; ok {
			return q
		}
		return r.Limits[n]
	}
	limit := func(r corev1.ResourceRequirements, n corev1.ResourceName) resource.Quantity {
		if q, ok := r.Limits[n]; ok {
			return q
		}
		return request(r, n)
	}
	names := map[corev1.ResourceName]bool{}
	for _, list := range []corev1.ResourceList{a.Requests, a.Limits, b.Requests, b.Limits} {
		for n := range list {
			names[n] = true
		}
	}
	out := corev1.ResourceRequirements{Requests: corev1.ResourceList{}}
	for n := range names {
		req := request(a, n).DeepCopy()
		req.Add(request(b, n))
		out.Requests[n] = req
		_, limA := a.Limits[n]
		_, limB := b.Limits[n]
		if !limA && !limB {
			continue
		}
		lim := limit(a, n).DeepCopy()
		lim.Add(limit(b, n))
		if out.Limits == nil {
			out.Limits = corev1.ResourceList{}
		}
		out.Limits[n] = lim
	}
	return out
}

// goRuntimeEnv is the Go runtime's settings for a tenant component's container.
//
// GOGC=50: most of an idle component's heap is built once and kept (the apiserver's OpenAPI
// documents and API installation: about 70 MB); letting the heap grow to twice its live size
// before collecting, Go's default, costs an idle tenant some 50 MiB for nothing (apiserver
// 36, etcd 6, controller-manager 4, scheduler 2, measured by TestIdleProcessMemory). At 50 the
// heap grows by half; a busy component collects a little more often. 50 is the ceiling: while
// a component allocates little, nest-controlplane and nest-etcd lower its GOGC further
// (internal/idlegc). CoreDNS keeps Go's default: at 50 an idle one held 8.45 MiB instead of
// 8.55 (BENCHMARKS.md).
//
// GOMEMLIMIT is the container's memory limit, so that the component collects harder as it nears
// the limit instead of being killed there. Without a limit the Downward API gives the node's
// allocatable memory, which changes nothing. (Set to the memory request instead, the limit
// trims little and costs much: components whose live heap nears it collect without pause; an
// apiserver held to 128Mi spent half a core idle.)
func goRuntimeEnv(container string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "GOGC", Value: "50"},
		{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{
			ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: container, Resource: "limits.memory"},
		}},
	}
}

// etcdQuota keeps etcd's backend below its volume: four fifths of the volume, at most etcd's
// own 2 GiB default.
func etcdQuota(st v1alpha1.EtcdStorage) int64 {
	var size *resource.Quantity
	switch {
	case st.PersistentVolumeClaim != nil:
		size = &st.PersistentVolumeClaim.Size
	case st.Ephemeral != nil:
		size = st.Ephemeral.SizeLimit
	}
	if size == nil || size.Value()*4/5 >= maxEtcdQuota || size.Value() <= 0 {
		return maxEtcdQuota
	}
	return size.Value() * 4 / 5
}

// etcdMembers is how many members the tenant's etcd has: spec.etcd.replicas, 1 when unset.
func etcdMembers(vc *v1alpha1.VirtualCluster) int32 { return max(vc.Spec.Etcd.Replicas, 1) }

// etcdMemberPod is the name of etcd member i's pod (and of the member).
func etcdMemberPod(vc *v1alpha1.VirtualCluster, i int32) string {
	return fmt.Sprintf("%s-%d", naming.For(vc.Name).EtcdStatefulSet(), i)
}

// etcdMemberHost is the DNS name of the etcd member in pod: the pod's name under the peer
// Service.
func etcdMemberHost(vc *v1alpha1.VirtualCluster, pod string) string {
	return fmt.Sprintf("%s.%s.%s.svc", pod, naming.For(vc.Name).EtcdPeerService(), Namespace(vc))
}

// etcdServers is the apiserver's --etcd-servers: the client Service, then each member by name.
// The Service stays right as members move; a member's name resolves as soon as its pod has an
// address, about a second before the host's kube-proxy routes the Service to it, which is
// what a new tenant's apiserver waits for (the etcd client uses whichever answers).
func etcdServers(vc *v1alpha1.VirtualCluster) string {
	names := naming.For(vc.Name)
	servers := []string{fmt.Sprintf("https://%s.%s.svc:%d", names.EtcdClientService(), Namespace(vc), EtcdClientPort)}
	for i := range etcdMembers(vc) {
		servers = append(servers, fmt.Sprintf("https://%s:%d", etcdMemberHost(vc, etcdMemberPod(vc, i)), EtcdClientPort))
	}
	return strings.Join(servers, ",")
}

// apiServerFlags are the kube-apiserver's flags.
func apiServerFlags(vc *v1alpha1.VirtualCluster, s Settings) Flags {
	f := Flags{
		Owned: map[string]string{
			"advertise-address":                  "$(POD_IP)",
			"allow-privileged":                   "true",
			"authorization-mode":                 "Node,RBAC",
			"bind-address":                       "0.0.0.0",
			"cert-dir":                           "/tmp",
			"client-ca-file":                     pkiPath(KeyClientCABundle),
			"enable-bootstrap-token-auth":        "true",
			"endpoint-reconciler-type":           "lease",
			"etcd-cafile":                        pkiPath(KeyEtcdCACert),
			"etcd-certfile":                      pkiPath(LeafAPIServerEtcdClient.CertFile()),
			"etcd-keyfile":                       pkiPath(LeafAPIServerEtcdClient.KeyFile()),
			"etcd-servers":                       etcdServers(vc),
			"kubelet-client-certificate":         pkiPath(LeafAPIServerKubeletClient.CertFile()),
			"kubelet-client-key":                 pkiPath(LeafAPIServerKubeletClient.KeyFile()),
			"proxy-client-cert-file":             pkiPath(LeafFrontProxyClient.CertFile()),
			"proxy-client-key-file":              pkiPath(LeafFrontProxyClient.KeyFile()),
			"requestheader-allowed-names":        FrontProxyClientUser,
			"requestheader-client-ca-file":       pkiPath(KeyFrontProxyCACert),
			"requestheader-extra-headers-prefix": "X-Remote-Extra-",
			"requestheader-group-headers":        "X-Remote-Group",
			"requestheader-username-headers":     "X-Remote-User",
			"secure-port":                        fmt.Sprint(APIServerPort),
			"service-account-issuer":             "https://kubernetes.default.svc." + TenantClusterDomain,
			"service-account-key-file":           pkiPath(KeySAPub),
			"service-account-signing-key-file":   pkiPath(KeySAKey),
			"service-cluster-ip-range":           s.ServiceCIDR,
			"tls-cert-file":                      pkiPath(LeafAPIServer.CertFile()),
			"tls-private-key-file":               pkiPath(LeafAPIServer.KeyFile()),
			// KubeNest's tenant guard (nest-controlplane apiserver): what pods on nodes may do,
			// and which kube-proxy pods are the operator's.
			"kubenest-node-pod-security": nodePodSecurity(vc),
			"kubenest-kube-proxy-image":  s.Image,
		},
		Defaults: map[string]string{
			// Stopping with its pod, the apiserver serves until the pod's controllers handed
			// back their lease (nest-controlplane, leading.go).
			"kubenest-controllers-lease": controllersLease(vc),
			"enable-admission-plugins":   "NodeRestriction",
			// The issuer's OIDC discovery document points at its keys by the issuer's own
			// name, which every tenant pod resolves and the serving certificate holds;
			// upstream's default, the advertised address, is the pod's IP, which it does not.
			"service-account-jwks-uri":        "https://kubernetes.default.svc." + TenantClusterDomain + "/openid/v1/jwks",
			"kubelet-preferred-address-types": "InternalIP,ExternalIP,Hostname",
			// Webhooks, CRD conversion and aggregated APIs are dialed at their Service's
			// endpoints, not its ClusterIP: the apiserver is a host pod, and a tenant
			// without the shared node has no copy of its Services in the host, so its
			// ClusterIPs lead nowhere there. The endpoints are the tenant's to write; they
			// reach what its pods reach (DESIGN.md, "Tenant Services and DNS").
			"enable-aggregator-routing": "true",
			"profiling":                 "false",
			"watch-cache-sizes":         uncachedResources(),
			// Upstream 1.36 turns this beta gate on: each apiserver then writes a peer
			// endpoint lease to etcd every 10 s, each with an etcd lease of its own that
			// expires (three raft proposals, a third of an idle tenant's writes), for peers to
			// proxy the requests of a mixed-version roll to one another. That proxy needs
			// --peer-ca-file, which no tenant apiserver has, so nothing reads the leases.
			// DetectCacheInconsistency (beta, on since 1.34) lists every cached resource
			// from etcd every 5 to 7.5 minutes to compare it with the watch cache, about
			// eight full LISTs a minute in an idle tenant, for a check that, on a difference,
			// only logs it and serves that resource's lists at past versions from etcd.
			"feature-gates": "DetectCacheInconsistency=false,UnknownVersionInteroperabilityProxy=false",
		},
		Extra: vc.Spec.ControlPlane.APIServer.ExtraArgs,
	}
	// A lone apiserver renews its address in the kubernetes Service's endpoints (its master
	// lease: three etcd proposals each time) once a minute instead of every 10 s. The time to
	// live that follows (90 s) only matters for an apiserver that stops without removing its
	// address while others run: a lone one removes it when it stops, and a crash restarts it
	// in its own pod, at the same address. Tenants of several keep upstream's 10 s.
	if loneControlPlane(vc) {
		f.Defaults["kubenest-endpoint-reconcile-interval"] = "1m"
	}
	return f
}

// rarelyListed are resources a tenant's own components list and watch through informers
// but that a cluster seldom holds or changes. The apiserver keeps a watch cache of every
// resource, each with timers that wake it about once a second; without caches for these, an
// idle tenant's apiserver used 17 % less CPU (24.6 instead of 29.7 millicores; BENCHMARKS.md),
// and etcd no more. Their lists and watches are served by etcd, as the apiserver did for every
// list before watch caches; extraArgs {watch-cache-sizes: ""} caches them again.
var rarelyListed = []string{
	"podtemplates", "replicationcontrollers", "limitranges",
	"mutatingadmissionpolicies.admissionregistration.k8s.io", "mutatingadmissionpolicybindings.admissionregistration.k8s.io",
	"horizontalpodautoscalers.autoscaling", "cronjobs.batch", "certificatesigningrequests.certificates.k8s.io",
	"ingressclasses.networking.k8s.io", "ingresses.networking.k8s.io", "networkpolicies.networking.k8s.io",
	"runtimeclasses.node.k8s.io", "poddisruptionbudgets.policy",
	"deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io", "resourceclaimtemplates.resource.k8s.io", "resourceslices.resource.k8s.io",
	"csidrivers.storage.k8s.io", "csinodes.storage.k8s.io", "csistoragecapacities.storage.k8s.io",
	"volumeattachments.storage.k8s.io", "volumeattributesclasses.storage.k8s.io",
}

// uncachedResources is --watch-cache-sizes without a watch cache for rarelyListed.
func uncachedResources() string {
	sizes := make([]string, 0, len(rarelyListed))
	for _, r := range rarelyListed {
		sizes = append(sizes, r+"#0")
	}
	return strings.Join(sizes, ",")
}

// nodePodSecurity is the Pod Security level of pods on the tenant's nodes, as the tenant
// guard's flag takes it.
func nodePodSecurity(vc *v1alpha1.VirtualCluster) string {
	if vc.Spec.Nodes.Privileged() {
		return "privileged"
	}
	return "baseline"
}

// controllerManagerFlags are the kube-controller-manager's flags.
func controllerManagerFlags(vc *v1alpha1.VirtualCluster) Flags {
	f := Flags{
		Owned: map[string]string{
			"authentication-kubeconfig":        pkiPath(KeyControllerManagerKubeconfig),
			"authorization-kubeconfig":         pkiPath(KeyControllerManagerKubeconfig),
			"bind-address":                     "0.0.0.0",
			"kubeconfig":                       pkiPath(KeyControllerManagerKubeconfig),
			"leader-elect":                     "true",
			"root-ca-file":                     pkiPath(KeyCACert),
			"secure-port":                      fmt.Sprint(ControllerManagerPort),
			"tls-cert-file":                    pkiPath(LeafControllerManager.CertFile()),
			"tls-private-key-file":             pkiPath(LeafControllerManager.KeyFile()),
			"service-account-private-key-file": pkiPath(KeySAKey),
			"use-service-account-credentials":  "true",

			// No general signer: the tenant CA's key stays in the CA Secret, which no pod
			// mounts. The controller-manager signs only kubelet client certificates (TLS
			// bootstrap of lent nodes), with the kubelet signer; that signer only issues
			// system:node:<name> certificates in group system:nodes.
			"cluster-signing-cert-file":                "",
			"cluster-signing-key-file":                 "",
			"cluster-signing-kubelet-client-cert-file": KubeletSignerDir + "/" + KeyKubeletSignerCert,
			"cluster-signing-kubelet-client-key-file":  KubeletSignerDir + "/" + KeyKubeletSignerKey,
		},
		Defaults: map[string]string{
			"cluster-name": vc.Name,
			"controllers":  "*,bootstrapsigner,tokencleaner",
			"profiling":    "false",
			// The lease the whole controllers process runs under (the scheduler too), as a
			// control plane of several replicas has it: the leader renews it every 3 s
			// instead of upstream's 2 s (each renewal is a write to
			// etcd: 20 a minute instead of 30), and it lasts 13 s instead of 15, so that a
			// replacement still takes over no later than upstream's would after a leader
			// dies: it sees the last renewal up to one retry late and tries once per retry,
			// 13 + 2×3 = 19 s at most, upstream 15 + 2×2 = 19 s. The leader still gives up
			// after 10 s without renewing.
			"leader-elect-lease-duration": "13s",
			"leader-elect-renew-deadline": "10s",
			"leader-elect-retry-period":   "3s",
		},
		Extra: vc.Spec.ControlPlane.ControllerManager.ExtraArgs,
	}
	// A lone controllers process has no standby to take over, so how long its lease lasts
	// only decides how long a successor waits for a holder that stopped without handing the
	// lease back, and the controllers process hands it back when it stops and, after a crash,
	// when it starts again (nest-controlplane, leading.go). It renews every 8 s (7.5 writes
	// a minute instead of 20), gives up after 20 s without renewing (an apiserver restart in
	// its pod is outlived) and lasts 30 s. A woken tenant's controllers and a crashed
	// container's next run take the lease at once; a rolled control plane's new controllers
	// take the lease handed back at their next try, 8 to 17.6 s apart with client-go's jitter
	// (upstream's new controller-manager waits out the old one's 15 s lease, plus a try 2 to
	// 4.4 s apart).
	if loneControlPlane(vc) {
		f.Defaults["leader-elect-lease-duration"] = "30s"
		f.Defaults["leader-elect-renew-deadline"] = "20s"
		f.Defaults["leader-elect-retry-period"] = "8s"
	}
	return f
}

// loneControlPlane says whether the tenant runs one control-plane pod, with no standby
// apiserver or controllers: the master lease and the controllers' lease are then renewed less
// often.
func loneControlPlane(vc *v1alpha1.VirtualCluster) bool {
	return ptr.Deref(vc.Spec.ControlPlane.Replicas, 1) == 1
}

// controllersLease is the lease the controllers process runs under, namespace/name, as the
// controller-manager's flags name it.
func controllersLease(vc *v1alpha1.VirtualCluster) string {
	extra := vc.Spec.ControlPlane.ControllerManager.ExtraArgs
	ns, name := extra["leader-elect-resource-namespace"], extra["leader-elect-resource-name"]
	if ns == "" {
		ns = "kube-system"
	}
	if name == "" {
		name = "kube-controller-manager"
	}
	return ns + "/" + name
}

// schedulerFlags are the kube-scheduler's flags. It takes no lease of its own: the
// controllers process runs it while its controller-manager leads (nest-controlplane
// controllers --help), which halves the idle tenant's lease renewals.
func schedulerFlags(vc *v1alpha1.VirtualCluster) Flags {
	return Flags{
		Owned: map[string]string{
			"authentication-kubeconfig": pkiPath(KeySchedulerKubeconfig),
			"authorization-kubeconfig":  pkiPath(KeySchedulerKubeconfig),
			"bind-address":              "0.0.0.0",
			"kubeconfig":                pkiPath(KeySchedulerKubeconfig),
			"leader-elect":              "false",
			"secure-port":               fmt.Sprint(SchedulerPort),
			"tls-cert-file":             pkiPath(LeafScheduler.CertFile()),
			"tls-private-key-file":      pkiPath(LeafScheduler.KeyFile()),
		},
		Defaults: map[string]string{"profiling": "false"},
		Extra:    vc.Spec.ControlPlane.Scheduler.ExtraArgs,
	}
}

// pkiPath is where a file of the control-plane certificates Secret is mounted.
func pkiPath(file string) string { return PKIDir + "/" + file }
