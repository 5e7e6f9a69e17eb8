package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MaxNameLength bounds a VirtualCluster's name so that every object derived from it (Services,
// StatefulSet pods, Secrets) stays a valid DNS label without hashing.
const MaxNameLength = 40

// VirtualCluster is a tenant's dedicated Kubernetes cluster: its own etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler, run as pods in the VirtualCluster's namespace
// of the host cluster.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vc,categories=kubenest
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.version`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 40",message="metadata.name must be at most 40 characters: the names of the tenant's Services, pods and Secrets are derived from it"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label that starts with a letter (lowercase letters, digits and '-'), because it names the tenant's Services"
type VirtualCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the tenant asks for.
	// +optional
	Spec VirtualClusterSpec `json:"spec,omitempty"`

	// status is what the operator observed and did.
	// +optional
	Status VirtualClusterStatus `json:"status,omitempty"`
}

// VirtualClusterSpec is the desired shape of a tenant's cluster. Every field has a default, so
// an empty spec asks for a single-replica control plane reached through a ClusterIP Service.
// +kubebuilder:validation:XValidation:rule="has(self.pki) == has(oldSelf.pki) && (!has(self.pki) || self.pki == oldSelf.pki)",message="pki is immutable: the issuer of the tenant's CA is chosen at creation"
// +kubebuilder:validation:XValidation:rule="!has(self.nodes) || !has(self.nodes.promotions) || self.nodes.promotions.all(p, p.count == 0) || !has(self.controlPlane.exposure) || self.controlPlane.exposure.type != 'ClusterIP'",fieldPath=".controlPlane.exposure.type",message="nodes.promotions need controlPlane.exposure.type NodePort or LoadBalancer: a lent node leaves the host's Service network with the host's kube-proxy, so its kubelet cannot reach a ClusterIP"
// +kubebuilder:validation:XValidation:rule="!(has(self.sleep) && has(self.sleep.asleep) && self.sleep.asleep && has(self.etcd.storage) && has(self.etcd.storage.ephemeral))",fieldPath=".sleep.asleep",message="sleep.asleep needs etcd.storage.persistentVolumeClaim: an ephemeral etcd would lose the tenant's data when its pod stops"
// +kubebuilder:validation:XValidation:rule="!(has(self.sleep) && has(self.sleep.afterInactivity) && has(self.etcd.storage) && has(self.etcd.storage.ephemeral))",fieldPath=".sleep.afterInactivity",message="sleep.afterInactivity needs etcd.storage.persistentVolumeClaim: an ephemeral etcd would lose the tenant's data when its pod stops"
// +kubebuilder:validation:XValidation:rule="has(self.restore) == has(oldSelf.restore) && (!has(self.restore) || self.restore == oldSelf.restore)",fieldPath=".restore",message="restore is fixed at creation: restoring over a running tenant is not supported (its clients and nodes would see their objects go back in time); create a new VirtualCluster from the snapshot"
type VirtualClusterSpec struct {
	// controlPlane configures the tenant's kube-apiserver, kube-controller-manager and
	// kube-scheduler, which run together in each control-plane pod.
	// +optional
	// +kubebuilder:default={}
	ControlPlane ControlPlaneSpec `json:"controlPlane,omitzero"`

	// etcd configures the tenant's etcd cluster.
	// +optional
	// +kubebuilder:default={}
	Etcd EtcdSpec `json:"etcd,omitzero"`

	// nodes says where the tenant's pods run: host nodes lent to the tenant (promotions) and
	// the host's shared capacity through a virtual node.
	// +optional
	Nodes NodesSpec `json:"nodes,omitzero"`

	// pki chooses who issues the tenant's cluster CA, which signs the apiserver's serving
	// certificate and every client certificate of the tenant. Unset: the operator's built-in
	// PKI. Fixed at creation.
	// +optional
	PKI *PKISpec `json:"pki,omitempty"`

	// snapshots takes VirtualClusterSnapshots of the tenant on a schedule.
	// +optional
	Snapshots *SnapshotSchedule `json:"snapshots,omitempty"`

	// restore starts the tenant from a VirtualClusterSnapshot instead of empty. Fixed at
	// creation.
	// +optional
	Restore *RestoreSpec `json:"restore,omitempty"`

	// sleep puts the tenant to sleep, or wakes it.
	// +optional
	Sleep SleepSpec `json:"sleep,omitzero"`
}

// SleepSpec says whether the tenant sleeps. Asleep, no process of the tenant runs in the host:
// its etcd and control-plane pods are gone, the shared node's pods of the tenant are removed,
// and its data stays on etcd's volumes. Lent nodes stay lent and keep running their pods, their
// kubelets out of touch until the tenant wakes. Awake again, the tenant comes back as it was:
// the shared node makes the host pods of the tenant's pods again.
type SleepSpec struct {
	// asleep: true puts the tenant to sleep; false (or unset) wakes it. The operator sets it
	// to false when a request reaches the sleeping tenant's endpoint, and to true once
	// afterInactivity has passed without a request of a person.
	// +optional
	Asleep bool `json:"asleep,omitempty"`
	// afterInactivity puts the tenant to sleep once this long (at least 1m, such as "30m")
	// has passed without a request of a person: requests of the tenant's own components
	// (users named system:*, ServiceAccounts, nodes, KubeNest's components) do not count.
	// Unset, the tenant sleeps only by hand.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="sleep.afterInactivity must be at least 1m"
	AfterInactivity *metav1.Duration `json:"afterInactivity,omitempty"`
}

// PKISpec makes a cert-manager issuer the source of the tenant's cluster CA.
type PKISpec struct {
	// issuerRef names the cert-manager issuer that signs the tenant's cluster CA. The operator
	// asks for it with a cert-manager Certificate (isCA, private key never rotated) named
	// "<virtualcluster>-ca" in the VirtualCluster's namespace; the CA then signs the tenant's
	// leaves, and cert-manager's renewals of it are followed. The etcd and front-proxy CAs,
	// which no client outside the tenant's pods sees, stay built in.
	// +required
	IssuerRef IssuerReference `json:"issuerRef"`
}

// IssuerReference names a cert-manager issuer.
// +kubebuilder:validation:XValidation:rule="self.group != 'cert-manager.io' || self.kind in ['Issuer', 'ClusterIssuer']",message="issuerRef.kind must be Issuer or ClusterIssuer for group cert-manager.io"
type IssuerReference struct {
	// name of the issuer.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`

	// kind of the issuer: Issuer (in the VirtualCluster's namespace) or ClusterIssuer, or the
	// kind of an external issuer.
	// +optional
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// group of the issuer: cert-manager.io for cert-manager's own issuers.
	// +optional
	// +kubebuilder:default=cert-manager.io
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group,omitempty"`
}

