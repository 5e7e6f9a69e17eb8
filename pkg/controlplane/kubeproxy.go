package controlplane

import (
	"fmt"
	"net/url"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// A kube-proxy DaemonSet in iptables mode, as kubeadm installs one: the binary is
// "nest-controlplane kube-proxy" from our image, which carries the iptables userland. Every
// tenant has one for the nodes lent to it (TenantKubeProxy): a lent node leaves the host's
// kube-proxy behind with the host's pods, and the tenant's takes over its Service rules. Only
// one kube-proxy may ever program a node's iptables, so the DaemonSet never surges.
const (
	KubeProxyName      = "kube-proxy"
	KubeProxyNamespace = metav1.NamespaceSystem
	// KubeProxyClusterRole is the built-in role of what kube-proxy reads and writes.
	KubeProxyClusterRole = "system:node-proxier"
	// envServiceHost and envServicePort are what client-go's in-cluster configuration dials;
	// the pod's own values take precedence over the kubelet's Service variables.
	envServiceHost = "KUBERNETES_SERVICE_HOST"
	envServicePort = "KUBERNETES_SERVICE_PORT"
)

// KubeProxy is what a kube-proxy DaemonSet needs.
type KubeProxy struct {
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Server is the apiserver as the nodes reach it (https://host:port), never through a
	// Service: kube-proxy is what makes Services work. Its certificate is verified with the
	// cluster's CA bundle in the pod's service-account volume (kube-root-ca.crt).
	Server string
	// ClusterCIDR, when set, is the pods' range: Service traffic from outside it is
	// masqueraded. Unset, kube-proxy masquerades only what it must.
	ClusterCIDR string
	// NodeSelector keeps the DaemonSet to the nodes with these labels; empty, every node.
	NodeSelector map[string]string
	// Labels go on every object.
	Labels map[string]string
}

// KubeProxyObjects are the objects of a kube-proxy: its ServiceAccount, bound to
// KubeProxyClusterRole, and its DaemonSet, all named KubeProxyName in KubeProxyNamespace (the
// binding has the same name). It has no ConfigMap, as kubeadm's has: everything it reads is
// in its pod's spec, so that a tenant's admin, who can edit every object of its cluster, has no
// file to put into this privileged pod (a kubeconfig names commands to run, exec plugins).
type KubeProxyObjects struct {
	ServiceAccount     *corev1.ServiceAccount
	ClusterRoleBinding *rbacv1.ClusterRoleBinding
	DaemonSet          *appsv1.DaemonSet
}

// TenantKubeProxy is the kube-proxy of the nodes lent to a tenant: it runs only on Nodes with
// LabelLent, which lent kubelets register with and the shared node never has. server is the
// tenant apiserver as lent nodes reach it (NodeEndpoint).
func TenantKubeProxy(s Settings, server string) (*KubeProxyObjects, error) {
	return KubeProxy{
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Server:          server,
		NodeSelector:    map[string]string{v1alpha1.LabelLent: "true"},
		Labels:          map[string]string{naming.LabelManagedBy: naming.ManagedByValue},
	}.Objects()
}

// Objects builds the kube-proxy's objects.
func (p KubeProxy) Objects() (*KubeProxyObjects, error) {
	if p.Image == "" {
		return nil, fmt.Errorf("kube-proxy image must be set")
	}
	host, port, err := serverHostPort(p.Server)
	if err != nil {
		return nil, fmt.Errorf("kube-proxy server: %w", err)
	}
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: KubeProxyName, Namespace: KubeProxyNamespace, Labels: p.labels()}
	}
	crbMeta := meta()
	crbMeta.Namespace = ""
	return &KubeProxyObjects{
		ServiceAccount: &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: meta()},
		ClusterRoleBinding: &rbacv1.ClusterRoleBinding{
			TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
			ObjectMeta: crbMeta,
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: KubeProxyClusterRole},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: KubeProxyName, Namespace: KubeProxyNamespace}},
		},
		DaemonSet: p.daemonSet(host, port),
	}, nil
}

// serverHostPort splits an https URL with a host and a port.
func serverHostPort(server string) (host, port string, err error) {
	u, err := url.Parse(server)
	if err != nil {
		return "", "", err
	}
	if u.Scheme != "https" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.RawQuery != "" {
		return "", "", fmt.Errorf("%q: want https://<host>:<port>", server)
	}
	return u.Hostname(), u.Port(), nil
}

// flags configure kube-proxy: iptables mode, upstream's defaults for the rest, and no
// kubeconfig: client-go's in-cluster configuration (the pod's service-account token and CA
// bundle, the server in its environment). They are flags, not a configuration file, so that
// they are part of the pod's spec, which the tenant's apiserver pins (IsTenantKubeProxyPod): a
// tenant admin cannot make this privileged pod load kernel modules for another mode, change the
// node's kernel settings or run anything else. The node's conntrack table size is
// left as the node has it (--conntrack-max-per-core=0): it is a setting of the node, not of
// the cluster it serves.
func (p KubeProxy) flags() []string {
	flags := []string{
		"--proxy-mode=iptables",
		"--conntrack-max-per-core=0",
		"--hostname-override=$(NODE_NAME)",
	}
	if p.ClusterCIDR != "" {
		flags = append(flags, "--cluster-cidr="+p.ClusterCIDR)
	}
	return flags
}

