//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// localS3 is the local cluster's S3-compatible server ("local s3"), on the node bridge.
const localS3 = "172.30.0.1:9000"

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

const widget = `apiVersion: example.com/v1
kind: Widget
metadata: {name: blue, namespace: default}
spec: {colour: blue}
`

// TestSnapshotRestore snapshots a tenant that holds a CRD and a custom resource, a Secret, a
// Deployment and a Service, and makes a new tenant from the snapshot: it has those objects,
// served with its own new certificates, and its Services at the same offsets of its own
// Service range. Scheduled snapshots keep the newest; a snapshot may go once a tenant was
// made from it; what a snapshot cannot be made or restored from is said in conditions.
func TestSnapshotRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-snapshot")
	src := newVC(ns, "source", v1alpha1.ExposureNodePort)
	if err := host.Create(ctx, src); err != nil {
		t.Fatal(err)
	}
	src = waitReady(t, ctx, src)
	cpNS := controlplane.Namespace(src) // where the snapshots' claims and jobs are made
	srcKC := downloadKubeconfig(t, ctx, src)
	tenant := tenantClient(t, srcKC)
	dir := t.TempDir()
	for name, text := range map[string]string{"crd.yaml": widgetCRD, "widget.yaml": widget} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	kubectl(t, "--kubeconfig", srcKC, "apply", "-f", filepath.Join(dir, "crd.yaml"))
	kubectl(t, "--kubeconfig", srcKC, "wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=60s")
	kubectl(t, "--kubeconfig", srcKC, "apply", "-f", filepath.Join(dir, "widget.yaml"))
	if _, err := tenant.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data: map[string][]byte{"password": []byte("s3cret")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWebDeployment(t, ctx, tenant, 1)
	web := createService(t, ctx, tenant, "web", false)

	snap := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: src.Name}}
	start := time.Now()
	if err := host.Create(ctx, snap); err != nil {
		t.Fatal(err)
	}
	snap = waitSnapshot(t, ctx, snap, v1alpha1.SnapshotSucceeded)
	t.Logf("snapshot taken in %s: %s at revision %d", time.Since(start).Round(100*time.Millisecond), snap.Status.Size, snap.Status.Revision)
	if snap.Status.SizeBytes <= 0 || len(snap.Status.SHA256) != 64 || snap.Status.ServiceCIDR != src.Status.ServiceCIDR {
		t.Errorf("snapshot status %+v", snap.Status)
	}
	if out := kubectl(t, "--kubeconfig", *kubeconfigPath, "-n", ns, "get", "vcsnap", "before"); !strings.Contains(out, "Succeeded") || !strings.Contains(out, snap.Status.Size) {
		t.Errorf("kubectl get vcsnap does not show the phase and size:\n%s", out)
	}
	// Its claim is in the control-plane namespace, with the tenant's data, where the tenant's
	// namespace's users do not reach; marked as made for this snapshot, which holds it with
	// its finalizer.
	claimName := controlplane.SnapshotClaimName(snap.Name)
	snapClaim := &corev1.PersistentVolumeClaim{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: claimName}, snapClaim); err != nil {
		t.Errorf("the snapshot's claim in %s: %v", cpNS, err)
	} else if snapClaim.Labels[controlplane.LabelSnapshotUID] != string(snap.UID) {
		t.Errorf("the snapshot's claim has labels %v, want %s=%s", snapClaim.Labels, controlplane.LabelSnapshotUID, snap.UID)
	}
	if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: claimName}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
		t.Errorf("a snapshot claim %s in the tenant's namespace %s: %v; want none", claimName, ns, err)
	}
	if !slices.Contains(snap.Finalizers, v1alpha1.FinalizerSnapshot) {
		t.Errorf("the snapshot has finalizers %v, want %s", snap.Finalizers, v1alpha1.FinalizerSnapshot)
	}
	// What the tenant does after the snapshot is not in it.
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	copyVC := newVC(ns, "copy", v1alpha1.ExposureNodePort)
	copyVC.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: snap.Name}
	start = time.Now()
	if err := host.Create(ctx, copyVC); err != nil {
		t.Fatal(err)
	}
	copyVC = waitReady(t, ctx, copyVC)
	t.Logf("tenant restored from the snapshot, Ready in %s", time.Since(start).Round(100*time.Millisecond))
	copyKC := downloadKubeconfig(t, ctx, copyVC)
	restored := tenantClient(t, copyKC)

	t.Run("the new tenant has the snapshot's objects", func(t *testing.T) {
		s, err := restored.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{})
		if err != nil || string(s.Data["password"]) != "s3cret" {
			t.Errorf("Secret db: %v %v", err, s)
		}
		if _, err := restored.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the ConfigMap made after the snapshot: %v", err)
		}
		if out := kubectl(t, "--kubeconfig", copyKC, "get", "widgets", "blue", "-o", "jsonpath={.spec.colour}"); out != "blue" {
			t.Errorf("the custom resource: %q", out)
		}
		if _, err := restored.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{}); err != nil {
			t.Errorf("Deployment web: %v", err)
		}
	})

	t.Run("served with its own certificates", func(t *testing.T) {
		a, b := kubeconfigCAs(t, kubeconfigData(t, ctx, src)), kubeconfigCAs(t, kubeconfigData(t, ctx, copyVC))
		if bytes.Equal(a[0].Raw, b[0].Raw) {
			t.Error("the restored tenant's kubeconfig trusts the source tenant's CA")
		}
		if err := kubectlWith(kubeconfigData(t, ctx, src), "--server", copyVC.Status.Endpoint, "get", "ns"); err == nil {
			t.Error("the source tenant's admin credentials work against the restored tenant")
		}
	})

	t.Run("its Services moved to its own range, at the same offsets", func(t *testing.T) {
		from, to := netip.MustParsePrefix(src.Status.ServiceCIDR), netip.MustParsePrefix(copyVC.Status.ServiceCIDR)
		if from == to {
			t.Fatalf("both tenants have Service range %s", from)
		}
		got, err := restored.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := netip.MustParseAddr(got.Spec.ClusterIP)
		if !to.Contains(ip) || ip.As4()[3] != netip.MustParseAddr(web.Spec.ClusterIP).As4()[3] {
			t.Errorf("web at %s in the restored tenant (range %s); it was at %s", ip, to, web.Spec.ClusterIP)
		}
		cidrs, err := restored.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cidrs.Items {
			if len(c.Spec.CIDRs) != 1 || c.Spec.CIDRs[0] != to.String() {
				t.Errorf("ServiceCIDR %s has %v; want only %s", c.Name, c.Spec.CIDRs, to)
			}
		}
	})

	t.Run("spec.restore is fixed at creation", func(t *testing.T) {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"restore":{"snapshotName":"other"}}}`))
		err := host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: copyVC.Name}}, patch)
		if err == nil || !strings.Contains(err.Error(), "restore is fixed at creation") {
			t.Errorf("changing spec.restore: %v", err)
		}
		err = host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Name}}, patch)
		if err == nil || !strings.Contains(err.Error(), "restore is fixed at creation") {
			t.Errorf("restoring over a running tenant: %v", err)
		}
	})

	t.Run("a snapshot that is not there holds a new tenant back, saying so", func(t *testing.T) {
		vc := newVC(ns, "nothing", v1alpha1.ExposureClusterIP)
		vc.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: "missing"}
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		got := waitVC(t, ctx, vc, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionEtcdReady)
			return c != nil && c.Reason == "RestoreWaiting"
		})
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEtcdReady)
		t.Logf("EtcdReady: %s", c.Message)
		if !strings.Contains(c.Message, "spec.restore.snapshotName") || !strings.Contains(c.Message, "missing") {
			t.Errorf("EtcdReady says %q", c.Message)
		}
		deleteAndCheckGone(t, ctx, vc)
	})

	t.Run("a volume claim the operator did not make is never used", func(t *testing.T) {
		// Made by someone who may write the control-plane namespace (nobody of the tenant's
		// namespace may), under the name the snapshot's claim would have there.
		forged := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "forged-snapshot", Namespace: cpNS},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Mi")}}}}
		if err := host.Create(ctx, forged); err != nil {
			t.Fatal(err)
		}
		s := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: src.Name}}
		if err := host.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		s = waitSnapshot(t, ctx, s, v1alpha1.SnapshotFailed)
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionSnapshotComplete); c == nil || c.Reason != "ClaimNotOurs" {
			t.Errorf("Complete condition %+v; want reason ClaimNotOurs", c)
		}
	})

	t.Run("scheduled snapshots: the newest are kept", func(t *testing.T) {
		patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"snapshots":{"schedule":"@every 10s","keep":1}}}`))
		if err := host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Name}}, patch); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		var last []v1alpha1.VirtualClusterSnapshot
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			list := &v1alpha1.VirtualClusterSnapshotList{}
			if err := host.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{v1alpha1.LabelScheduled: src.Name}); err != nil {
				return false, nil
			}
			last = list.Items
			succeeded := 0
			for _, s := range list.Items {
				seen[s.Name] = true
				if s.Status.Phase == v1alpha1.SnapshotSucceeded {
					succeeded++
				}
			}
			return len(seen) >= 2 && len(list.Items) == 1 && succeeded == 1, nil
		})
		if err != nil {
			t.Errorf("scheduled snapshots: seen %d, now %d: %v", len(seen), len(last), err)
		}
		off := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"snapshots":null}}`))
		if err := host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: src.Name}}, off); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a snapshot in an S3-compatible bucket", func(t *testing.T) {
		creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bucket-credentials", Namespace: ns},
			StringData: map[string]string{"accessKeyID": "e2e", "secretAccessKey": "e2e-secret"}}
		if err := host.Create(ctx, creds); err != nil {
			t.Fatal(err)
		}
		s := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "in-bucket", Namespace: ns},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: src.Name, S3: &v1alpha1.S3Location{
				Endpoint: localS3, Bucket: "kubenest-e2e", Insecure: true, CredentialsSecretName: creds.Name}}}
		start := time.Now()
		if err := host.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		s = waitSnapshot(t, ctx, s, v1alpha1.SnapshotSucceeded)
		t.Logf("snapshot stored in %s in %s, %s", s.Status.Location, time.Since(start).Round(100*time.Millisecond), s.Status.Size)
		if want := "s3://kubenest-e2e/" + ns + "/in-bucket.db"; s.Status.Location != want {
			t.Errorf("stored in %q, want %q", s.Status.Location, want)
		}
		for _, claimNS := range []string{cpNS, ns} {
			if err := host.Get(ctx, types.NamespacedName{Namespace: claimNS, Name: "in-bucket-snapshot"}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
				t.Errorf("a snapshot stored in a bucket has a volume claim in %s: %v", claimNS, err)
			}
		}
		vc := newVC(ns, "from-bucket", v1alpha1.ExposureNodePort)
		vc.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: s.Name}
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		vc = waitReady(t, ctx, vc)
		fromBucket := tenantClient(t, downloadKubeconfig(t, ctx, vc))
		if _, err := fromBucket.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{}); err != nil {
			t.Errorf("ConfigMap after, made before this snapshot: %v", err)
		}
		if sec, err := fromBucket.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{}); err != nil || string(sec.Data["password"]) != "s3cret" {
			t.Errorf("Secret db: %v", err)
		}
		deleteAndCheckGone(t, ctx, vc)
	})

	t.Run("a snapshot outlives its tenant, which comes back from it", func(t *testing.T) {
		// The tenant is deleted (by mistake, say); its snapshot on a volume claim stays, with
		// the control-plane namespace that holds it, and a new tenant is made from it.
		brief := newVC(ns, "brief", v1alpha1.ExposureNodePort)
		if err := host.Create(ctx, brief); err != nil {
			t.Fatal(err)
		}
		brief = waitReady(t, ctx, brief)
		if _, err := tenantClient(t, downloadKubeconfig(t, ctx, brief)).CoreV1().ConfigMaps("default").Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		s := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "brief-1", Namespace: ns},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: brief.Name}}
		if err := host.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		waitSnapshot(t, ctx, s, v1alpha1.SnapshotSucceeded)
		deleteAndCheckGone(t, ctx, brief)
		claim := &corev1.PersistentVolumeClaim{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: controlplane.SnapshotClaimName(s.Name)}, claim); err != nil {
			t.Fatalf("the snapshot's claim after its tenant was deleted: %v", err)
		}
		again := newVC(ns, "brief-again", v1alpha1.ExposureNodePort)
		again.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: s.Name}
		if err := host.Create(ctx, again); err != nil {
			t.Fatal(err)
		}
		again = waitReady(t, ctx, again)
		if cm, err := tenantClient(t, downloadKubeconfig(t, ctx, again)).CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{}); err != nil || cm.Data["k"] != "v" {
			t.Errorf("ConfigMap kept of the deleted tenant, in the one made from its snapshot: %v", err)
		}
		deleteAndCheckGone(t, ctx, again)
		if err := host.Delete(ctx, s); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the restored tenant keeps its data when the snapshot goes", func(t *testing.T) {
		if err := host.Delete(ctx, snap); err != nil {
			t.Fatal(err)
		}
		names := naming.For(copyVC.Name)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			sts := &appsv1.StatefulSet{}
			if host.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace(copyVC), Name: names.EtcdStatefulSet()}, sts) != nil {
				return false, nil
			}
			rolled := len(sts.Spec.Template.Spec.InitContainers) == 0 && sts.Status.ObservedGeneration == sts.Generation &&
				sts.Status.UpdateRevision == sts.Status.CurrentRevision && sts.Status.ReadyReplicas == 1
			return rolled && phaseOf(ctx, copyVC) == v1alpha1.PhaseReady, nil
		})
		if err != nil {
			t.Fatalf("the restored tenant's etcd did not settle without the snapshot: %v", err)
		}
		eventually(t, "the restored tenant's Secret after the snapshot went", time.Minute, func() error {
			_, err := restored.CoreV1().Secrets("default").Get(ctx, "db", metav1.GetOptions{})
			return err
		})
		// What was made for it in the control-plane namespace goes with it, and then it goes.
		eventually(t, "the deleted snapshot and its claim gone", 2*time.Minute, func() error {
			if err := host.Get(ctx, client.ObjectKeyFromObject(snap), &v1alpha1.VirtualClusterSnapshot{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("the snapshot: %v", err)
			}
			if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: controlplane.SnapshotClaimName(snap.Name)}, &corev1.PersistentVolumeClaim{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("its claim in %s: %v", cpNS, err)
			}
			return nil
		})
	})

	deleteAndCheckGone(t, ctx, copyVC)
	deleteAndCheckGone(t, ctx, src)
}

func waitSnapshot(t *testing.T, ctx context.Context, s *v1alpha1.VirtualClusterSnapshot, phase v1alpha1.SnapshotPhase) *v1alpha1.VirtualClusterSnapshot {
	t.Helper()
	got := &v1alpha1.VirtualClusterSnapshot{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(s), got); err != nil {
			return false, nil
		}
		return got.Status.Phase == phase, nil
	})
	if err != nil {
		t.Fatalf("snapshot %s is not %s: %v\nstatus: %+v", s.Name, phase, err, got.Status)
	}
	return got
}