// ControlPlaneSpec configures the control-plane pods.
// +kubebuilder:validation:XValidation:rule="!(has(self.controllerManager) && has(self.controllerManager.extraArgs) && has(self.scheduler) && has(self.scheduler.extraArgs)) || !['allow-metric-labels','allow-metric-labels-manifest','disabled-metrics','emulated-version','feature-gates','log-flush-frequency','log-json-info-buffer-size','log-json-split-stream','log-text-info-buffer-size','log-text-split-stream','logging-format','min-compatibility-version','show-hidden-metrics-for-version','v','vmodule'].exists(k, k in self.controllerManager.extraArgs && k in self.scheduler.extraArgs && self.controllerManager.extraArgs[k] != self.scheduler.extraArgs[k])",messageExpression="'controllerManager.extraArgs and scheduler.extraArgs set --' + ['allow-metric-labels','allow-metric-labels-manifest','disabled-metrics','emulated-version','feature-gates','log-flush-frequency','log-json-info-buffer-size','log-json-split-stream','log-text-info-buffer-size','log-text-split-stream','logging-format','min-compatibility-version','show-hidden-metrics-for-version','v','vmodule'].filter(k, k in self.controllerManager.extraArgs && k in self.scheduler.extraArgs && self.controllerManager.extraArgs[k] != self.scheduler.extraArgs[k])[0] + ' differently: the controller-manager and the scheduler run in one process, which has one'"
type ControlPlaneSpec struct {
	// replicas is the number of control-plane pods. Each runs an apiserver; the
	// controller-manager and scheduler in them elect a leader.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=5
	Replicas *int32 `json:"replicas,omitempty"`

	// exposure says how the tenant's apiserver is reached from outside its pods.
	// +optional
	// +kubebuilder:default={}
	Exposure ExposureSpec `json:"exposure,omitzero"`

	// apiServer tunes the kube-apiserver container.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.extraArgs) || !self.extraArgs.exists(k, k in ['advertise-address','allow-privileged','authorization-mode','bind-address','cert-dir','client-ca-file','enable-bootstrap-token-auth','endpoint-reconciler-type','etcd-cafile','etcd-certfile','etcd-keyfile','etcd-servers','kubelet-client-certificate','kubelet-client-key','proxy-client-cert-file','proxy-client-key-file','requestheader-allowed-names','requestheader-client-ca-file','requestheader-extra-headers-prefix','requestheader-group-headers','requestheader-username-headers','secure-port','service-account-issuer','service-account-key-file','service-account-signing-key-file','service-cluster-ip-range','tls-cert-file','tls-private-key-file','kubenest-node-pod-security','kubenest-kube-proxy-image'])",messageExpression="'extraArgs: flag --' + self.extraArgs.filter(k, k in ['advertise-address','allow-privileged','authorization-mode','bind-address','cert-dir','client-ca-file','enable-bootstrap-token-auth','endpoint-reconciler-type','etcd-cafile','etcd-certfile','etcd-keyfile','etcd-servers','kubelet-client-certificate','kubelet-client-key','proxy-client-cert-file','proxy-client-key-file','requestheader-allowed-names','requestheader-client-ca-file','requestheader-extra-headers-prefix','requestheader-group-headers','requestheader-username-headers','secure-port','service-account-issuer','service-account-key-file','service-account-signing-key-file','service-cluster-ip-range','tls-cert-file','tls-private-key-file','kubenest-node-pod-security','kubenest-kube-proxy-image'])[0] + ' is set by the operator and cannot be overridden'"
	APIServer ComponentSpec `json:"apiServer,omitzero"`

	// controllerManager tunes the kube-controller-manager. It runs in one process with the
	// scheduler (the kube-controllers container, whose resources are the sums of both
	// components'); flags of that process (--v, --vmodule, --feature-gates, the logging and
	// metrics flags) set in either's extraArgs apply to both, and must not differ.
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.extraArgs) || !self.extraArgs.exists(k, k in ['authentication-kubeconfig','authorization-kubeconfig','bind-address','cluster-signing-cert-file','cluster-signing-key-file','cluster-signing-kubelet-client-cert-file','cluster-signing-kubelet-client-key-file','kubeconfig','leader-elect','root-ca-file','secure-port','service-account-private-key-file','tls-cert-file','tls-private-key-file','use-service-account-credentials'])",messageExpression="'extraArgs: flag --' + self.extraArgs.filter(k, k in ['authentication-kubeconfig','authorization-kubeconfig','bind-address','cluster-signing-cert-file','cluster-signing-key-file','cluster-signing-kubelet-client-cert-file','cluster-signing-kubelet-client-key-file','kubeconfig','leader-elect','root-ca-file','secure-port','service-account-private-key-file','tls-cert-file','tls-private-key-file','use-service-account-credentials'])[0] + ' is set by the operator and cannot be overridden'"
	ControllerManager ComponentSpec `json:"controllerManager,omitzero"`

	// scheduler tunes the kube-scheduler, which runs with the controller-manager (see
	// controllerManager).
	// +optional
	// +kubebuilder:validation:XValidation:rule="!has(self.extraArgs) || !self.extraArgs.exists(k, k in ['authentication-kubeconfig','authorization-kubeconfig','bind-address','kubeconfig','leader-elect','secure-port','tls-cert-file','tls-private-key-file'])",messageExpression="'extraArgs: flag --' + self.extraArgs.filter(k, k in ['authentication-kubeconfig','authorization-kubeconfig','bind-address','kubeconfig','leader-elect','secure-port','tls-cert-file','tls-private-key-file'])[0] + ' is set by the operator and cannot be overridden'"
	Scheduler ComponentSpec `json:"scheduler,omitzero"`
}

