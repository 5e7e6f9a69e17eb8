//go:build e2e

// Package e2e tests KubeNest on a real host cluster: the local one `make up` starts, with the
// operator installed by its Helm chart. Run it with `make e2e`.
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

var (
	kubeconfigPath = flag.String("kubeconfig", "", "kubeconfig of the host cluster")
	kubectlPath    = flag.String("kubectl", "kubectl", "kubectl binary")
)

// readyBound is how long a tenant may take from creation to Ready on the local cluster.
const readyBound = 3 * time.Minute

// BusyboxImage is the general-purpose image every node of the local cluster has.
const BusyboxImage = "kubenest.io/busybox:1.35"

var (
	hostConfig *rest.Config
	host       client.Client
	hostCS     *kubernetes.Clientset
)

func TestMain(m *testing.M) {
	flag.Parse()
	if *kubeconfigPath == "" {
		fmt.Fprintln(os.Stderr, "e2e: -kubeconfig of the host cluster is required; run 'make up' then 'make e2e'")
		os.Exit(2)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfigPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	_ = cmapi.AddToScheme(scheme)
	hostConfig = cfg
	host, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(2)
	}
	hostCS = kubernetes.NewForConfigOrDie(cfg)
	os.Exit(m.Run())
}

// TestTenantLifecycle creates tenants exposed both ways, uses them, survives an apiserver pod
// deletion, and deletes them.
func TestTenantLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-lifecycle")

	nodePort := newVC(ns, "np", v1alpha1.ExposureNodePort)
	clusterIP := newVC(ns, "cip", v1alpha1.ExposureClusterIP)
	start := time.Now()
	for _, vc := range []*v1alpha1.VirtualCluster{nodePort, clusterIP} {
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
	}
	for _, vc := range []*v1alpha1.VirtualCluster{nodePort, clusterIP} {
		got := waitReady(t, ctx, vc)
		t.Logf("%s Ready after %s at %s (version %s)", vc.Name, time.Since(start).Round(100*time.Millisecond), got.Status.Endpoint, got.Status.Version)
	}

	kubeconfig := downloadKubeconfig(t, ctx, nodePort)

	t.Run("the control plane is in KubeNest's namespace, the admin kubeconfig in the tenant's", func(t *testing.T) {
		// Nothing in the namespace the tenant's users may be given rights in holds the
		// tenant's keys or runs its control plane: only the admin kubeconfig is there.
		cpNS := naming.ControlPlaneNamespace(ns)
		n := &corev1.Namespace{}
		if err := host.Get(ctx, client.ObjectKey{Name: cpNS}, n); err != nil {
			t.Fatalf("the control-plane namespace %s: %v", cpNS, err)
		}
		for k, v := range map[string]string{naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: ns,
			"pod-security.kubernetes.io/enforce": "baseline"} {
			if n.Labels[k] != v {
				t.Errorf("namespace %s: label %s=%q, want %q", cpNS, k, n.Labels[k], v)
			}
		}
		for _, vc := range []*v1alpha1.VirtualCluster{nodePort, clusterIP} {
			got := &v1alpha1.VirtualCluster{}
			if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
				t.Fatal(err)
			}
			if got.Status.ControlPlaneNamespace != cpNS {
				t.Errorf("%s: status.controlPlaneNamespace %q, want %q", vc.Name, got.Status.ControlPlaneNamespace, cpNS)
			}
			names := naming.For(vc.Name)
			sel := client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}
			for _, l := range []client.ObjectList{&corev1.SecretList{}, &corev1.PodList{}, &corev1.ServiceList{}, &corev1.PersistentVolumeClaimList{},
				&appsv1.StatefulSetList{}, &appsv1.DeploymentList{}, &policyv1.PodDisruptionBudgetList{}} {
				if err := host.List(ctx, l, client.InNamespace(ns), sel); err != nil {
					t.Fatal(err)
				}
				items, _ := meta.ExtractList(l)
				for _, it := range items {
					if obj := it.(client.Object); obj.GetName() != names.KubeconfigSecret() {
						t.Errorf("%s: %T %s is in the tenant's namespace %s", vc.Name, obj, obj.GetName(), ns)
					}
				}
			}
			for _, it := range []struct {
				name string
				obj  client.Object
			}{
				{names.CASecret(), &corev1.Secret{}}, {names.EtcdCertsSecret(), &corev1.Secret{}},
				{names.ControlPlaneCertsSecret(), &corev1.Secret{}}, {names.KubeletSignerSecret(), &corev1.Secret{}},
				{names.APIServerService(), &corev1.Service{}}, {names.EtcdClientService(), &corev1.Service{}}, {names.EtcdPeerService(), &corev1.Service{}},
				{names.EtcdStatefulSet(), &appsv1.StatefulSet{}}, {names.ControlPlaneDeployment(), &appsv1.Deployment{}},
				{"data-" + names.EtcdStatefulSet() + "-0", &corev1.PersistentVolumeClaim{}},
			} {
				if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: it.name}, it.obj); err != nil {
					t.Errorf("%s: %T %s in %s: %v", vc.Name, it.obj, it.name, cpNS, err)
					continue
				}
				if l := it.obj.GetLabels(); l[naming.LabelVirtualCluster] != vc.Name || l[naming.LabelVirtualClusterNamespace] != ns {
					t.Errorf("%s: %T %s in %s has labels %v", vc.Name, it.obj, it.name, cpNS, l)
				}
			}
			// Its pods too: the operator maps what happens to them to the tenant by these labels.
			pods := &corev1.PodList{}
			if err := host.List(ctx, pods, client.InNamespace(cpNS), sel); err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) == 0 {
				t.Errorf("%s: no pod in %s", vc.Name, cpNS)
			}
			for _, p := range pods.Items {
				if p.Labels[naming.LabelVirtualClusterNamespace] != ns {
					t.Errorf("%s: pod %s/%s has labels %v, want %s=%s", vc.Name, cpNS, p.Name, p.Labels, naming.LabelVirtualClusterNamespace, ns)
				}
			}
			// Pods in the host reach the apiserver through the kubeconfig's in-cluster entry.
			s := &corev1.Secret{}
			if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: names.KubeconfigSecret()}, s); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("https://%s.%s.svc:%d", names.APIServerService(), cpNS, controlplane.APIServerPort); !strings.Contains(string(s.Data[controlplane.KeyInClusterKubeconfig]), want) {
				t.Errorf("%s: the in-cluster kubeconfig does not name %s:\n%s", vc.Name, want, s.Data[controlplane.KeyInClusterKubeconfig])
			}
		}
	})

	t.Run("NodePort endpoint works with kubectl from outside the cluster", func(t *testing.T) {
		out := kubectl(t, "--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name")
		if !strings.Contains(out, "namespace/kube-system") {
			t.Errorf("kubectl get namespaces: %s", out)
		}
	})

	t.Run("ClusterIP endpoint is reachable from a host pod", func(t *testing.T) {
		// Ready already means the operator, a pod, reached /readyz through the Service; a pod
		// of a user's reaches it by name too.
		addr := fmt.Sprintf("%s.%s.svc", naming.For(clusterIP.Name).APIServerService(), controlPlaneNamespace(t, ctx, clusterIP))
		// Busybox's nc has no -z: a newline sent and a closed connection is a success.
		logs, ok := runPod(t, ctx, ns, "reach-cip", "sh", "-c", "echo | nc -w 5 "+addr+" 6443 >/dev/null")
		if !ok {
			t.Errorf("nc %s 6443 from a host pod failed: %s", addr, logs)
		}
	})

	tenant := tenantClient(t, kubeconfig)
	t.Run("the tenant runs its own controllers", func(t *testing.T) {
		if _, err := tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := tenant.CoreV1().ConfigMaps("app").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "settings"}, Data: map[string]string{"color": "blue"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{"app": "web"}
		replicas := int32(2)
		if _, err := tenant.AppsV1().Deployments("app").Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{
						Name: "web", Image: BusyboxImage, Command: []string{"sleep", "3600"},
					}}},
				},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The tenant's controller-manager makes the ReplicaSet and pods; with no node in the
		// tenant yet, its scheduler leaves them Pending.
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			rs, err := tenant.AppsV1().ReplicaSets("app").List(ctx, metav1.ListOptions{})
			if err != nil || len(rs.Items) != 1 {
				return false, nil
			}
			pods, err := tenant.CoreV1().Pods("app").List(ctx, metav1.ListOptions{})
			if err != nil || len(pods.Items) != 2 {
				return false, nil
			}
			for _, p := range pods.Items {
				if p.Status.Phase != corev1.PodPending || !unschedulable(p) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("ReplicaSet and 2 Pending, unschedulable pods: %v", err)
		}
	})

	t.Run("deleting the apiserver pod keeps the data", func(t *testing.T) {
		sel := client.MatchingLabels(naming.For(nodePort.Name).Labels(naming.ComponentControlPlane))
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(controlPlaneNamespace(t, ctx, nodePort)), sel); err != nil || len(pods.Items) == 0 {
			t.Fatalf("control-plane pods: %v (%d)", err, len(pods.Items))
		}
		old := pods.Items[0]
		deleted := time.Now()
		if err := host.Delete(ctx, &old); err != nil {
			t.Fatal(err)
		}
		// The old pod goes; the tenant answers from the new one, with its data.
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, client.ObjectKeyFromObject(&old), &corev1.Pod{})
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		})
		if err != nil {
			t.Fatalf("the deleted pod %s is still there: %v", old.Name, err)
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			cm, err := tenant.CoreV1().ConfigMaps("app").Get(ctx, "settings", metav1.GetOptions{})
			return err == nil && cm.Data["color"] == "blue", nil
		})
		if err != nil {
			t.Fatalf("tenant data after the apiserver pod %s was deleted: %v", old.Name, err)
		}
		t.Logf("the tenant answered with its data %s after its apiserver pod was deleted", time.Since(deleted).Round(100*time.Millisecond))
		waitReady(t, ctx, nodePort)
	})

	t.Run("deleting the VirtualCluster removes every host object", func(t *testing.T) {
		for _, vc := range []*v1alpha1.VirtualCluster{nodePort, clusterIP} {
			deleteAndCheckGone(t, ctx, vc)
		}
	})
}

