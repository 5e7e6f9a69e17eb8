//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/util/podutils"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

var (
	helmPath      = flag.String("helm", "helm", "helm binary")
	previousChart = flag.String("previous-chart", "", "the previous release's chart (make previous-release exports it)")
	previousTag   = flag.String("previous-tag", "", "the previous release's image tag, loaded into the local cluster")
)

// TestOperatorUpgrade puts the previous release's chart and image in place, creates tenants
// with it (default storage and ephemeral), then upgrades the chart to this build, whose image
// tag changes every tenant pod template. Every tenant keeps its objects; the ephemeral
// tenant's etcd pod is never replaced (its etcd CA did not change), while the tenant with a
// volume claim rolls its etcd onto the new image. Both keep their control planes in KubeNest's
// control-plane namespace, where the previous release made them, next to a tenant made after
// the upgrade. It ends with this build installed and every tenant of the cluster Ready, as the
// tests after it expect.
func TestOperatorUpgrade(t *testing.T) {
	if *previousChart == "" || *previousTag == "" {
		t.Fatal("-previous-chart and -previous-tag are needed: run it with make e2e, which builds the previous release")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	operator := &appsv1.Deployment{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: "kubenest-system", Name: "kubenest-operator"}, operator); err != nil {
		t.Fatal(err)
	}
	image := operator.Spec.Template.Spec.Containers[0].Image
	repo, currentTag, _ := strings.Cut(image, ":")
	t.Logf("this build: %s; the previous release: %s:%s", image, repo, *previousTag)
	upgraded := false
	t.Cleanup(func() {
		if !upgraded { // whatever failed, the tests after this one get this build back
			helmUpgrade(t, "charts", currentTag)
		}
	})

	helmUpgrade(t, *previousChart, *previousTag)
	ns := createNamespace(t, ctx, "e2e-upgrade")
	cpNS := naming.ControlPlaneNamespace(ns)
	pvc := newVC(ns, "claim", v1alpha1.ExposureNodePort)
	eph := newVC(ns, "eph", v1alpha1.ExposureNodePort)
	eph.Spec.Etcd.Storage = v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}
	tenants := []*v1alpha1.VirtualCluster{pvc, eph}
	for _, vc := range tenants {
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
	}
	etcdBefore := map[string]corev1.Pod{}
	for _, vc := range tenants {
		waitReady(t, ctx, vc)
		tenant := tenantClient(t, downloadKubeconfig(t, ctx, vc))
		for i := range 20 {
			if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kept-%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		etcdBefore[vc.Name] = etcdPod(t, ctx, vc)
		if etcdBefore[vc.Name].Namespace != cpNS {
			t.Fatalf("the previous release put %s's etcd in %s, want %s", vc.Name, etcdBefore[vc.Name].Namespace, cpNS)
		}
		if img := etcdBefore[vc.Name].Spec.Containers[0].Image; !strings.HasSuffix(img, ":"+*previousTag) {
			t.Fatalf("%s's etcd runs %s, not the previous release's image", vc.Name, img)
		}
	}

	start := time.Now()
	helmUpgrade(t, "charts", currentTag)
	upgraded = true
	for _, vc := range tenants {
		names := naming.For(vc.Name)
		// The new operator has rolled the control plane onto this build's image, where the
		// previous release put it, and says so in the status.
		got := &v1alpha1.VirtualCluster{}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			d := &appsv1.Deployment{}
			if host.Get(ctx, client.ObjectKeyFromObject(vc), got) != nil ||
				host.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace(got), Name: names.ControlPlaneDeployment()}, d) != nil {
				return false, nil
			}
			return d.Spec.Template.Spec.Containers[0].Image == image && d.Status.ObservedGeneration == d.Generation &&
				d.Status.UpdatedReplicas == 1 && d.Status.Replicas == 1 && d.Status.AvailableReplicas == 1 &&
				got.Status.ControlPlaneNamespace != "" && meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady), nil
		})
		if err != nil {
			t.Fatalf("%s: not Ready on this build's control plane after the upgrade: %v (status.controlPlaneNamespace %q)", vc.Name, err, got.Status.ControlPlaneNamespace)
		}
		if got.Status.ControlPlaneNamespace != cpNS {
			t.Errorf("%s, made by the previous release: status.controlPlaneNamespace %q, want %s", vc.Name, got.Status.ControlPlaneNamespace, cpNS)
		}
		tenant := tenantClient(t, downloadKubeconfig(t, ctx, vc))
		eventually(t, vc.Name+"'s objects after the upgrade", time.Minute, func() error {
			list, err := tenant.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			kept := 0
			for _, cm := range list.Items {
				if strings.HasPrefix(cm.Name, "kept-") {
					kept++
				}
			}
			if kept != 20 {
				return fmt.Errorf("%d of the 20 ConfigMaps are left", kept)
			}
			return nil
		})
	}
	t.Logf("upgraded, both tenants Ready on this build with their objects, in %s", time.Since(start).Round(100*time.Millisecond))

	now := etcdPod(t, ctx, eph)
	if now.UID != etcdBefore[eph.Name].UID {
		t.Errorf("the ephemeral tenant's etcd pod was replaced by the upgrade (its data with it)")
	}
	t.Logf("ephemeral tenant's etcd pod %s kept, still on %s", now.Name, now.Spec.Containers[0].Image)
	// The tenant with a volume claim rolls its etcd onto the new image, with its data.
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		p := &corev1.Pod{}
		err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: naming.For(pvc.Name).EtcdStatefulSet() + "-0"}, p)
		return err == nil && p.Spec.Containers[0].Image == image && podutils.IsPodReady(p), nil
	})
	if err != nil {
		t.Errorf("the claim tenant's etcd did not roll onto %s: %v", image, err)
	}

	// A tenant made now, next to them, has its control plane in the same namespace.
	later := newVC(ns, "later", v1alpha1.ExposureNodePort)
	if err := host.Create(ctx, later); err != nil {
		t.Fatal(err)
	}
	if got := waitReady(t, ctx, later); got.Status.ControlPlaneNamespace != cpNS {
		t.Errorf("a tenant made after the upgrade: status.controlPlaneNamespace %q, want %s", got.Status.ControlPlaneNamespace, cpNS)
	}
	if p := etcdPod(t, ctx, later); p.Namespace != cpNS {
		t.Errorf("a tenant made after the upgrade has its etcd in %s, want %s", p.Namespace, cpNS)
	}
	kubectl(t, "--kubeconfig", downloadKubeconfig(t, ctx, later), "get", "namespace", "kube-system")

	// The new tenant goes first: the control-plane namespace must stay for the previous
	// release's tenants, and go with the last of them.
	for _, vc := range []*v1alpha1.VirtualCluster{later, pvc, eph} {
		deleteAndCheckGone(t, ctx, vc)
	}
	// Every other tenant of the cluster (the demo's) went through the same, and is Ready.
	err = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		vcs := &v1alpha1.VirtualClusterList{}
		if host.List(ctx, vcs) != nil {
			return false, nil
		}
		for _, vc := range vcs.Items {
			if !meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionReady) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("not every tenant of the cluster is Ready after the upgrade: %v", err)
	}
}

// helmUpgrade upgrades the local cluster's KubeNest release to a chart and image tag, keeping
// every other value, and waits for it.
func helmUpgrade(t *testing.T, chart, tag string) {
	t.Helper()
	if chart == "charts" {
		chart = "../../charts/kubenest"
	}
	out, err := exec.Command(*helmPath, "upgrade", "kubenest", chart, "--kubeconfig", *kubeconfigPath,
		"--namespace", "kubenest-system", "--reuse-values", "--set", "image.tag="+tag, "--wait", "--timeout", "5m").CombinedOutput()
	if err != nil {
		t.Fatalf("helm upgrade to %s (%s): %v\n%s", chart, tag, err, out)
	}
	t.Logf("KubeNest %s from %s", tag, chart)
}

// etcdPod is vc's first etcd member's pod, in its control-plane namespace.
func etcdPod(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) corev1.Pod {
	t.Helper()
	p := corev1.Pod{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: controlPlaneNamespace(t, ctx, vc), Name: naming.For(vc.Name).EtcdStatefulSet() + "-0"}, &p); err != nil {
		t.Fatal(err)
	}
	return p
}