// daemonSet runs kube-proxy against the apiserver at host and port.
func (p KubeProxy) daemonSet(host, port string) *appsv1.DaemonSet {
	selector := map[string]string{"k8s-app": KubeProxyName}
	podLabels := p.labels()
	for k, v := range selector {
		podLabels[k] = v
	}
	hostPath := func(name, path string, typ corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: ptr.To(typ)}}}
	}
	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: KubeProxyName, Namespace: KubeProxyNamespace, Labels: p.labels()},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			// Never two kube-proxies on a node: they would fight over its iptables rules.
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{
				Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{
					MaxUnavailable: ptr.To(intstr.FromInt32(1)),
					MaxSurge:       ptr.To(intstr.FromInt32(0)),
				},
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec: corev1.PodSpec{
					ServiceAccountName: KubeProxyName,
					HostNetwork:        true,
					PriorityClassName:  "system-node-critical",
					NodeSelector:       p.NodeSelector,
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:            KubeProxyName,
						Image:           p.Image,
						ImagePullPolicy: p.ImagePullPolicy,
						Command:         append([]string{BinaryPath, "kube-proxy"}, p.flags()...),
						Env: []corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
								FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"},
							}},
							{Name: envServiceHost, Value: host},
							{Name: envServicePort, Value: port},
						},
						// Root and privileged: it writes the node's iptables rules and sysctls.
						SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true), RunAsUser: ptr.To[int64](0), RunAsGroup: ptr.To[int64](0)},
						Resources:       withDefaultRequests(corev1.ResourceRequirements{}, "10m", "32Mi"),
						VolumeMounts: []corev1.VolumeMount{
							{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
							{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
						hostPath("lib-modules", "/lib/modules", corev1.HostPathUnset),
					},
				},
			},
		},
	}
}

func (p KubeProxy) labels() map[string]string {
	l := map[string]string{}
	for k, v := range p.Labels {
		l[k] = v
	}
	return l
}

// serviceAccountDir is where the service-account admission plugin mounts a pod's token.
const serviceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// IsTenantKubeProxyPod says whether pod is exactly a pod of the kube-proxy DaemonSet the
// operator keeps in every tenant (TenantKubeProxy), running image: same namespace, one
// container with the same image, command, environment, security context, mounts, probes and
// hooks, the same volumes, and no other host access. The tenant's apiserver lets such a pod
// be privileged on a lent node, and no other pod of the tenant; the tenant's admin can edit
// the DaemonSet or the pod, but what it then runs is no longer exempt. What the pod's
// scheduling, resources and pull policy are does not matter, nor does the server in its
// environment (a server of the tenant's choosing, which it may point its own kube-proxy at:
// rules for that node's own traffic).
func IsTenantKubeProxyPod(pod *corev1.Pod, image string) bool {
	want := KubeProxy{Image: image}.daemonSet("", "").Spec.Template.Spec
	got := &pod.Spec
	if pod.Namespace != KubeProxyNamespace || got.ServiceAccountName != want.ServiceAccountName ||
		got.HostNetwork != want.HostNetwork || got.HostPID || got.HostIPC || ptr.Deref(got.ShareProcessNamespace, false) ||
		len(got.InitContainers) != 0 || len(got.EphemeralContainers) != 0 || len(got.Containers) != 1 ||
		(got.SecurityContext != nil && !equality.Semantic.DeepEqual(*got.SecurityContext, corev1.PodSecurityContext{})) {
		return false
	}
	c, w := got.Containers[0], want.Containers[0]
	if c.Name != w.Name || c.Image != w.Image || !slices.Equal(c.Command, w.Command) || len(c.Args) != 0 ||
		len(c.EnvFrom) != 0 || c.Lifecycle != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil ||
		c.WorkingDir != "" || len(c.Ports) != 0 ||
		!equality.Semantic.DeepEqual(serverValuesCleared(c.Env), w.Env) || !equality.Semantic.DeepEqual(c.SecurityContext, w.SecurityContext) {
		return false
	}
	mounts := slices.DeleteFunc(slices.Clone(c.VolumeMounts), func(m corev1.VolumeMount) bool {
		return m.MountPath == serviceAccountDir && m.ReadOnly && m.SubPath == "" && m.SubPathExpr == ""
	})
	if !equality.Semantic.DeepEqual(mounts, w.VolumeMounts) {
		return false
	}
	var volumes []corev1.Volume
	for _, v := range got.Volumes {
		if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name }) {
			continue // mounted nowhere, so reaching nothing
		}
		if v.Projected != nil && isServiceAccountVolume(v.Projected) {
			continue
		}
		volumes = append(volumes, v)
	}
	if len(volumes) != len(want.Volumes) {
		return false
	}
	for i, v := range volumes {
		w := want.Volumes[i]
		switch {
		case v.Name != w.Name:
			return false
		case w.HostPath != nil:
			if v.HostPath == nil || v.HostPath.Path != w.HostPath.Path ||
				ptr.Deref(v.HostPath.Type, corev1.HostPathUnset) != ptr.Deref(w.HostPath.Type, corev1.HostPathUnset) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// serverValuesCleared is env with the values of the server's host and port emptied.
func serverValuesCleared(env []corev1.EnvVar) []corev1.EnvVar {
	out := slices.Clone(env)
	for i, e := range out {
		if e.Name == envServiceHost || e.Name == envServicePort {
			out[i].Value = ""
		}
	}
	return out
}

// isServiceAccountVolume says whether a projected volume holds only what the service-account
// admission plugin puts in a pod's token volume: the token, the cluster's CA bundle and the
// namespace.
func isServiceAccountVolume(p *corev1.ProjectedVolumeSource) bool {
	for _, s := range p.Sources {
		switch {
		case s.ServiceAccountToken != nil:
		case s.ConfigMap != nil && s.ConfigMap.Name == "kube-root-ca.crt":
		case s.DownwardAPI != nil && len(s.DownwardAPI.Items) == 1 && s.DownwardAPI.Items[0].FieldRef != nil &&
			s.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.namespace":
		default:
			return false
		}
	}
	return true
}