// TestOperatorRestartMidProvisioning restarts the operator while a tenant is being created:
// the tenant still becomes Ready, and nothing is made twice.
func TestOperatorRestartMidProvisioning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-restart")
	vc := newVC(ns, "restart", v1alpha1.ExposureClusterIP)
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	// Wait until the operator has started (its finalizer is on), then kill it.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got := &v1alpha1.VirtualCluster{}
		return host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil && len(got.Finalizers) > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("deleted the operator pod %s while %s was %s", killOperator(t, ctx).Name, vc.Name, phaseOf(ctx, vc))
	waitReady(t, ctx, vc)

	// Nothing twice: one of each object, and one ReplicaSet of the control plane, which a
	// second set of certificates would have rolled. All in the control-plane namespace but the
	// admin kubeconfig, in the tenant's.
	sel := client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}
	cpNS := controlPlaneNamespace(t, ctx, vc)
	for _, c := range []struct {
		ns   string
		list client.ObjectList
		want int
	}{
		{cpNS, &corev1.SecretList{}, 4},
		{cpNS, &corev1.ServiceList{}, 3},
		{cpNS, &appsv1.StatefulSetList{}, 1},
		{cpNS, &appsv1.DeploymentList{}, 1},
		{cpNS, &appsv1.ReplicaSetList{}, 1},
		{ns, &corev1.SecretList{}, 1},
		{ns, &corev1.ServiceList{}, 0},
		{ns, &appsv1.StatefulSetList{}, 0},
		{ns, &appsv1.DeploymentList{}, 0},
	} {
		if err := host.List(ctx, c.list, client.InNamespace(c.ns), sel); err != nil {
			t.Fatal(err)
		}
		if n := meta.LenList(c.list); n != c.want {
			t.Errorf("%T in %s: %d objects, want %d", c.list, c.ns, n, c.want)
		}
	}
	deleteAndCheckGone(t, ctx, vc)
}

