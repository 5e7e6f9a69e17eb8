package controlplane_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

func snapshotOf(vc *v1alpha1.VirtualCluster, s3 *v1alpha1.S3Location) *v1alpha1.VirtualClusterSnapshot {
	return &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: vc.Namespace},
		Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: vc.Name, S3: s3}}
}

func TestSnapshotJob(t *testing.T) {
	vc := newVC()
	s := controlplane.DefaultSettings()
	job := controlplane.SnapshotJob(vc, snapshotOf(vc, nil), s)
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	if !slices.Contains(c.Command, "etcd-snapshot") || !slices.Contains(c.Command, "--out=/var/lib/kubenest-snapshot/etcd.db") {
		t.Errorf("command %v", c.Command)
	}
	var certs, snapshot *corev1.Volume
	for i := range pod.Volumes {
		switch pod.Volumes[i].Name {
		case "certs":
			certs = &pod.Volumes[i]
		case "snapshot":
			snapshot = &pod.Volumes[i]
		}
	}
	// Only the etcd client certificate and the etcd CA's certificate, never a CA key.
	if certs == nil || len(certs.Secret.Items) != 3 {
		t.Fatalf("certs volume %+v", certs)
	}
	for _, it := range certs.Secret.Items {
		if it.Key == controlplane.KeyEtcdCAKey || it.Key == controlplane.KeyCAKey {
			t.Errorf("the snapshot job mounts %s", it.Key)
		}
	}
	if snapshot == nil || snapshot.PersistentVolumeClaim == nil || snapshot.PersistentVolumeClaim.ClaimName != "snap-snapshot" {
		t.Errorf("snapshot volume %+v", snapshot)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("the job's pod may get a host token or run as root: %+v", pod)
	}

	s3 := &v1alpha1.S3Location{Endpoint: "s3.example:9000", Bucket: "b", CredentialsSecretName: "creds", Insecure: true}
	job = controlplane.SnapshotJob(vc, snapshotOf(vc, s3), s)
	c = job.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--s3-endpoint=s3.example:9000", "--s3-bucket=b", "--s3-key=" + vc.Namespace + "/snap.db", "--s3-insecure"} {
		if !slices.Contains(c.Command, want) {
			t.Errorf("command %v lacks %s", c.Command, want)
		}
	}
	if len(c.Env) != 2 || c.Env[0].ValueFrom.SecretKeyRef.Name != "creds" || *c.Env[0].ValueFrom.SecretKeyRef.Optional {
		t.Errorf("credentials %+v", c.Env)
	}
	for _, v := range job.Spec.Template.Spec.Volumes {
		if v.Name == "snapshot" && v.EmptyDir == nil {
			t.Errorf("a snapshot stored in S3 is written to %+v, not scratch space", v)
		}
	}
}

func TestWithRestore(t *testing.T) {
	vc := newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.Etcd.Replicas = 3
		vc.Status.ServiceCIDR = "10.254.9.0/24"
	})
	s := controlplane.DefaultSettings()
	for _, s3 := range []*v1alpha1.S3Location{nil, {Endpoint: "s3.example", Bucket: "b", CredentialsSecretName: "creds"}} {
		sts := controlplane.EtcdStatefulSet(vc, s, "")
		controlplane.WithRestore(sts, vc, controlplane.Restore{Snapshot: snapshotOf(vc, s3), SHA256: "abc", ServiceCIDR: "10.254.1.0/24"}, s)
		spec := sts.Spec.Template.Spec
		if len(spec.InitContainers) != 1 {
			t.Fatalf("init containers %v", spec.InitContainers)
		}
		init, etcd := spec.InitContainers[0], spec.Containers[0]
		args := strings.Join(init.Command, " ")
		for _, want := range []string{"etcd-restore", "--sha256=abc", "--from-service-cidr=10.254.1.0/24", "--to-service-cidr=10.254.9.0/24", "--name=$(POD_NAME)"} {
			if !strings.Contains(args, want) {
				t.Errorf("restore command %q lacks %s", args, want)
			}
		}
		// The member restores as the etcd container will run it.
		for _, a := range etcd.Args {
			for _, flag := range []string{"--initial-cluster=", "--initial-cluster-token=", "--data-dir=", "--initial-advertise-peer-urls="} {
				if strings.HasPrefix(a, flag) && !slices.Contains(init.Command, a) {
					t.Errorf("etcd runs with %s, the restore does not", a)
				}
			}
		}
		hasClaim := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil })
		if hasClaim != (s3 == nil) {
			t.Errorf("s3 %v: the pod mounts a snapshot claim: %v", s3, hasClaim)
		}
		if s3 != nil {
			if !strings.Contains(args, "--s3-key="+vc.Namespace+"/snap.db") || !slices.ContainsFunc(init.Env, func(e corev1.EnvVar) bool {
				return e.Name == "AWS_ACCESS_KEY_ID" && *e.ValueFrom.SecretKeyRef.Optional
			}) {
				t.Errorf("restore from S3: %q, env %+v", args, init.Env)
			}
		}
	}
}

// A tenant's etcd, its control plane and its snapshots (whose claim pins them, and the members
// restored from them, to a node) stay off lendable nodes, unless the platform allows it.
func TestAwayFromLendableNodes(t *testing.T) {
	vc := newVC()
	specs := func(s controlplane.Settings) map[string]corev1.PodSpec {
		cp, err := controlplane.ControlPlaneDeployment(vc, s, "")
		if err != nil {
			t.Fatal(err)
		}
		return map[string]corev1.PodSpec{
			"etcd":          controlplane.EtcdStatefulSet(vc, s, "").Spec.Template.Spec,
			"control plane": cp.Spec.Template.Spec,
			"snapshot":      controlplane.SnapshotJob(vc, snapshotOf(vc, nil), s).Spec.Template.Spec,
		}
	}
	notLendable := []corev1.NodeSelectorRequirement{{Key: v1alpha1.LabelLendable, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"true"}}}
	for name, pod := range specs(controlplane.DefaultSettings()) {
		na := pod.Affinity.NodeAffinity
		if na.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
			!equality.Semantic.DeepEqual(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions, notLendable) {
			t.Errorf("%s: node affinity %+v, want required %v", name, na, notLendable)
		}
	}
	allowed := controlplane.DefaultSettings()
	allowed.ControlPlanesOnLendableNodes = true
	for name, pod := range specs(allowed) {
		na := pod.Affinity.NodeAffinity
		if na.RequiredDuringSchedulingIgnoredDuringExecution != nil || len(na.PreferredDuringSchedulingIgnoredDuringExecution) != 1 {
			t.Errorf("%s, allowed on lendable nodes: node affinity %+v, want a preference only", name, na)
		}
	}
}
