package clustertree

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/utils/ptr"
)

// The /etc/hosts of a pod with a subdomain. A kubelet writes the pod's FQDN line,
// "<pod IP> <hostname>.<subdomain>.<namespace>.svc.<cluster domain> <hostname>", into the
// /etc/hosts it gives each container; the host's kubelet would name the host pod's namespace
// and the host's cluster domain there, and only once the pod has its IP can the tenant's line
// be written. So the host pod of a tenant pod with a subdomain runs nest-hosts first, as an
// init container that writes the tenant's file into a volume, and every container mounts that
// file at /etc/hosts (a kubelet leaves /etc/hosts to a container that mounts one). The init
// container, its volume and its events stay out of the tenant's view of the pod.
const (
	// HostsBinaryPath is nest-hosts in the KubeNest image.
	HostsBinaryPath = "/usr/local/bin/nest-hosts"
	// EtcHostsName names the init container and the volume.
	EtcHostsName = "kubenest-etc-hosts"
	// AnnotationEtcHosts marks a host pod that has them: a tenant may name its own that way.
	AnnotationEtcHosts = "kubenest.io/etc-hosts"
	etcHostsPath       = "/etc/hosts"
	etcHostsFile       = "hosts"
	etcHostsDir        = "/kubenest-etc-hosts"
	podIPsEnv          = "KUBENEST_POD_IPS"
)

// withEtcHosts gives the host pod of a tenant pod with a subdomain the tenant's /etc/hosts.
// A tenant pod that already names a container or volume EtcHostsName keeps the host kubelet's.
func (t Translator) withEtcHosts(host *corev1.Pod, tenant *corev1.Pod) {
	spec := &host.Spec
	named := func(c corev1.Container) bool { return c.Name == EtcHostsName }
	if tenant.Spec.Subdomain == "" || t.HostsImage == "" ||
		slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == EtcHostsName }) ||
		slices.ContainsFunc(spec.InitContainers, named) || slices.ContainsFunc(spec.Containers, named) {
		return
	}
	args := []string{
		"--file=" + etcHostsDir + "/" + etcHostsFile,
		"--hostname=" + spec.Hostname,
		"--domain=" + tenant.Spec.Subdomain + "." + tenant.Namespace + ".svc." + clusterDomain,
		"--pod-ips=$(" + podIPsEnv + ")",
	}
	if len(spec.HostAliases) > 0 {
		aliases, _ := json.Marshal(spec.HostAliases) // IPs and DNS names: nothing "$(" expands
		args = append(args, "--host-aliases="+string(aliases))
	}
	writer := corev1.Container{
		Name:            EtcHostsName,
		Image:           t.HostsImage,
		ImagePullPolicy: t.HostsImagePullPolicy,
		Command:         []string{HostsBinaryPath},
		Args:            args,
		Env: []corev1.EnvVar{{Name: podIPsEnv, ValueFrom: &corev1.EnvVarSource{
			FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIPs"}}}},
		VolumeMounts:             []corev1.VolumeMount{{Name: EtcHostsName, MountPath: etcHostsDir}},
		Resources:                etcHostsResources(v1qos.GetPodQOS(tenant)),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Pod Security's restricted level, whatever the namespace enforces.
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532), RunAsGroup: ptr.To[int64](65532),
			AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
			Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: EtcHostsName, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse("1Mi"))}}})
	mount := func(mounts []corev1.VolumeMount) []corev1.VolumeMount {
		if slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return m.MountPath == etcHostsPath }) {
			return mounts // the container's own /etc/hosts
		}
		return append(mounts, corev1.VolumeMount{Name: EtcHostsName, MountPath: etcHostsPath, SubPath: etcHostsFile})
	}
	for i := range spec.Containers {
		spec.Containers[i].VolumeMounts = mount(spec.Containers[i].VolumeMounts)
	}
	for i := range spec.InitContainers {
		spec.InitContainers[i].VolumeMounts = mount(spec.InitContainers[i].VolumeMounts)
	}
	for i := range spec.EphemeralContainers {
		spec.EphemeralContainers[i].VolumeMounts = mount(spec.EphemeralContainers[i].VolumeMounts)
	}
	spec.InitContainers = append([]corev1.Container{writer}, spec.InitContainers...)
	host.Annotations[AnnotationEtcHosts] = "true"
}

// writesEtcHosts says whether the host pod's first init container is the /etc/hosts writer.
func writesEtcHosts(host *corev1.Pod) bool {
	return host.Annotations[AnnotationEtcHosts] == "true" && len(host.Spec.InitContainers) > 0 && host.Spec.InitContainers[0].Name == EtcHostsName
}

// etcHostsResources are the writer's resources, such that the host pod has the tenant pod's
// QoS class (a QoS class counts every container's): none for a BestEffort pod, requests equal
// to limits for a Guaranteed one. An init container's requests count only where they exceed
// the pod's containers' together.
func etcHostsResources(qos corev1.PodQOSClass) corev1.ResourceRequirements {
	small := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("50m"), corev1.ResourceMemory: resource.MustParse("32Mi")}
	switch qos {
	case corev1.PodQOSBestEffort:
		return corev1.ResourceRequirements{}
	case corev1.PodQOSGuaranteed:
		return corev1.ResourceRequirements{Requests: small, Limits: small}
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("8Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: small[corev1.ResourceMemory]},
	}
}

// tenantInitContainers are a host pod's init containers that the tenant pod has: all but
// the /etc/hosts writer.
func tenantInitContainers(host *corev1.Pod) []corev1.Container {
	if writesEtcHosts(host) {
		return host.Spec.InitContainers[1:]
	}
	return host.Spec.InitContainers
}

// containerLists are the lists of container names a kubelet writes in a pod condition's
// message: "containers with incomplete status: [a b]".
var containerLists = regexp.MustCompile(`containers with [a-z]+ status: \[([^\]]*)\]`)

// withoutWriter is a pod condition's message without the /etc/hosts writer's name; a list of
// only that name goes, with its separator.
func withoutWriter(msg string) string {
	if !strings.Contains(msg, EtcHostsName) {
		return msg
	}
	var parts []string
	for _, part := range strings.Split(msg, ", ") {
		m := containerLists.FindStringSubmatchIndex(part)
		if m == nil {
			parts = append(parts, part)
			continue
		}
		names := slices.DeleteFunc(strings.Fields(part[m[2]:m[3]]), func(n string) bool { return n == EtcHostsName })
		if len(names) > 0 {
			parts = append(parts, part[:m[2]]+strings.Join(names, " ")+part[m[3]:])
		}
	}
	return strings.Join(parts, ", ")
}