// ComponentSpec tunes one control-plane component.
type ComponentSpec struct {
	// resources of the component. Unset requests get small defaults sized for an idle tenant.
	// The controller-manager and the scheduler share a container: it gets the sums of their
	// requests, and a limit when either sets one (that limit plus the other's limit or,
	// without one, its request).
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitzero"`

	// extraArgs are extra command-line flags for the component, without the leading "--",
	// for example {"v": "2"}. Flags the operator sets itself cannot be overridden.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.size() <= 64 && k.matches('^[a-z0-9][a-z0-9-]*$'))",message="extraArgs keys must be flag names without leading dashes (lowercase letters, digits and '-', at most 64 characters), for example audit-log-maxage"
	// +kubebuilder:validation:XValidation:rule="self.all(k, self[k].size() <= 1024)",message="extraArgs values must be at most 1024 characters"
	ExtraArgs map[string]string `json:"extraArgs,omitempty"`
}

// ExposureType says how the tenant's apiserver Service is published.
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
type ExposureType string

const (
	// ExposureClusterIP reaches the apiserver only from inside the host cluster.
	ExposureClusterIP ExposureType = "ClusterIP"
	// ExposureNodePort reaches the apiserver on a port of every host node.
	ExposureNodePort ExposureType = "NodePort"
	// ExposureLoadBalancer reaches the apiserver through the host's load balancer.
	ExposureLoadBalancer ExposureType = "LoadBalancer"
)

