package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelScheduled is on the VirtualClusterSnapshots the operator takes on a VirtualCluster's
// schedule (spec.snapshots), set to the VirtualCluster's name: retention counts and deletes
// only those.
const LabelScheduled = "kubenest.io/scheduled-for"

// FinalizerSnapshot holds a VirtualClusterSnapshot until what the operator made for it in the
// control-plane namespace (its volume claim, job and credentials) is deleted.
const FinalizerSnapshot = "kubenest.io/snapshot"

// VirtualClusterSnapshot is a consistent snapshot of a tenant's etcd: every object of the
// tenant at one revision. The operator takes it once, with etcd's own snapshot API from a
// member's client port, onto a volume claim of its own (named "<snapshot>-snapshot" in the
// same namespace, deleted with the snapshot) or into an S3-compatible bucket (spec.s3; the
// object stays when the snapshot is deleted). A new VirtualCluster is made from it with
// spec.restore.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=vcsnap,categories=kubenest
// +kubebuilder:printcolumn:name="VirtualCluster",type=string,JSONPath=`.spec.virtualClusterName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Stored",type=string,JSONPath=`.status.location`
// +kubebuilder:printcolumn:name="Size",type=string,JSONPath=`.status.size`
// +kubebuilder:printcolumn:name="Revision",type=integer,JSONPath=`.status.revision`,priority=1
// +kubebuilder:printcolumn:name="Taken",type=date,JSONPath=`.status.completionTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 53",message="metadata.name must be at most 53 characters: it names the snapshot's volume claim and job"
type VirtualClusterSnapshot struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec VirtualClusterSnapshotSpec `json:"spec"`

	// +optional
	Status VirtualClusterSnapshotStatus `json:"status,omitempty"`
}

// VirtualClusterSnapshotSpec says which tenant to snapshot, and where to keep it.
// +kubebuilder:validation:XValidation:rule="!has(self.s3) || (!has(self.size) && !has(self.storageClassName))",message="size and storageClassName are of the volume claim, which a snapshot stored in s3 does not have"
// +kubebuilder:validation:XValidation:rule="has(self.s3) == has(oldSelf.s3) && (!has(self.s3) || self.s3 == oldSelf.s3)",message="s3 is fixed at creation"
type VirtualClusterSnapshotSpec struct {
	// virtualClusterName is the VirtualCluster, in the snapshot's namespace, to take.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="virtualClusterName is immutable"
	VirtualClusterName string `json:"virtualClusterName"`

	// size of the volume claim that holds the snapshot. Default: the size of the tenant's etcd
	// volume, which bounds its database.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`

	// storageClassName of the volume claim; unset, the host's default StorageClass.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// s3 stores the snapshot as an object of an S3-compatible bucket instead of on a volume
	// claim. The job that takes it and the etcd pods that restore it reach the endpoint from
	// the namespace, with the credentials of a Secret there; the operator never does.
	// +optional
	S3 *S3Location `json:"s3,omitempty"`
}

// S3Location is an object of an S3-compatible bucket.
type S3Location struct {
	// endpoint is the server's host[:port], without a scheme.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9.-]+(:[0-9]{1,5})?$`
	Endpoint string `json:"endpoint"`

	// bucket that holds the snapshot; it must exist.
	// +required
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	Bucket string `json:"bucket"`

	// key of the object. Default: "<namespace>/<snapshot name>.db".
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Key string `json:"key,omitempty"`

	// region of the bucket, when the server asks for one.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Region string `json:"region,omitempty"`

	// insecure talks plain HTTP to the endpoint instead of HTTPS (a server on the host's own
	// network).
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// credentialsSecretName is a Secret in the snapshot's namespace with the keys
	// accessKeyID and secretAccessKey.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	CredentialsSecretName string `json:"credentialsSecretName"`
}

// SnapshotPhase is where a snapshot is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type SnapshotPhase string

const (
	SnapshotPending   SnapshotPhase = "Pending"
	SnapshotRunning   SnapshotPhase = "Running"
	SnapshotSucceeded SnapshotPhase = "Succeeded"
	SnapshotFailed    SnapshotPhase = "Failed"
)

// ConditionSnapshotComplete on a VirtualClusterSnapshot: True once the snapshot is taken;
// False with a reason while it is not, or when it failed.
const ConditionSnapshotComplete = "Complete"

// VirtualClusterSnapshotStatus is what the operator did.
type VirtualClusterSnapshotStatus struct {
	// +optional
	Phase SnapshotPhase `json:"phase,omitempty"`

	// size of the snapshot file, e.g. "2.1Mi".
	// +optional
	Size string `json:"size,omitempty"`

	// sizeBytes is the size of the snapshot file in bytes.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// revision is the etcd revision the snapshot holds the tenant at.
	// +optional
	Revision int64 `json:"revision,omitempty"`

	// location of the snapshot: "claim <name>" or "s3://<bucket>/<key>".
	// +optional
	Location string `json:"location,omitempty"`

	// sha256 of the snapshot file, checked again before a restore.
	// +optional
	SHA256 string `json:"sha256,omitempty"`

	// version of Kubernetes the tenant ran when it was taken.
	// +optional
	Version string `json:"version,omitempty"`

	// serviceCIDR the tenant had: a restore moves the Services' addresses to the new
	// tenant's range, at the same offsets.
	// +optional
	ServiceCIDR string `json:"serviceCIDR,omitempty"`

	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`

	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VirtualClusterSnapshotList is a list of VirtualClusterSnapshots.
// +kubebuilder:object:root=true
type VirtualClusterSnapshotList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualClusterSnapshot `json:"items"`
}

// SnapshotSchedule takes VirtualClusterSnapshots of a tenant on a schedule and keeps the
// newest few.
type SnapshotSchedule struct {
	// schedule in cron syntax ("0 3 * * *") or a descriptor ("@daily", "@every 6h"), in UTC.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=100
	Schedule string `json:"schedule"`

	// keep is how many scheduled snapshots are kept; older ones are deleted. Snapshots made by
	// hand are never deleted by the schedule.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Keep int32 `json:"keep,omitempty"`
}

// RestoreSpec makes a new VirtualCluster from a snapshot.
type RestoreSpec struct {
	// snapshotName is a Succeeded VirtualClusterSnapshot in this VirtualCluster's namespace.
	// The new tenant starts with every object of the snapshot, served with its own new
	// certificates; its Services keep their offsets in its own Service range.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SnapshotName string `json:"snapshotName"`
}

func init() {
	SchemeBuilder.Register(&VirtualClusterSnapshot{}, &VirtualClusterSnapshotList{})
}
