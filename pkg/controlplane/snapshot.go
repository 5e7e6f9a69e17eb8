package controlplane

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

const (
	// SnapshotDir is where a snapshot's volume is mounted, in the job that takes it and in the
	// etcd pods that restore it.
	SnapshotDir = "/var/lib/kubenest-snapshot"
	// SnapshotFile is the snapshot's file on its volume.
	SnapshotFile = "etcd.db"
	// ContainerRestore is the etcd pods' init container that restores a snapshot.
	ContainerRestore = "restore"
	// snapshotPKIDir holds the etcd client certificate in a snapshot job.
	snapshotPKIDir = "/etc/kubenest/pki"
)

// SnapshotClaimName names the volume claim that holds a snapshot, and the job that takes it.
func SnapshotClaimName(snapshot string) string { return snapshot + "-snapshot" }

// SnapshotCredentialsName names the copy of a snapshot's S3 credentials its job reads.
func SnapshotCredentialsName(snapshot string) string { return snapshot + "-snapshot-s3" }

// RestoreCredentialsName names the copy of the S3 credentials a restoring tenant's etcd
// members read.
func RestoreCredentialsName(vc string) string { return naming.Join(vc, "restore-s3") }

// LabelSnapshotUID marks what was made for a snapshot in a control-plane namespace (its claim,
// job and credentials), where the snapshot, in another namespace, cannot own them.
const LabelSnapshotUID = "kubenest.io/snapshot-uid"

// MadeFor says whether obj was made for snap: owned by it in snap's namespace (an earlier
// release's way), or labelled with its UID in the control-plane namespace, where only the
// operator writes.
func MadeFor(obj metav1.Object, snap *v1alpha1.VirtualClusterSnapshot) bool {
	if obj.GetNamespace() == snap.Namespace {
		return metav1.IsControlledBy(obj, snap)
	}
	return obj.GetNamespace() == naming.ControlPlaneNamespace(snap.Namespace) && obj.GetLabels()[LabelSnapshotUID] == string(snap.UID)
}

// SnapshotCredentials is the copy, in the control-plane namespace, of the two keys of snap's
// S3 credentials Secret (from, the tenant's) that its job reads.
func SnapshotCredentials(vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot, from *corev1.Secret) *corev1.Secret {
	return s3Credentials(metav1.ObjectMeta{Name: SnapshotCredentialsName(snap.Name), Namespace: Namespace(vc), Labels: SnapshotLabels(vc, snap)}, from)
}

// RestoreCredentials is the copy, in vc's control-plane namespace, of the two keys of the S3
// credentials Secret (from, the tenant's) of the snapshot vc is made from, that its etcd
// members read.
func RestoreCredentials(vc *v1alpha1.VirtualCluster, from *corev1.Secret) *corev1.Secret {
	return s3Credentials(objectMeta(vc, RestoreCredentialsName(vc.Name), ""), from)
}

// s3Credentials copies the bucket's two keys of the tenant's S3 credentials Secret. The
// tenant's Secret is theirs to write: it is used as the bucket's credentials and for nothing
// else.
func s3Credentials(meta metav1.ObjectMeta, from *corev1.Secret) *corev1.Secret {
	data := map[string][]byte{}
	for _, k := range []string{s3AccessKeyID, s3SecretAccessKey} {
		if v, ok := from.Data[k]; ok {
			data[k] = v
		}
	}
	return &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: data}
}

const (
	s3AccessKeyID     = "accessKeyID"
	s3SecretAccessKey = "secretAccessKey"
)

// SnapshotS3Key is the key of a snapshot stored in S3: spec.s3.key, or
// "<namespace>/<snapshot>.db".
func SnapshotS3Key(snap *v1alpha1.VirtualClusterSnapshot) string {
	if snap.Spec.S3 != nil && snap.Spec.S3.Key != "" {
		return snap.Spec.S3.Key
	}
	return snap.Namespace + "/" + snap.Name + ".db"
}

// SnapshotLocation says where a snapshot is kept, for its status.
func SnapshotLocation(snap *v1alpha1.VirtualClusterSnapshot) string {
	if snap.Spec.S3 != nil {
		return "s3://" + snap.Spec.S3.Bucket + "/" + SnapshotS3Key(snap)
	}
	return "claim " + SnapshotClaimName(snap.Name)
}

