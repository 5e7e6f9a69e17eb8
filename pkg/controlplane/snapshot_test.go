package controlplane_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

func snapshotOf(vc *v1alpha1.VirtualCluster, s3 *v1alpha1.S3Location) *v1alpha1.VirtualClusterSnapshot {
	return &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "snap", Namespace: vc.Namespace, UID: "snap-uid"},
		Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: vc.Name, S3: s3}}
}

// TestSnapshotObjectsWhere: a new tenant's snapshot claim and job are made in its
// control-plane namespace (where its etcd client certificate is), labelled with the
// snapshot's UID and the tenant's namespace, since the snapshot cannot own them there; an
// earlier release's tenant's next to the snapshot, whose owner reference the snapshot
// controller sets.
func TestSnapshotObjectsWhere(t *testing.T) {
	s := controlplane.DefaultSettings()
	for _, tt := range []struct {
		name       string
		vc         *v1alpha1.VirtualCluster
		wantNS     string
		wantLabels map[string]string
		endpoint   string
	}{
		{"new", newVC(), cpNS, map[string]string{
			naming.LabelVirtualCluster: vcName, naming.LabelVirtualClusterNamespace: vcNS, controlplane.LabelSnapshotUID: "snap-uid",
		}, "--endpoint=https://tenant-etcd.kubenest-cp-tenants.svc:2379"},
		{"an earlier release's", newVC(legacy), vcNS, map[string]string{naming.LabelVirtualCluster: vcName}, "--endpoint=https://tenant-etcd.tenants.svc:2379"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshotOf(tt.vc, nil)
			claim, job := controlplane.SnapshotClaim(tt.vc, snap), controlplane.SnapshotJob(tt.vc, snap, s)
			for _, obj := range []metav1.Object{claim, job} {
				if obj.GetNamespace() != tt.wantNS || obj.GetName() != "snap-snapshot" {
					t.Errorf("%s/%s, want %s/snap-snapshot", obj.GetNamespace(), obj.GetName(), tt.wantNS)
				}
				for k, v := range tt.wantLabels {
					if got, ok := obj.GetLabels()[k]; !ok || got != v {
						t.Errorf("%s: label %s = %q, want %q (labels %v)", obj.GetName(), k, got, v, obj.GetLabels())
					}
				}
				if _, ok := tt.wantLabels[controlplane.LabelSnapshotUID]; !ok {
					if _, ok := obj.GetLabels()[controlplane.LabelSnapshotUID]; ok {
						t.Errorf("%s: labelled %s next to the snapshot, which owns it", obj.GetName(), controlplane.LabelSnapshotUID)
					}
				}
				if len(obj.GetOwnerReferences()) != 0 {
					t.Errorf("%s: owner references %v, set by the snapshot controller or never", obj.GetName(), obj.GetOwnerReferences())
				}
				if tt.wantNS == cpNS && !controlplane.MadeFor(obj, snap) {
					t.Errorf("%s: MadeFor the snapshot it was made for = false", obj.GetName())
				}
			}
			if c := job.Spec.Template.Spec.Containers[0]; !slices.Contains(c.Command, tt.endpoint) {
				t.Errorf("command %v lacks %s: the etcd of the tenant's namespace", c.Command, tt.endpoint)
			}
		})
	}
}

func TestMadeFor(t *testing.T) {
	snap := snapshotOf(newVC(), nil)
	owned := func(ns string) *corev1.PersistentVolumeClaim {
		c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "snap-snapshot", Namespace: ns}}
		c.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(snap, v1alpha1.GroupVersion.WithKind("VirtualClusterSnapshot"))}
		return c
	}
	labelled := func(ns, uid string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "snap-snapshot", Namespace: ns,
			Labels: map[string]string{controlplane.LabelSnapshotUID: uid, naming.LabelVirtualClusterNamespace: vcNS}}}
	}
	otherOwner := owned(vcNS)
	otherOwner.OwnerReferences[0].UID = "another-snapshot"
	for _, tt := range []struct {
		name string
		obj  metav1.Object
		want bool
	}{
		{"owned in the snapshot's namespace (an earlier release's)", owned(vcNS), true},
		{"labelled with its UID in the control-plane namespace", labelled(cpNS, "snap-uid"), true},
		{"labelled with its UID in another namespace", labelled("kube-system", "snap-uid"), false},
		{"labelled with its UID in the snapshot's namespace, where the tenant writes", labelled(vcNS, "snap-uid"), false},
		{"labelled with its UID in another namespace's control-plane namespace", labelled("kubenest-cp-others", "snap-uid"), false},
		{"labelled with another UID in the control-plane namespace", labelled(cpNS, "another-snapshot"), false},
		{"unlabelled in the control-plane namespace", &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "snap-snapshot", Namespace: cpNS}}, false},
		{"owned by another snapshot in the snapshot's namespace", otherOwner, false},
		{"owned, but in the control-plane namespace", owned(cpNS), false},
		{"not owned in the snapshot's namespace", &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "snap-snapshot", Namespace: vcNS}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := controlplane.MadeFor(tt.obj, snap); got != tt.want {
				t.Errorf("MadeFor(%s/%s, labels %v, owners %v) = %v, want %v", tt.obj.GetNamespace(), tt.obj.GetName(),
					tt.obj.GetLabels(), tt.obj.GetOwnerReferences(), got, tt.want)
			}
		})
	}
}