// ExposureSpec says how the tenant's apiserver is reached.
// +kubebuilder:validation:XValidation:rule="!has(self.nodePort) || self.type != 'ClusterIP'",message="nodePort can only be set when type is NodePort or LoadBalancer"
type ExposureSpec struct {
	// type of the apiserver Service.
	// +optional
	// +kubebuilder:default=ClusterIP
	Type ExposureType `json:"type,omitempty"`

	// nodePort fixes the node port of a NodePort or LoadBalancer Service; unset lets the host
	// pick one.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	NodePort *int32 `json:"nodePort,omitempty"`

	// extraSANs are additional DNS names or IP addresses the apiserver's serving certificate is
	// valid for, for example a DNS name in front of the load balancer. A DNS name may start
	// with "*." for a wildcard.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.all(s, isIP(s) || s.matches('^(\\\\*\\\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'))",messageExpression="'extraSANs: ' + self.filter(s, !(isIP(s) || s.matches('^(\\\\*\\\\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')))[0] + ' is neither an IP address nor a lowercase DNS name'"
	ExtraSANs []string `json:"extraSANs,omitempty"`
}

// EtcdSpec configures the tenant's etcd.
// +kubebuilder:validation:XValidation:rule="!has(self.storage) || !has(self.storage.ephemeral) || self.replicas == 1",message="etcd.storage.ephemeral needs etcd.replicas 1: a member of three that lost its data cannot rejoin"
type EtcdSpec struct {
	// replicas of etcd: 1, or 3 for a quorum that survives the loss of one member.
	// Fixed at creation.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Enum=1;3
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="etcd.replicas is immutable: etcd membership is fixed at creation"
	Replicas int32 `json:"replicas,omitempty"`

	// storage of each etcd member: a PersistentVolumeClaim (the default, 1Gi of the default
	// StorageClass) or ephemeral storage that is lost when the pod is deleted. Fixed at creation.
	// +optional
	// +kubebuilder:default={persistentVolumeClaim: {size: "1Gi"}}
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="etcd.storage is immutable: moving etcd data between volumes is not supported"
	Storage EtcdStorage `json:"storage,omitzero"`

	// resources of each etcd container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitzero"`
}

// EtcdStorage is exactly one kind of storage for etcd data.
// +kubebuilder:validation:XValidation:rule="has(self.persistentVolumeClaim) != has(self.ephemeral)",message="storage must set exactly one of persistentVolumeClaim or ephemeral"
type EtcdStorage struct {
	// persistentVolumeClaim keeps etcd data on a volume claimed for each member.
	// +optional
	PersistentVolumeClaim *PersistentVolumeClaimStorage `json:"persistentVolumeClaim,omitempty"`

	// ephemeral keeps etcd data in an emptyDir: it survives container restarts but not the
	// deletion of the etcd pod. For tests and short-lived tenants.
	// +optional
	Ephemeral *EphemeralStorage `json:"ephemeral,omitempty"`
}