// s3Args are the --s3-* flags of nest-controlplane etcd-snapshot and etcd-restore.
func s3Args(s3 *v1alpha1.S3Location, key string) []string {
	args := []string{"--s3-endpoint=" + s3.Endpoint, "--s3-bucket=" + s3.Bucket, "--s3-key=" + key}
	if s3.Region != "" {
		args = append(args, "--s3-region="+s3.Region)
	}
	if s3.Insecure {
		args = append(args, "--s3-insecure")
	}
	return args
}

// s3Env gives the credentials of the Secret named secret (spec.s3's, or its copy in the
// control-plane namespace) as the environment the commands read them from. optional: a
// restore's init container needs them only once, and a tenant made from a snapshot must not
// fail to start because the Secret went since.
func s3Env(secret string, optional bool) []corev1.EnvVar {
	ref := func(key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key, Optional: ptr.To(optional),
		}}
	}
	return []corev1.EnvVar{{Name: "AWS_ACCESS_KEY_ID", ValueFrom: ref(s3AccessKeyID)}, {Name: "AWS_SECRET_ACCESS_KEY", ValueFrom: ref(s3SecretAccessKey)}}
}

// SnapshotCredentialsSecret names the Secret a snapshot's job reads its S3 credentials from:
// the tenant's own in its namespace (an earlier release's tenants), else the copy.
func SnapshotCredentialsSecret(vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot) string {
	if Namespace(vc) == snap.Namespace {
		return snap.Spec.S3.CredentialsSecretName
	}
	return SnapshotCredentialsName(snap.Name)
}

// SnapshotClaim is the volume claim a snapshot is taken onto: by default as large as the
// tenant's etcd volume, which bounds its database.
func SnapshotClaim(vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot) *corev1.PersistentVolumeClaim {
	size := resource.MustParse("1Gi")
	if pvc := vc.Spec.Etcd.Storage.PersistentVolumeClaim; pvc != nil && !pvc.Size.IsZero() {
		size = pvc.Size
	}
	if snap.Spec.Size != nil {
		size = *snap.Spec.Size
	}
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   typeMeta("v1", "PersistentVolumeClaim"),
		ObjectMeta: metav1.ObjectMeta{Name: SnapshotClaimName(snap.Name), Namespace: Namespace(vc), Labels: SnapshotLabels(vc, snap)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: snap.Spec.StorageClassName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// ComponentSnapshot is the component label of what is made for a snapshot: its claim, job and
// credentials, which are the snapshot's and outlive the VirtualCluster it was taken of.
const ComponentSnapshot = "snapshot"

// SnapshotLabels label what is made for snap, a snapshot of vc.
func SnapshotLabels(vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot) map[string]string {
	l := memberLabels(vc, ComponentSnapshot)
	if Namespace(vc) != snap.Namespace {
		l[LabelSnapshotUID] = string(snap.UID)
	}
	return l
}

// TenantObjects selects the host objects of VirtualCluster vc that go with it: all that carry
// its name, but what was made for its snapshots, which are theirs and outlive it.
func TenantObjects(vc string) labels.Selector {
	notSnapshots, err := labels.NewRequirement(naming.LabelComponent, selection.NotEquals, []string{ComponentSnapshot})
	utilruntime.Must(err) // a constant's requirement
	return labels.SelectorFromSet(labels.Set{naming.LabelVirtualCluster: vc}).Add(*notSnapshots)
}

// SnapshotJob takes the snapshot: nest-controlplane etcd-snapshot, from the etcd client
// Service with the apiserver's etcd client certificate (only that certificate, the etcd CA's
// certificate and its key are mounted), onto the snapshot's claim. It tries once more when it
// fails, and gives up after ten minutes.
func SnapshotJob(vc *v1alpha1.VirtualCluster, snap *v1alpha1.VirtualClusterSnapshot, s Settings) *batchv1.Job {
	names := naming.For(vc.Name)
	pki := func(f string) string { return snapshotPKIDir + "/" + f }
	certs := corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: names.ControlPlaneCertsSecret(), DefaultMode: ptr.To[int32](0o440),
		Items: []corev1.KeyToPath{
			{Key: KeyEtcdCACert, Path: KeyEtcdCACert},
			{Key: LeafAPIServerEtcdClient.CertFile(), Path: LeafAPIServerEtcdClient.CertFile()},
			{Key: LeafAPIServerEtcdClient.KeyFile(), Path: LeafAPIServerEtcdClient.KeyFile()},
		},
	}}}
	container := corev1.Container{
		Name:            "snapshot",
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Command: []string{BinaryPath, "etcd-snapshot",
			fmt.Sprintf("--endpoint=https://%s.%s.svc:%d", names.EtcdClientService(), Namespace(vc), EtcdClientPort),
			"--cacert=" + pki(KeyEtcdCACert),
			"--cert=" + pki(LeafAPIServerEtcdClient.CertFile()),
			"--key=" + pki(LeafAPIServerEtcdClient.KeyFile()),
			"--out=" + SnapshotDir + "/" + SnapshotFile,
		},
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi"),
		}},
		SecurityContext:          containerSecurityContext(),
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "snapshot", MountPath: SnapshotDir},
			{Name: "certs", MountPath: snapshotPKIDir, ReadOnly: true},
		},
	}
	storage := corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: SnapshotClaimName(snap.Name)}}
	if s3 := snap.Spec.S3; s3 != nil {
		// Written to scratch space, then uploaded.
		storage = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
		container.Command = append(container.Command, s3Args(s3, SnapshotS3Key(snap))...)
		container.Env = s3Env(SnapshotCredentialsSecret(vc, snap), false)
	}
	labels := SnapshotLabels(vc, snap)
	return &batchv1.Job{
		TypeMeta:   typeMeta("batch/v1", "Job"),
		ObjectMeta: metav1.ObjectMeta{Name: SnapshotClaimName(snap.Name), Namespace: Namespace(vc), Labels: labels},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](1),
			ActiveDeadlineSeconds: ptr.To[int64](600),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					// Where the tenant's etcd may run: a restore's members mount this claim,
					// which the node it was written on holds.
					Affinity:                     awayFromLendableNodes(s),
					AutomountServiceAccountToken: ptr.To(false),
					EnableServiceLinks:           ptr.To(false),
					SecurityContext:              podSecurityContext(),
					Containers:                   []corev1.Container{container},
					Volumes:                      []corev1.Volume{certs, {Name: "snapshot", VolumeSource: storage}},
				},
			},
		},
	}
}

