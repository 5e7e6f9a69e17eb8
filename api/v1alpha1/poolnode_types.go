package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// LabelLendable on a host Node opts it in to be lent to tenants: the operator makes a
// PoolNode for every Node labelled kubenest.io/lendable=true.
const LabelLendable = "kubenest.io/lendable"

// LabelLent is on a lent node's Node in the tenant, set to "true" by its kubelet when it
// registers there: what runs only on lent nodes (the tenant's kube-proxy) selects it, and the
// shared virtual node never has it.
const LabelLent = "kubenest.io/lent"

// AnnotationCordoned on a host Node says KubeNest cordoned it, to lend it: KubeNest uncordons
// it when it is back, and nothing of the host should be reached on it meanwhile.
const AnnotationCordoned = "kubenest.io/cordoned"

// PoolNode is a host node that may be lent to a tenant: which tenant it is lent to, and where
// its kubelet is now. There is one per lendable node, named after it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pn,categories=kubenest
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Tenant",type=string,JSONPath=`.spec.tenant.name`
// +kubebuilder:printcolumn:name="Tenant-Namespace",type=string,JSONPath=`.spec.tenant.namespace`
// +kubebuilder:printcolumn:name="Kubelet-In",type=string,JSONPath=`.status.agent.cluster`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PoolNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is where the operator wants the node.
	// +optional
	Spec PoolNodeSpec `json:"spec,omitzero"`

	// status is where the node is: the operator's view (phase, conditions) and its node
	// agent's report.
	// +optional
	Status PoolNodeStatus `json:"status,omitzero"`
}

// PoolNodeSpec is written by the operator. A node given back keeps its joinSecretName until
// the operator has told the agent to return it.
type PoolNodeSpec struct {
	// tenant is the VirtualCluster the node is lent to; unset, the node belongs to the host.
	// +optional
	Tenant *TenantReference `json:"tenant,omitempty"`

	// joinSecretName names the Secret, in the operator's namespace, that lets the node join
	// the tenant. The operator sets it once the node is drained; the node agent moves the
	// kubelet to the tenant only then, and back to the host once it is unset.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	JoinSecretName string `json:"joinSecretName,omitempty"`
}

// TenantReference names a VirtualCluster and one of its promotion requests.
type TenantReference struct {
	// namespace and name of the VirtualCluster.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// uid of the VirtualCluster, so a new one of the same name is another tenant.
	// +required
	UID types.UID `json:"uid"`
	// request is the name of the promotion request in the VirtualCluster's spec.nodes.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Request string `json:"request"`
}

// PoolNodePhase says where a node is.
// +kubebuilder:validation:Enum=InHost;Draining;JoiningTenant;InTenant;Returning;Quarantined;Unreachable
type PoolNodePhase string

const (
	// PoolNodeInHost: the node's kubelet serves the host.
	PoolNodeInHost PoolNodePhase = "InHost"
	// PoolNodeDraining: assigned to a tenant; the host's pods are being evicted.
	PoolNodeDraining PoolNodePhase = "Draining"
	// PoolNodeJoiningTenant: the node agent is moving the kubelet to the tenant.
	PoolNodeJoiningTenant PoolNodePhase = "JoiningTenant"
	// PoolNodeInTenant: the node's kubelet serves the tenant.
	PoolNodeInTenant PoolNodePhase = "InTenant"
	// PoolNodeReturning: the node agent is moving the kubelet back to the host.
	PoolNodeReturning PoolNodePhase = "Returning"
	// PoolNodeQuarantined: the node came back from a tenant that could be root on it
	// (spec.nodes.podSecurity Privileged). Its kubelet stays stopped, nothing of the host's
	// runs there and it is lent to nobody, until the platform reimages it and marks it clean
	// (AnnotationMarkClean).
	PoolNodeQuarantined PoolNodePhase = "Quarantined"
	// PoolNodeUnreachable: the node agent has not reported for a while.
	PoolNodeUnreachable PoolNodePhase = "Unreachable"
)

// Condition types of a PoolNode.
const (
	// PoolNodeConditionDrained: the host's evictable pods are gone from the node.
	PoolNodeConditionDrained = "Drained"
	// PoolNodeConditionAgentReporting: the node agent reported recently.
	PoolNodeConditionAgentReporting = "AgentReporting"
	// PoolNodeConditionKubeletReady: the kubelet is Ready in the cluster it serves.
	PoolNodeConditionKubeletReady = "KubeletReady"
	// PoolNodeConditionClean: nothing but the host's own software has had root on the node
	// since it was last marked clean. False once the node is lent to a tenant granted
	// privileged pods (status.quarantine says which).
	PoolNodeConditionClean = "Clean"
)

// AnnotationMarkClean on a PoolNode, set by the platform once a quarantined node is reimaged
// (any value), ends its quarantine: the operator clears status.quarantine and removes the
// annotation, and the node agent returns the kubelet to the host.
const AnnotationMarkClean = "kubenest.io/mark-clean"

// ClusterNone is the value of status.agent.cluster while a quarantined node's kubelet serves
// no cluster.
const ClusterNone = "none"

// ClusterHost is the value of status.agent.cluster when the kubelet serves the host.
const ClusterHost = "host"

// PoolNodeStatus is written by the operator, except agent, which the node agent writes.
type PoolNodeStatus struct {
	// phase summarises where the node is.
	// +optional
	Phase PoolNodePhase `json:"phase,omitempty"`

	// conditions: Drained, AgentReporting, KubeletReady.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// agent is the node agent's own report.
	// +optional
	Agent AgentStatus `json:"agent,omitzero"`

	// quarantine, once set, says the node was lent to a tenant granted privileged pods, which
	// may have changed anything on it: when it leaves that tenant it serves no cluster until
	// the platform marks it clean (AnnotationMarkClean).
	// +optional
	Quarantine *Quarantine `json:"quarantine,omitempty"`
}

// Quarantine says why a node must be reimaged before the host uses it again.
type Quarantine struct {
	// tenant is the VirtualCluster that could be root on the node.
	// +required
	Tenant TenantReference `json:"tenant"`
	// since is when the node was first seen lent to it with privileged pods granted.
	// +required
	Since metav1.Time `json:"since"`
}

// AgentStatus is what a node agent reports about its node.
type AgentStatus struct {
	// cluster is where the kubelet serves now: "host", or the VirtualCluster as
	// <namespace>/<name>.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Cluster string `json:"cluster,omitempty"`

	// tenantUID is the UID of the VirtualCluster the kubelet serves, when it serves one.
	// +optional
	TenantUID types.UID `json:"tenantUID,omitempty"`

	// step is the step of a switch the agent is at, empty when it is not switching.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Step string `json:"step,omitempty"`

	// message says what the agent did last, or why it cannot go on.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// heartbeatTime is when the agent last reported.
	// +optional
	HeartbeatTime metav1.Time `json:"heartbeatTime,omitzero"`

	// version of the node agent.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`
}

// PoolNodeList is a list of PoolNodes.
//
// +kubebuilder:object:root=true
type PoolNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PoolNode `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PoolNode{}, &PoolNodeList{})
}