// TestS3Credentials: the copies in the control-plane namespace (a snapshot job's, a restore's)
// hold the bucket's two keys and nothing else of the tenant's Secret.
func TestS3Credentials(t *testing.T) {
	from := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: vcNS, Labels: map[string]string{"tenant": "label"},
		Annotations: map[string]string{"tenant": "annotation"}, OwnerReferences: []metav1.OwnerReference{{Name: "x", UID: "y"}}},
		Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{"accessKeyID": []byte("id"), "secretAccessKey": []byte("secret"), "other": []byte("more")}}
	vc := newVC()
	snap := snapshotOf(vc, nil)
	vcLabels := map[string]string{naming.LabelVirtualCluster: vcName, naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: vcNS}
	for _, tt := range []struct {
		copy   *corev1.Secret
		name   string
		labels map[string]string
	}{
		{controlplane.SnapshotCredentials(vc, snap, from), "snap-snapshot-s3", map[string]string{naming.LabelVirtualCluster: vcName, naming.LabelManagedBy: naming.ManagedByValue,
			naming.LabelVirtualClusterNamespace: vcNS, naming.LabelComponent: controlplane.ComponentSnapshot, controlplane.LabelSnapshotUID: "snap-uid"}},
		{controlplane.RestoreCredentials(vc, from), "tenant-restore-s3", vcLabels},
	} {
		c := tt.copy
		if c.Namespace != cpNS || c.Name != tt.name || c.Type != corev1.SecretTypeOpaque || len(c.OwnerReferences) != 0 ||
			len(c.Annotations) != 0 || !maps.Equal(c.Labels, tt.labels) || c.Kind != "Secret" {
			t.Errorf("copy %+v", c.ObjectMeta)
		}
		if len(c.Data) != 2 || string(c.Data["accessKeyID"]) != "id" || string(c.Data["secretAccessKey"]) != "secret" {
			t.Errorf("copy %s's data %q, want the two keys only", c.Name, c.Data)
		}
	}
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
	// The copy in the control-plane namespace, not the tenant's Secret in its own.
	if len(c.Env) != 2 || c.Env[0].ValueFrom.SecretKeyRef.Name != "snap-snapshot-s3" || *c.Env[0].ValueFrom.SecretKeyRef.Optional {
		t.Errorf("credentials %+v", c.Env)
	}
	if got := controlplane.SnapshotCredentialsSecret(vc, snapshotOf(vc, s3)); got != "snap-snapshot-s3" {
		t.Errorf("SnapshotCredentialsSecret = %q, want the copy", got)
	}
	// An earlier release's tenant's job runs next to the tenant's Secret.
	old := newVC(legacy)
	c = controlplane.SnapshotJob(old, snapshotOf(old, s3), s).Spec.Template.Spec.Containers[0]
	if len(c.Env) != 2 || c.Env[0].ValueFrom.SecretKeyRef.Name != "creds" {
		t.Errorf("an earlier release's tenant: credentials %+v", c.Env)
	}
	if got := controlplane.SnapshotCredentialsSecret(old, snapshotOf(old, s3)); got != "creds" {
		t.Errorf("SnapshotCredentialsSecret of an earlier release's tenant = %q, want the tenant's", got)
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
		controlplane.WithRestore(sts, vc, controlplane.Restore{Snapshot: snapshotOf(vc, s3), SHA256: "abc", ServiceCIDR: "10.254.1.0/24",
			Credentials: "tenant-restore-s3"}, s)
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
				return e.Name == "AWS_ACCESS_KEY_ID" && *e.ValueFrom.SecretKeyRef.Optional && e.ValueFrom.SecretKeyRef.Name == "tenant-restore-s3"
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