// Restore is a snapshot a new tenant's etcd members start from.
type Restore struct {
	Snapshot    *v1alpha1.VirtualClusterSnapshot
	SHA256      string
	ServiceCIDR string // the Service range of the tenant the snapshot was taken of
	// Credentials names the Secret, in the tenant's control-plane namespace, with the
	// bucket's keys of a snapshot in S3.
	Credentials string
}

// WithRestore has a new tenant's etcd members start from a snapshot: an init container
// (nest-controlplane etcd-restore) restores it into a member's data directory while that
// directory does not exist, with the same member flags the etcd container has, and moves the
// Services to the tenant's own Service range.
func WithRestore(sts *appsv1.StatefulSet, vc *v1alpha1.VirtualCluster, r Restore, s Settings) {
	spec := &sts.Spec.Template.Spec
	etcd := spec.Containers[0]
	member := map[string]string{}
	for _, a := range etcd.Args {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		member[k] = v
	}
	args := []string{BinaryPath, "etcd-restore",
		"--sha256=" + r.SHA256,
		"--from-service-cidr=" + r.ServiceCIDR,
		"--to-service-cidr=" + vc.Status.ServiceCIDR,
	}
	mounts := []corev1.VolumeMount{{Name: "data", MountPath: EtcdDataDir}}
	env := etcd.Env
	if s3 := r.Snapshot.Spec.S3; s3 != nil {
		args = append(args, s3Args(s3, SnapshotS3Key(r.Snapshot))...)
		env = append(slices.Clone(env), s3Env(r.Credentials, true)...)
	} else {
		args = append(args, "--snapshot="+SnapshotDir+"/"+SnapshotFile)
		mounts = append(mounts, corev1.VolumeMount{Name: "snapshot", MountPath: SnapshotDir, ReadOnly: true})
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "snapshot", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: SnapshotClaimName(r.Snapshot.Name), ReadOnly: true},
		}})
	}
	for _, k := range []string{"data-dir", "name", "initial-cluster", "initial-cluster-token", "initial-advertise-peer-urls"} {
		args = append(args, "--"+k+"="+member[k])
	}
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            ContainerRestore,
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Command:         args,
		Env:             env,
		Resources:       etcd.Resources,
		SecurityContext: containerSecurityContext(),
		VolumeMounts:    mounts,
	})
}
