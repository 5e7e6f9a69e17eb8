//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
)

const sharedNode = "kubenest-shared"

// TestTenantServices: a tenant's pods reach its Services by name and by ClusterIP, and
// headless names resolve to pod IPs, from the shared node and from a lent node, with the
// server pods on the shared node; and a Service deleted in the tenant leaves nothing in the
// host.
func TestTenantServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-services")
	vc := newVC(ns, "net", v1alpha1.ExposureNodePort)
	vc.Spec.Nodes.Shared = true
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	got := waitReady(t, ctx, vc)
	if got.Status.ServiceCIDR == "" {
		t.Fatal("status.serviceCIDR is empty")
	}
	kubeconfig := downloadKubeconfig(t, ctx, vc)
	tenant := tenantClient(t, kubeconfig)
	waitTenantNodeReady(t, ctx, tenant, sharedNode)

	createWebDeployment(t, ctx, tenant, 2)
	pods := waitTenantPodsRunning(t, ctx, tenant, 2)
	web := createService(t, ctx, tenant, "web", false)
	createService(t, ctx, tenant, "web-headless", true)
	t.Logf("tenant Service range %s; web has ClusterIP %s; web pods %s, %s", got.Status.ServiceCIDR, web.Spec.ClusterIP,
		pods[0].Status.PodIP, pods[1].Status.PodIP)

	t.Run("the host copy has the tenant's ClusterIP", func(t *testing.T) {
		hostSvc := &corev1.Service{}
		name := clustertree.HostName(vc.Name, "default", "web")
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return host.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, hostSvc) == nil, nil
		})
		if err != nil {
			t.Fatalf("no host copy %s of the tenant Service: %v", name, err)
		}
		if hostSvc.Spec.ClusterIP != web.Spec.ClusterIP {
			t.Errorf("host copy has ClusterIP %s, the tenant Service %s", hostSvc.Spec.ClusterIP, web.Spec.ClusterIP)
		}
	})

	// What a client pod checks: the Service by name and by ClusterIP, and the headless name.
	// Each web pod answers one connection at a time, so a connection is tried a few times.
	script := fmt.Sprintf(`set -x
try() { for i in 1 2 3 4 5; do echo | nc -w 5 "$1" 80 && return 0; sleep 1; done; return 1; }
nslookup web.default.svc.cluster.local || exit 1
try web.default.svc.cluster.local || exit 1
try web || exit 1
try %s || exit 1
nslookup web-headless.default.svc.cluster.local || exit 1
nslookup kubernetes.default.svc.cluster.local || exit 1`, web.Spec.ClusterIP)
	check := func(t *testing.T, node string) {
		out, ok := runTenantPod(t, ctx, tenant, "client-"+strings.ReplaceAll(node, ".", "-"), node, script)
		if !ok || strings.Count(out, "hi from web-") < 3 {
			t.Fatalf("client on %s could not reach the Service 3 times (by name, short name, ClusterIP):\n%s", node, out)
		}
		// Lending a node drains it: the web pods may have moved since, and the evicted ones
		// may still be going.
		list, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web", FieldSelector: "status.phase=Running"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if !strings.Contains(out, p.Status.PodIP) {
				t.Errorf("the headless name did not resolve to pod %s's IP %s:\n%s", p.Name, p.Status.PodIP, out)
			}
		}
	}
	t.Run("from the shared node", func(t *testing.T) { check(t, sharedNode) })

	t.Run("kubectl port-forward svc/web", func(t *testing.T) {
		if got := portForward(t, ctx, kubeconfig, "svc/web", 80); !strings.Contains(got, "hi from web-") {
			t.Errorf("through kubectl port-forward svc/web: %q", got)
		}
	})

	t.Run("from a lent node, to pods on the shared node", func(t *testing.T) {
		setPromotion(t, ctx, vc, 1)
		waitNodesReady(t, ctx, vc)
		waitTenantNodeReady(t, ctx, tenant, lendableNode)
		check(t, lendableNode)
	})

	t.Run("a Service deleted in the tenant leaves nothing in the host", func(t *testing.T) {
		if err := tenant.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		name := clustertree.HostName(vc.Name, "default", "web")
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Service{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			slices, err := hostCS.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
			return err == nil && len(slices.Items) == 0, nil
		})
		if err != nil {
			t.Errorf("the host copy of the deleted Service or its EndpointSlices remain: %v", err)
		}
	})

	setPromotion(t, ctx, vc, 0)
	waitVC(t, ctx, vc, 3*time.Minute, func(v *v1alpha1.VirtualCluster) bool { return len(v.Status.Nodes) == 0 })
	deleteAndCheckGone(t, ctx, vc)
}

func createService(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name string, headless bool) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	created, err := tenant.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// runTenantPod runs a busybox pod in the tenant on node, waits for it to finish and returns
// its log and whether it succeeded.
func runTenantPod(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name, node, script string) (string, bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}}},
		},
	}
	pods := tenant.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	logs, _ := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("tenant pod %s on %s did not finish: %v (phase %s)\n%s", name, node, err, pod.Status.Phase, logs)
	}
	return string(logs), pod.Status.Phase == corev1.PodSucceeded
}