// newVC is a tenant with the default storage (a volume claim of the default StorageClass,
// 'make up' runs a provisioner) exposed as asked.
func newVC(ns, name string, exposure v1alpha1.ExposureType) *v1alpha1.VirtualCluster {
	return &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: exposure}},
		},
	}
}

func createNamespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := host.Create(ctx, ns); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpNamespace(t, name)
		}
		_ = host.Delete(context.Background(), ns)
	})
	return name
}

func waitReady(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) *v1alpha1.VirtualCluster {
	t.Helper()
	got := &v1alpha1.VirtualCluster{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, readyBound, true, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("%s/%s not Ready within %s: %v\nconditions: %+v", vc.Namespace, vc.Name, readyBound, err, got.Status.Conditions)
	}
	return got
}

func phaseOf(ctx context.Context, vc *v1alpha1.VirtualCluster) v1alpha1.VirtualClusterPhase {
	got := &v1alpha1.VirtualCluster{}
	_ = host.Get(ctx, client.ObjectKeyFromObject(vc), got)
	return got.Status.Phase
}

// downloadKubeconfig saves the tenant's admin kubeconfig from its Secret, as a user would.
func downloadKubeconfig(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) string {
	t.Helper()
	got := &v1alpha1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatal(err)
	}
	ref := got.Status.KubeconfigSecretRef
	if ref == nil {
		t.Fatal("status.kubeconfigSecretRef is not set")
	}
	s := &corev1.Secret{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: ref.Name}, s); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), vc.Name+".kubeconfig")
	if err := os.WriteFile(path, s.Data[ref.Key], 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func tenantClient(t *testing.T, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	return kubernetes.NewForConfigOrDie(tenantConfig(t, kubeconfig))
}

// tenantConfig is the client configuration of the kubeconfig file at path.
func tenantConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(*kubectlPath, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runPod runs a busybox pod in the host to completion and returns its logs and whether it
// succeeded.
func runPod(t *testing.T, ctx context.Context, ns, name string, command ...string) (string, bool) {
	t.Helper()
	return runPodOn(t, ctx, ns, name, "", command...)
}

// deleteAndCheckGone deletes vc, waits until it is gone, and checks no host object of it is
// left, in its control-plane namespace or in its own: not what the operator made, nor what the
// host's controllers made for it. When it was the last VirtualCluster of its namespace, the
// control-plane namespace goes too.
func deleteAndCheckGone(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) {
	t.Helper()
	cpNS := controlPlaneNamespace(t, ctx, vc)
	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKeyFromObject(vc), &v1alpha1.VirtualCluster{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Fatalf("%s not deleted: %v", vc.Name, err)
	}
	// Its snapshots' claims and jobs are theirs, and stay.
	sel := client.MatchingLabelsSelector{Selector: controlplane.TenantObjects(vc.Name)}
	for _, ns := range slices.Compact([]string{cpNS, vc.Namespace}) {
		for _, l := range []client.ObjectList{&corev1.SecretList{}, &corev1.ServiceList{}, &corev1.PodList{},
			&corev1.PersistentVolumeClaimList{}, &appsv1.StatefulSetList{}, &appsv1.DeploymentList{},
			&appsv1.ReplicaSetList{}, &appsv1.ControllerRevisionList{}, &policyv1.PodDisruptionBudgetList{}, &batchv1.JobList{}} {
			if err := host.List(ctx, l, client.InNamespace(ns), sel); err != nil {
				t.Fatal(err)
			}
			if n := meta.LenList(l); n != 0 {
				t.Errorf("%s deleted, but %d %T remain in %s", vc.Name, n, l, ns)
			}
		}
		// EndpointSlices belong to the Services; the garbage collector removes them shortly.
		names := naming.For(vc.Name)
		for _, svc := range []string{names.APIServerService(), names.EtcdClientService(), names.EtcdPeerService()} {
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				eps, err := hostCS.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + svc})
				return err == nil && len(eps.Items) == 0, nil
			})
			if err != nil {
				t.Errorf("EndpointSlices of Service %s/%s remain: %v", ns, svc, err)
			}
		}
	}
	// The namespace's last tenant gone, its control-plane namespace goes (whichever release
	// made the tenants): nothing of them is kept there, and nobody else's.
	left := &v1alpha1.VirtualClusterList{}
	if err := host.List(ctx, left, client.InNamespace(vc.Namespace)); err != nil {
		t.Fatal(err)
	}
	snaps := &v1alpha1.VirtualClusterSnapshotList{}
	if err := host.List(ctx, snaps, client.InNamespace(vc.Namespace)); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 || len(snaps.Items) > 0 {
		return // the control-plane namespace holds their control planes, or their snapshots
	}
	shared := naming.ControlPlaneNamespace(vc.Namespace)
	n := &corev1.Namespace{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKey{Name: shared}, n)
		return apierrors.IsNotFound(err) || (err == nil && n.DeletionTimestamp != nil), nil
	})
	if err != nil {
		t.Errorf("%s was the last VirtualCluster of namespace %s, but the control-plane namespace %s is still there, not terminating (labels %v)",
			vc.Name, vc.Namespace, shared, n.Labels)
	}
}

