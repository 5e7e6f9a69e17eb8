// Package sharednode says which tenant pods the shared node (the tenant's virtual node, whose
// pods run on the host's nodes) refuses, and why. Two sides use it: clustertree, which refuses
// such a pod when it is bound to the shared node, and the tenant's scheduler, whose
// KubeNestSharedNode filter never binds one there (cmd/nest-controlplane), so a pod only lands
// on a node that will run it.
package sharednode

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// LabelVirtualNode marks the tenant's shared node ("true").
const LabelVirtualNode = "kubenest.io/virtual-node"

// The tenant Service kube-system/kubenest-shared-node holds the shared node's address (a
// ClusterIP of the tenant's range) and leads its ports: the kubelet API, and the tenant's
// NodePorts (clustertree keeps it, and its EndpointSlices, named after it with these
// suffixes; so are those of its copy in the host, whose name is the tenant's).
const (
	AddressServiceNamespace = "kube-system"
	AddressService          = "kubenest-shared-node"
	SliceSuffixKubelet      = "-kubelet"
	SliceSuffixNodePorts    = "-nodeports"
	AddressSliceKubelet     = AddressService + SliceSuffixKubelet
	AddressSliceNodePorts   = AddressService + SliceSuffixNodePorts
)

// Taint is what the shared node carries when only the pods that tolerate it may run there
// (the VirtualCluster's spec.nodes.sharedPlacement: OptIn).
var Taint = corev1.Taint{Key: "kubenest.io/shared-node", Effect: corev1.TaintEffectNoSchedule}

// IsSharedNode says whether node is a tenant's shared node.
func IsSharedNode(node *corev1.Node) bool {
	return node != nil && node.Labels[LabelVirtualNode] == "true"
}

// Refusal says why a tenant pod may not run on the shared node: the field and the reason.
type Refusal struct {
	Field  string
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("%s: %s", r.Field, r.Reason)
}

// baselineCapabilities are the capabilities Pod Security's baseline level allows adding.
var baselineCapabilities = []corev1.Capability{"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID",
	"KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}

// baseline evaluates pods against Pod Security's baseline level, which the host namespace of
// the shared node's pods enforces.
var baseline = func() policy.Evaluator {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("pod security evaluator: %v", err))
	}
	return e
}()

// Check returns why the shared node refuses pod, or nil when it runs it: host privileges
// (host namespaces and ports, privileged containers, capabilities past Pod Security's
// baseline, anything else baseline forbids, in any container, ephemeral ones too) and volumes
// the shared node cannot give. The specific checks come first, for a message naming the field.
func Check(pod *corev1.Pod) *Refusal {
	if r := checkHost(&pod.Spec); r != nil {
		return r
	}
	if r := checkVolumes(pod.Spec.Volumes); r != nil {
		return r
	}
	lv := psapi.LevelVersion{Level: psapi.LevelBaseline, Version: psapi.LatestVersion()}
	if result := policy.AggregateCheckResults(baseline.EvaluatePod(lv, &pod.ObjectMeta, &pod.Spec)); !result.Allowed {
		return &Refusal{Field: "spec", Reason: "the shared node runs pods that meet Pod Security \"baseline\", and this one does not: " + result.ForbiddenDetail()}
	}
	return nil
}

// checkHost refuses what would give a tenant pod the host's privileges.
func checkHost(s *corev1.PodSpec) *Refusal {
	switch {
	case s.HostNetwork:
		return &Refusal{Field: "spec.hostNetwork", Reason: "pods on the shared node cannot use the host's network"}
	case s.HostPID:
		return &Refusal{Field: "spec.hostPID", Reason: "pods on the shared node cannot see the host's processes"}
	case s.HostIPC:
		return &Refusal{Field: "spec.hostIPC", Reason: "pods on the shared node cannot use the host's IPC namespace"}
	}
	ephemeral := make([]corev1.Container, 0, len(s.EphemeralContainers))
	for _, ec := range s.EphemeralContainers {
		ephemeral = append(ephemeral, corev1.Container(ec.EphemeralContainerCommon))
	}
	for _, group := range []struct {
		kind       string
		containers []corev1.Container
	}{{"initContainers", s.InitContainers}, {"containers", s.Containers}, {"ephemeralContainers", ephemeral}} {
		for i, c := range group.containers {
			field := fmt.Sprintf("spec.%s[%d]", group.kind, i)
			for j, port := range c.Ports {
				if port.HostPort != 0 {
					return &Refusal{Field: fmt.Sprintf("%s.ports[%d].hostPort", field, j), Reason: "pods on the shared node cannot bind host ports"}
				}
			}
			sc := c.SecurityContext
			if sc == nil {
				continue
			}
			if sc.Privileged != nil && *sc.Privileged {
				return &Refusal{Field: field + ".securityContext.privileged", Reason: "privileged containers are not allowed on the shared node"}
			}
			if sc.Capabilities != nil {
				for _, c := range sc.Capabilities.Add {
					if !slices.Contains(baselineCapabilities, c) {
						return &Refusal{Field: field + ".securityContext.capabilities.add",
							Reason: fmt.Sprintf("capability %s is not allowed on the shared node", c)}
					}
				}
			}
		}
	}
	return nil
}

// checkVolumes refuses volumes the shared node cannot give: it runs emptyDir, configMap,
// secret, downwardAPI, projected (of those, and of service-account tokens) and image volumes
// (an OCI image mounted read-only, pulled like a container's).
func checkVolumes(volumes []corev1.Volume) *Refusal {
	for i, v := range volumes {
		field := fmt.Sprintf("spec.volumes[%d]", i)
		switch {
		case v.EmptyDir != nil, v.ConfigMap != nil, v.Secret != nil, v.DownwardAPI != nil, v.Image != nil:
		case v.Projected != nil:
			for j, s := range v.Projected.Sources {
				if s.ConfigMap == nil && s.Secret == nil && s.DownwardAPI == nil && s.ServiceAccountToken == nil {
					return &Refusal{Field: fmt.Sprintf("%s.projected.sources[%d]", field, j),
						Reason: "this projected volume source is not supported on the shared node"}
				}
			}
		case v.HostPath != nil:
			return &Refusal{Field: field + ".hostPath", Reason: "hostPath volumes would reach into the host's nodes and are not allowed on the shared node"}
		case v.PersistentVolumeClaim != nil:
			return &Refusal{Field: field + ".persistentVolumeClaim", Reason: "persistent volume claims are not supported on the shared node; use a promoted node"}
		default:
			return &Refusal{Field: field, Reason: "this volume type is not supported on the shared node (emptyDir, configMap, secret, downwardAPI, projected and image are)"}
		}
	}
	return nil
}
