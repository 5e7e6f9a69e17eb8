//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// TestDefaultStorage creates the README's first VirtualCluster, as written (in a namespace of
// its own): with the default storage, its etcd keeps its data on a volume claim of the host's
// default StorageClass, so a deleted etcd pod comes back with every object; deleting the
// tenant removes the claim and its volume.
func TestDefaultStorage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-default-storage")
	vc := readmeVirtualCluster(t)
	vc.Namespace = ns
	if vc.Spec.Etcd.Storage.PersistentVolumeClaim == nil {
		t.Fatalf("the README's example asks for %+v, not the default storage", vc.Spec.Etcd.Storage)
	}
	start := time.Now()
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	cpNS := controlplane.Namespace(waitReady(t, ctx, vc))
	t.Logf("%s (PVC etcd) Ready in %s", vc.Name, time.Since(start).Round(100*time.Millisecond))

	names := naming.For(vc.Name)
	claim := &corev1.PersistentVolumeClaim{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: "data-" + names.EtcdStatefulSet() + "-0"}, claim); err != nil {
		t.Fatalf("etcd's volume claim: %v", err)
	}
	if claim.Status.Phase != corev1.ClaimBound || claim.Spec.StorageClassName == nil || *claim.Spec.StorageClassName != "local-path" {
		t.Fatalf("etcd's claim is %s, class %v: want Bound, of the default StorageClass local-path", claim.Status.Phase, claim.Spec.StorageClassName)
	}
	volume := claim.Spec.VolumeName

	kubeconfig := downloadKubeconfig(t, ctx, vc)
	tenant := tenantClient(t, kubeconfig)
	kubectl(t, "--kubeconfig", kubeconfig, "get", "ns")
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survives"},
		Data: map[string]string{"a": "b"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("a deleted etcd pod comes back with its data", func(t *testing.T) {
		pod := &corev1.Pod{}
		key := types.NamespacedName{Namespace: cpNS, Name: names.EtcdStatefulSet() + "-0"}
		if err := host.Get(ctx, key, pod); err != nil {
			t.Fatal(err)
		}
		if err := host.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		var got *corev1.ConfigMap
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			now := &corev1.Pod{}
			if host.Get(ctx, key, now) != nil || now.UID == pod.UID {
				return false, nil
			}
			cm, err := tenant.CoreV1().ConfigMaps("default").Get(ctx, "survives", metav1.GetOptions{})
			got = cm
			if apierrors.IsNotFound(err) {
				return false, err // the data is gone: no point waiting
			}
			return err == nil && cm.Data["a"] == "b", nil
		})
		if err != nil {
			t.Fatalf("the tenant's ConfigMap after its etcd pod was replaced: %v (%v)", err, got)
		}
	})

	deleteAndCheckGone(t, ctx, vc)
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(host.Get(ctx, client.ObjectKey{Name: volume}, &corev1.PersistentVolume{})), nil
	})
	if err != nil {
		t.Errorf("etcd's volume %s remains after the tenant was deleted: %v", volume, err)
	}
}

// readmeVirtualCluster is the first VirtualCluster of README.md, as written there.
func readmeVirtualCluster(t *testing.T) *v1alpha1.VirtualCluster {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range bytes.Split(data, []byte("```yaml\n"))[1:] {
		text, _, _ := strings.Cut(string(block), "```")
		if !strings.Contains(text, "kind: VirtualCluster") {
			continue
		}
		vc := &v1alpha1.VirtualCluster{}
		if err := yaml.UnmarshalStrict([]byte(text), vc); err != nil {
			t.Fatalf("the README's VirtualCluster does not parse: %v\n%s", err, text)
		}
		return vc
	}
	t.Fatal("no VirtualCluster in README.md")
	return nil
}