// PersistentVolumeClaimStorage is a volume claim per etcd member.
type PersistentVolumeClaimStorage struct {
	// size of each member's volume.
	// +required
	Size resource.Quantity `json:"size"`

	// storageClassName of the claims; unset uses the host's default StorageClass.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// EphemeralStorage is an emptyDir per etcd member.
type EphemeralStorage struct {
	// sizeLimit of the emptyDir.
	// +optional
	SizeLimit *resource.Quantity `json:"sizeLimit,omitempty"`
}

// NodesSpec says where the tenant's pods run.
type NodesSpec struct {
	// promotions ask for host nodes to be lent to the tenant, where they become the tenant's
	// own nodes.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	Promotions []NodePromotion `json:"promotions,omitempty"`

	// shared gives the tenant a virtual node backed by the host's shared nodes: pods the tenant
	// schedules there run as pods in the VirtualCluster's host namespace.
	// +optional
	Shared bool `json:"shared,omitempty"`

	// sharedPlacement says which of the tenant's pods its scheduler may put on the shared node.
	// Overflow (the default): every pod the shared node runs, after the tenant's lent nodes (a
	// lent node scores first; the shared node takes what they do not). OptIn: only the pods that
	// tolerate the shared node's taint, kubenest.io/shared-node:NoSchedule, which the node then
	// carries; the others stay on the tenant's lent nodes, as on a cluster whose special nodes
	// are tainted. For a tenant that keeps its workloads on its own nodes and sends to the host's
	// shared capacity only what asks for it, and for tools that pick any untainted node for a
	// pod the shared node never runs (Kubernetes' conformance suite does: CONFORMANCE.md). A
	// tenant whose only node is the shared node runs, with OptIn, only the pods that tolerate it.
	// +optional
	SharedPlacement SharedPlacement `json:"sharedPlacement,omitempty"`

	// podSecurity is the Pod Security level every pod of the tenant must meet to be bound to a
	// node, enforced by the tenant's own apiserver whatever the tenant's namespaces say.
	// Baseline (the default) allows no privileged containers, host namespaces, host paths or
	// host ports: the tenant's admin does not become root on the host nodes lent to it.
	// Privileged is for tenants the platform trusts with root on their lent nodes: setting it
	// takes the verb "grant-privileged" on virtualclusters (kubenest.io) in the host, and a
	// node lent to such a tenant is quarantined when it comes back (its PoolNode's phase is
	// Quarantined and its kubelet stays stopped) until the platform marks it clean. The shared
	// node runs no privileged pod either way.
	// +optional
	PodSecurity NodePodSecurity `json:"podSecurity,omitempty"`

	// sharedQuota is, for each resource it names, the most the tenant's pods on the shared node
	// may request together (pods: how many there may be), in place of the platform's share of
	// that resource for every tenant (the operator's --shared-node-quota, chart value
	// operator.sharedNodeQuota). The shared node's allocatable resources are the host's within
	// it; a pod bound there that does not fit fails with reason OutOf<resource>. Setting or
	// changing it takes the verb "grant-shared-quota" on virtualclusters (kubenest.io) in the
	// host: a tenant's users do not give themselves more of the host.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['cpu', 'memory', 'ephemeral-storage', 'pods'] || k.startsWith('hugepages-') || (k.contains('/') && !k.startsWith('kubernetes.io/') && !k.startsWith('requests.')))",messageExpression="'sharedQuota: ' + self.filter(k, !(k in ['cpu', 'memory', 'ephemeral-storage', 'pods'] || k.startsWith('hugepages-') || (k.contains('/') && !k.startsWith('kubernetes.io/') && !k.startsWith('requests.'))))[0] + ' is not a resource pods request (cpu, memory, ephemeral-storage, hugepages-<size>, an extended resource such as example.com/gpu) nor pods'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !quantity(string(self[k])).isLessThan(quantity('0')))",message="sharedQuota: quantities must not be negative"
	SharedQuota corev1.ResourceList `json:"sharedQuota,omitempty"`
}

// SharedPlacement says which pods the shared node takes.
// +kubebuilder:validation:Enum=Overflow;OptIn
type SharedPlacement string

const (
	// SharedPlacementOverflow: every pod the shared node runs, after the lent nodes.
	SharedPlacementOverflow SharedPlacement = "Overflow"
	// SharedPlacementOptIn: only the pods that tolerate the shared node's taint.
	SharedPlacementOptIn SharedPlacement = "OptIn"
)

// SharedOptIn says whether only the pods that tolerate the shared node's taint may run there.
func (n NodesSpec) SharedOptIn() bool { return n.SharedPlacement == SharedPlacementOptIn }

// NodePodSecurity is a Pod Security level for the pods on a tenant's nodes.
// +kubebuilder:validation:Enum=Baseline;Privileged
type NodePodSecurity string

const (
	// NodePodSecurityBaseline is Pod Security's baseline level: no host access.
	NodePodSecurityBaseline NodePodSecurity = "Baseline"
	// NodePodSecurityPrivileged checks nothing: the tenant may be root on its lent nodes.
	NodePodSecurityPrivileged NodePodSecurity = "Privileged"
)

// Privileged says whether the platform granted the tenant privileged pods on its nodes.
func (n NodesSpec) Privileged() bool { return n.PodSecurity == NodePodSecurityPrivileged }

// NodePromotion asks for a number of host nodes that match a selector.
type NodePromotion struct {
	// name identifies this request within the list.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// count of nodes to lend.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Count int32 `json:"count"`

	// selector picks which lendable host nodes may be used; empty matches all of them.
	// +optional
	Selector metav1.LabelSelector `json:"selector,omitzero"`
}

// Annotations on a VirtualCluster that ask the operator for something once.
const (
	// AnnotationRotateCertificates: when its value differs from
	// status.certificates.rotationRequest, every leaf certificate and kubeconfig is issued
	// anew and the components are rolled, as if all were due. Any value, e.g. a timestamp.
	AnnotationRotateCertificates = "kubenest.io/rotate-certificates"
	// AnnotationCARotation drives a rotation of the cluster CA, one step per value, in order:
	//   start   a new CA is made and trusted everywhere next to the old one; the old one
	//           still signs. Fetch the kubeconfig again and hand it to every client.
	//   switch  the new CA signs every certificate; the old one is still trusted.
	//   finish  the old CA is no longer trusted. Clients with certificates or kubeconfigs
	//           from before "start" stop working.
	// status.certificates.caRotation says which step is done.
	AnnotationCARotation = "kubenest.io/ca-rotation"
	// AnnotationTestLeafValidity sets the validity of this tenant's leaf certificates, e.g.
	// "2m". For testing rotation: the operator honours it only with --allow-test-annotations.
	AnnotationTestLeafValidity = "kubenest.io/test-leaf-certificate-validity"
)

// VirtualClusterPhase summarises the conditions for people and printer columns.
// +kubebuilder:validation:Enum=Pending;Provisioning;Ready;Degraded;Failed;Deleting;Sleeping
type VirtualClusterPhase string

const (
	// PhasePending: the operator has not acted on the VirtualCluster yet.
	PhasePending VirtualClusterPhase = "Pending"
	// PhaseProvisioning: the control plane is being brought up.
	PhaseProvisioning VirtualClusterPhase = "Provisioning"
	// PhaseReady: the tenant's apiserver answers and its kubeconfig works.
	PhaseReady VirtualClusterPhase = "Ready"
	// PhaseDegraded: the tenant was Ready before and is not now.
	PhaseDegraded VirtualClusterPhase = "Degraded"
	// PhaseFailed: the spec cannot be carried out until it is changed.
	PhaseFailed VirtualClusterPhase = "Failed"
	// PhaseDeleting: the tenant is being torn down.
	PhaseDeleting VirtualClusterPhase = "Deleting"
	// PhaseSleeping: the tenant is asleep, or falling asleep (spec.sleep.asleep).
	PhaseSleeping VirtualClusterPhase = "Sleeping"
)

// Condition types of a VirtualCluster.
const (
	// ConditionCertificatesReady: the CA and every leaf certificate exist and are valid.
	ConditionCertificatesReady = "CertificatesReady"
	// ConditionEtcdReady: every etcd member is ready.
	ConditionEtcdReady = "EtcdReady"
	// ConditionAPIServerReady: the operator reached the tenant's /readyz with admin credentials.
	ConditionAPIServerReady = "APIServerReady"
	// ConditionKubeconfigReady: the admin kubeconfig Secret is written for the current endpoint.
	ConditionKubeconfigReady = "KubeconfigReady"
	// ConditionReady: all of the above.
	ConditionReady = "Ready"
	// ConditionSharedNodeReady, with spec.nodes.shared: the virtual node runs. It does not
	// take part in Ready, which is about the control plane.
	ConditionSharedNodeReady = "SharedNodeReady"
	// ConditionNodesReady, with spec.nodes.promotions: every requested host node is lent to
	// the tenant and Ready there; when not, the message says which are missing and why (not
	// enough free nodes, draining, joining).
	ConditionNodesReady = "NodesReady"
	// ConditionAsleep, with spec.sleep.asleep: True once no process of the tenant runs in the
	// host (since its lastTransitionTime); False while its pods are still stopping.
	ConditionAsleep = "Asleep"
)

// VirtualClusterStatus is what the operator observed.
type VirtualClusterStatus struct {
	// observedGeneration is the spec generation the operator last acted on completely.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// phase summarises the conditions.
	// +optional
	Phase VirtualClusterPhase `json:"phase,omitempty"`

	// conditions: CertificatesReady, EtcdReady, APIServerReady, KubeconfigReady and Ready.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// endpoint is the URL of the tenant's apiserver as published by the exposure type.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`

	// controlPlaneNamespace is the host namespace of the tenant's control plane: its etcd,
	// apiserver, controllers, their certificates and keys, volumes and snapshots. It is
	// KubeNest's own (kubenest-cp-<namespace>), so that nobody with rights in the
	// VirtualCluster's namespace can read the tenant's keys, run commands in its
	// control-plane pods or write its data. A VirtualCluster an earlier release made keeps
	// its control plane in its own namespace, and this says so.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	ControlPlaneNamespace string `json:"controlPlaneNamespace,omitempty"`

	// kubeconfigSecretRef names the Secret, in the VirtualCluster's namespace, holding the
	// tenant's admin kubeconfig.
	// +optional
	KubeconfigSecretRef *SecretKeyReference `json:"kubeconfigSecretRef,omitempty"`

	// version is the Kubernetes version the tenant's apiserver reports.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Version string `json:"version,omitempty"`

	// serviceCIDR is the range the tenant's Services get their ClusterIPs from: a slice of the
	// operator's tenant Service range, registered in the host as a ServiceCIDR so that the
	// tenant's Services keep their ClusterIPs in the host's data plane too. Fixed for the
	// tenant's life.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// nodes are the host nodes lent to the tenant, and where each is.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=800
	Nodes []LentNode `json:"nodes,omitempty"`

	// certificates are the tenant's certificates and authorities the operator issued, with
	// when each expires and when the operator renews it.
	// +optional
	Certificates *CertificatesStatus `json:"certificates,omitempty"`
}

// CertificatesStatus says when a tenant's certificates expire and what was last rotated.
type CertificatesStatus struct {
	// items: one per certificate authority and leaf certificate.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Items []CertificateExpiry `json:"items,omitempty"`

	// rotationRequest is the value of the kubenest.io/rotate-certificates annotation the
	// operator last acted on: every leaf certificate was issued anew for it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RotationRequest string `json:"rotationRequest,omitempty"`

	// caRotation is where a rotation of the cluster CA stands (see the
	// kubenest.io/ca-rotation annotation): empty when none is under way, Trusting while old
	// and new CA are trusted and the old one still signs, Switched once the new one signs.
	// +optional
	// +kubebuilder:validation:Enum=Trusting;Switched
	CARotation CARotationPhase `json:"caRotation,omitempty"`
}

// CARotationPhase is a step of a cluster CA rotation.
type CARotationPhase string

const (
	// CARotationTrusting: a new CA exists and is trusted everywhere next to the old one, which
	// still signs. Clients should now fetch the kubeconfig again (it trusts both).
	CARotationTrusting CARotationPhase = "Trusting"
	// CARotationSwitched: the new CA signs every certificate; the old one is still trusted, so
	// clients holding old certificates keep working until the rotation is finished.
	CARotationSwitched CARotationPhase = "Switched"
)

// CertificateExpiry is one certificate's validity.
type CertificateExpiry struct {
	// name of the certificate, e.g. apiserver, admin, ca.
	// +required
	// +kubebuilder:validation:MaxLength=64
	Name string `json:"name"`
	// notAfter is when it expires.
	// +required
	NotAfter metav1.Time `json:"notAfter"`
	// renewAfter is when the operator renews it (two thirds into its life); authorities are
	// never renewed on their own: they are rotated on request.
	// +optional
	RenewAfter *metav1.Time `json:"renewAfter,omitempty"`
}

// LentNode is a host node lent to a tenant.
type LentNode struct {
	// name of the node (and of its PoolNode).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// request is the promotion request it was lent for.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Request string `json:"request"`
	// phase of its PoolNode.
	// +optional
	Phase PoolNodePhase `json:"phase,omitempty"`
}

// SecretKeyReference names a key of a Secret in the same namespace.
type SecretKeyReference struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key within the Secret's data.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// VirtualClusterList is a list of VirtualClusters.
//
// +kubebuilder:object:root=true
type VirtualClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualCluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&VirtualCluster{}, &VirtualClusterList{})
}