// controlPlaneNamespace is the host namespace of vc's control plane, from vc as the host has
// it (its status says): KubeNest's own for a tenant this build made, vc's own namespace for
// one an earlier release made.
func controlPlaneNamespace(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) string {
	t.Helper()
	got := &v1alpha1.VirtualCluster{}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), got); err != nil {
		t.Fatalf("reading %s/%s for its control-plane namespace: %v", vc.Namespace, vc.Name, err)
	}
	return controlplane.Namespace(got)
}

func unschedulable(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// dumpNamespace prints what a failed test leaves in a namespace, for diagnosis.
func dumpNamespace(t *testing.T, ns string) {
	// Best effort: whatever kubectl printed, errors included.
	host := func(args ...string) string {
		out, _ := exec.Command(*kubectlPath, append([]string{"--kubeconfig", *kubeconfigPath}, args...)...).CombinedOutput()
		return string(out)
	}
	t.Logf("namespace %s:\n%s", ns, host("-n", ns, "get", "virtualclusters,pods,services,secrets,events", "-o", "wide"))
	// Its tenants' control planes (an earlier release's tenants have theirs above).
	cp := naming.ControlPlaneNamespace(ns)
	t.Logf("control-plane namespace %s:\n%s", cp, host("-n", cp, "get", "pods,services,secrets,persistentvolumeclaims,jobs,events", "-o", "wide"))

	// The operator's log lines about the namespace's tenants: a later test may replace the
	// operator's pod (TestOperatorUpgrade), and its log with it.
	var lines []string
	for line := range strings.Lines(host("-n", portalNamespace, "logs", "deploy/kubenest-operator", "--since=30m")) {
		if strings.Contains(line, ns) {
			lines = append(lines, line)
		}
	}
	lines = lines[max(0, len(lines)-150):]
	t.Logf("the operator's last %d log lines naming %s:\n%s", len(lines), ns, strings.Join(lines, ""))
}

// internalIP is a node's first InternalIP address, or "".
func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}
