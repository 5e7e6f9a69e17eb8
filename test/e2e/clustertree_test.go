//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"os/exec"
	"regexp"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// webServer answers every connection on 8080 with its pod name.
const webServer = `echo hello from $(hostname); while true; do echo "hi from $(hostname)" | nc -l -p 8080; done`

// TestSharedNode runs a tenant's Deployment on the host's shared nodes through the virtual
// node, and uses it as on any node.
func TestSharedNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-shared")
	vc := newVC(ns, "shared", v1alpha1.ExposureNodePort)
	vc.Spec.Nodes.Shared = true
	// A second tenant with the shared node in the same host namespace, as a platform's
	// "tenants" namespace has them.
	neighbour := newVC(ns, "neighbour", v1alpha1.ExposureNodePort)
	neighbour.Spec.Nodes.Shared = true
	// It takes only the pods that ask for the shared node, until it says otherwise.
	neighbour.Spec.Nodes.SharedPlacement = v1alpha1.SharedPlacementOptIn
	for _, v := range []*v1alpha1.VirtualCluster{vc, neighbour} {
		if err := host.Create(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, ctx, vc)
	kubeconfig := downloadKubeconfig(t, ctx, vc)
	tenant := tenantClient(t, kubeconfig)

	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := tenant.CoreV1().Nodes().Get(ctx, "kubenest-shared", metav1.GetOptions{})
		return err == nil && nodeIsReady(n), nil
	})
	if err != nil {
		t.Fatalf("virtual node kubenest-shared not Ready in the tenant: %v", err)
	}

	// What a platform with a private registry does for its own pods in a namespace: pull
	// Secrets on its default ServiceAccount, which a tenant's pods must not get.
	defaultSA := &corev1.ServiceAccount{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: "default"}, defaultSA); err != nil {
		t.Fatal(err)
	}
	defaultSA.ImagePullSecrets = append(defaultSA.ImagePullSecrets, corev1.LocalObjectReference{Name: "platform-registry"})
	if err := host.Update(ctx, defaultSA); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	createWebDeployment(t, ctx, tenant, 3)
	pods := waitTenantPodsRunning(t, ctx, tenant, 3)
	t.Logf("3 tenant pods Running %s after the Deployment was created", time.Since(start).Round(100*time.Millisecond))

	t.Run("pods run in the VirtualCluster's host namespace", func(t *testing.T) {
		hostPods := hostPodsOf(t, ctx, ns, vc.Name)
		if len(hostPods) != 3 {
			t.Fatalf("%d host pods, want 3", len(hostPods))
		}
		byName := map[string]corev1.Pod{}
		for _, p := range hostPods {
			byName[p.Annotations[clustertree.AnnotationTenantName]] = p
		}
		for _, p := range pods {
			hp, ok := byName[p.Name]
			if !ok {
				t.Errorf("no host pod for tenant pod %s", p.Name)
				continue
			}
			if hp.Status.PodIP != p.Status.PodIP || hp.Spec.NodeName == "" {
				t.Errorf("tenant pod %s has IP %s, its host pod %s has %s on %q", p.Name, p.Status.PodIP, hp.Name, hp.Status.PodIP, hp.Spec.NodeName)
			}
			if hp.Spec.ServiceAccountName != clustertree.HostServiceAccount || len(hp.Spec.ImagePullSecrets) != 0 {
				t.Errorf("host pod %s: ServiceAccount %q, image pull Secrets %v; want %s's, none of the namespace's default ServiceAccount", hp.Name, hp.Spec.ServiceAccountName, hp.Spec.ImagePullSecrets, clustertree.HostServiceAccount)
			}
		}
	})

	t.Run("the node's /metrics answers as a kubelet's, with the tenant's pods only", func(t *testing.T) {
		// What a Prometheus scraping every node through the apiserver, and Kubernetes' e2e
		// framework after a failed test, read.
		out := kubectl(t, "--kubeconfig", kubeconfig, "get", "--raw", "/api/v1/nodes/kubenest-shared/proxy/metrics")
		if !strings.Contains(out, "kubelet_running_pods 3\n") || !strings.Contains(out, `kubelet_node_name{node="kubenest-shared"} 1`) {
			t.Errorf("the shared node's /metrics does not count the 3 pods running:\n%s", out)
		}
		for _, line := range strings.Split(out, "\n") {
			if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "kubelet_") {
				t.Errorf("the shared node's /metrics says more than the tenant's figures (the operator's process serves other tenants too): %q", line)
			}
		}
	})

	pod := pods[0].Name
	t.Run("kubectl logs, exec and port-forward work from the tenant", func(t *testing.T) {
		logs := kubectl(t, "--kubeconfig", kubeconfig, "logs", pod)
		if !strings.Contains(logs, "hello from "+pod) {
			t.Errorf("kubectl logs %s: %q", pod, logs)
		}
		out := kubectl(t, "--kubeconfig", kubeconfig, "exec", pod, "--", "sh", "-c", "hostname; cat /var/run/secrets/kubernetes.io/serviceaccount/namespace")
		if want := pod + "\ndefault"; strings.TrimSpace(out) != want {
			t.Errorf("kubectl exec: %q, want %q", out, want)
		}
		if got := portForward(t, ctx, kubeconfig, pod, 8080); !strings.Contains(got, "hi from "+pod) {
			t.Errorf("kubectl port-forward: read %q", got)
		}
	})

	t.Run("a second tenant of the host namespace has a shared node of its own, its logs and exec too; OptIn, then Overflow", func(t *testing.T) {
		// Its node's address leads to its own kubelet API in the host: the EndpointSlices of
		// the two address Services are named after each, not the same.
		waitReady(t, ctx, neighbour)
		nkc := downloadKubeconfig(t, ctx, neighbour)
		next := tenantClient(t, nkc)
		waitTenantNodeReady(t, ctx, next, sharedNode)

		// sharedPlacement OptIn: the node carries the taint, and a pod that does not
		// tolerate it waits, saying why.
		tainted := func(ctx context.Context) (bool, error) {
			n, err := next.CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{})
			return err == nil && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&sharednode.Taint) }), err
		}
		if ok, err := tainted(ctx); !ok {
			t.Fatalf("the node of a tenant with sharedPlacement OptIn has no taint %s: %v", sharednode.Taint.ToString(), err)
		}
		createWebDeployment(t, ctx, next, 1)
		eventually(t, "the pod that does not tolerate the shared node waits, saying why", time.Minute, func() error {
			pods, err := next.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil || len(pods.Items) != 1 {
				return fmt.Errorf("%v pods: %v", len(pods.Items), err)
			}
			p := pods.Items[0]
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "untolerated taint") {
					t.Logf("OptIn: %s", c.Message)
					return nil
				}
			}
			return fmt.Errorf("pod %s on %q, conditions %+v", p.Name, p.Spec.NodeName, p.Status.Conditions)
		})
		// Overflow (the default): the taint goes, and the pod runs there.
		if err := host.Patch(ctx, neighbour, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodes":{"sharedPlacement":null}}}`))); err != nil {
			t.Fatal(err)
		}
		npod := waitTenantPodsRunning(t, ctx, next, 1)[0].Name
		if ok, err := tainted(ctx); ok || err != nil {
			t.Errorf("the node keeps its taint after sharedPlacement went back to Overflow: %v", err)
		}
		eventually(t, "kubectl logs in the neighbour", time.Minute, func() error {
			out, err := exec.Command(*kubectlPath, "--kubeconfig", nkc, "logs", npod).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "hello from "+npod) {
				return fmt.Errorf("kubectl logs %s: %q, %v", npod, out, err)
			}
			return nil
		})
		if out := kubectl(t, "--kubeconfig", nkc, "exec", npod, "--", "hostname"); strings.TrimSpace(out) != npod {
			t.Errorf("kubectl exec in the neighbour: %q, want %q", out, npod)
		}
		if logs := kubectl(t, "--kubeconfig", kubeconfig, "logs", pod); !strings.Contains(logs, "hello from "+pod) {
			t.Errorf("kubectl logs %s in the first tenant, with the neighbour beside it: %q", pod, logs)
		}
		// Without the shared node, its Node leaves the tenant, as a returned lent node's does.
		if err := host.Patch(ctx, neighbour, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"nodes":{"shared":null}}}`))); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the shared node's Node leaves the tenant", time.Minute, func() error {
			if _, err := next.CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("node %s: %v", sharedNode, err)
			}
			return nil
		})
		deleteAndCheckGone(t, ctx, neighbour)
	})

	t.Run("kubectl debug adds an ephemeral container to a pod", func(t *testing.T) {
		// The baseline profile: kubectl's default one adds SYS_PTRACE, past Pod Security
		// baseline, which the tenant guard refuses on any node (saying so).
		kubectl(t, "--kubeconfig", kubeconfig, "debug", pod, "--profile=baseline", "--image", BusyboxImage, "--container", "debugger",
			"--", "sh", "-c", "while true; do echo polo; sleep 2; done")
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := tenant.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for _, s := range p.Status.EphemeralContainerStatuses {
				if s.Name == "debugger" && s.State.Running != nil {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("ephemeral container debugger never Running in the tenant's pod status: %v", err)
		}
		if out := kubectl(t, "--kubeconfig", kubeconfig, "exec", pod, "-c", "debugger", "--", "echo", "marco"); strings.TrimSpace(out) != "marco" {
			t.Errorf("kubectl exec in the ephemeral container: %q", out)
		}
		if logs := kubectl(t, "--kubeconfig", kubeconfig, "logs", pod, "-c", "debugger"); !strings.Contains(logs, "polo") {
			t.Errorf("kubectl logs of the ephemeral container: %q", logs)
		}
	})

	t.Run("an in-place resize reaches the host pod's cgroup", func(t *testing.T) {
		rz := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "resize", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "c", Image: BusyboxImage, Command: []string{"sleep", "3600"},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
			}}},
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, rz, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = tenant.CoreV1().Pods("default").Delete(ctx, "resize", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}()
		running := func(want string) func(ctx context.Context) (bool, error) {
			return func(ctx context.Context) (bool, error) {
				p, err := tenant.CoreV1().Pods("default").Get(ctx, "resize", metav1.GetOptions{})
				if err != nil || p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].Resources == nil {
					return false, nil
				}
				limit := p.Status.ContainerStatuses[0].Resources.Limits[corev1.ResourceCPU]
				return limit.String() == want && p.Status.ObservedGeneration == p.Generation, nil
			}
		}
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, running("200m")); err != nil {
			t.Fatalf("pod resize not Running with a 200m CPU limit: %v", err)
		}
		patch := []byte(`{"spec":{"containers":[{"name":"c","resources":{"requests":{"cpu":"150m"},"limits":{"cpu":"300m"}}}]}}`)
		if _, err := tenant.CoreV1().Pods("default").Patch(ctx, "resize", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "resize"); err != nil {
			t.Fatalf("resizing: %v", err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, running("300m")); err != nil {
			t.Fatalf("the tenant pod's status never showed the 300m CPU limit: %v", err)
		}
		// cgroup v2, or v1 as on the local cluster: 300m is a quota of 30000 per 100000 µs.
		out := kubectl(t, "--kubeconfig", kubeconfig, "exec", "resize", "--", "sh", "-c", "cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
		if !strings.HasPrefix(strings.TrimSpace(out), "30000") {
			t.Errorf("the container's CPU quota after the resize: %q, want 30000", out)
		}
	})

	t.Run("a missing image shows as the host kubelet's events on the tenant pod", func(t *testing.T) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "no-image", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: sharedNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: "kubenest.io/no-such-image:0.0.1"}}},
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = tenant.CoreV1().Pods("default").Delete(context.Background(), p.Name, metav1.DeleteOptions{})
		}()
		start := time.Now()
		var seen map[string]corev1.Event
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			events, err := tenant.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
			if err != nil {
				return false, nil
			}
			seen = map[string]corev1.Event{}
			for _, e := range events.Items {
				seen[e.Reason] = e
			}
			_, failed := seen["Failed"]
			_, backOff := seen["BackOff"]
			return failed && backOff, nil
		})
		if err != nil {
			t.Fatalf("no Failed and BackOff events on the tenant pod within 30 s; it has %v", slices.Collect(maps.Keys(seen)))
		}
		t.Logf("Failed and BackOff in the tenant %s after the pod was created: %q", time.Since(start).Round(100*time.Millisecond), seen["Failed"].Message)
		for _, e := range seen {
			if strings.Contains(e.Message, ns) || strings.Contains(e.Message, "-x-") || e.Source.Host == "kn-worker-1" || e.Source.Host == "kn-worker-2" {
				t.Errorf("event %s names the host: %q (source %+v)", e.Reason, e.Message, e.Source)
			}
		}
	})

	t.Run("a privileged pod is refused with a message; a pod only the shared node cannot run waits, saying why", func(t *testing.T) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{
				Name: "root", Image: BusyboxImage, Command: []string{"sleep", "60"},
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
			}}},
		}
		// No node of a tenant without the platform's grant runs it: its apiserver refuses it.
		_, err := tenant.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "KubeNestTenantGuard") || !strings.Contains(err.Error(), "privileged") {
			t.Fatalf("a privileged pod: %v, want refused by the tenant guard", err)
		}
		// A pod with a CSI volume is baseline, and a lent node with that driver would run it;
		// the shared node does not. The tenant's scheduler never binds it there: it stays
		// Pending, and says why.
		p = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "csi", Namespace: "default"},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, Command: []string{"sleep", "60"},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "csi.example.com"}}}},
			},
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var got *corev1.Pod
		var scheduled *corev1.PodCondition
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err = tenant.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			for i, c := range got.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, "the shared node, which refuses this pod") {
					scheduled = &got.Status.Conditions[i]
				}
			}
			return scheduled != nil, nil
		})
		if err != nil || got.Status.Phase != corev1.PodPending || got.Spec.NodeName != "" || !strings.Contains(scheduled.Message, "spec.volumes[0]: this volume type is not supported on the shared node") {
			t.Fatalf("a pod with a CSI volume: %v; node %q, status %+v", err, got.Spec.NodeName, got.Status)
		}
		t.Logf("waiting: %s", scheduled.Message)
		_ = tenant.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{})
	})

	t.Run("deleting a host pod gets the tenant a new one", func(t *testing.T) {
		victim := hostPodsOf(t, ctx, ns, vc.Name)[0]
		if err := host.Delete(ctx, &victim, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := tenant.CoreV1().Pods("default").Get(ctx, victim.Annotations[clustertree.AnnotationTenantName], metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Fatalf("the tenant pod of the deleted host pod stays: %v", err)
		}
		waitTenantPodsRunning(t, ctx, tenant, 3)
	})

	t.Run("the operator killed during a scale-up still converges", func(t *testing.T) {
		scale(t, ctx, tenant, 6)
		killOperator(t, ctx)
		waitTenantPodsRunning(t, ctx, tenant, 6)
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return len(hostPodsOf(t, ctx, ns, vc.Name)) == 6, nil
		})
		if err != nil {
			t.Errorf("%d host pods, want exactly 6", len(hostPodsOf(t, ctx, ns, vc.Name)))
		}
	})

	t.Run("scaling to 0 and deleting leave nothing in the host", func(t *testing.T) {
		scale(t, ctx, tenant, 0)
		if err := tenant.AppsV1().Deployments("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			sel := client.MatchingLabels(clustertree.HostSelector(vc.Name))
			var n int
			for _, l := range []client.ObjectList{&corev1.PodList{}, &corev1.ConfigMapList{}, &corev1.SecretList{}} {
				if err := host.List(ctx, l, client.InNamespace(ns), sel); err != nil {
					return false, nil
				}
				n += meta.LenList(l)
			}
			return n == 0, nil
		})
		if err != nil {
			t.Fatalf("host pods, ConfigMaps or Secrets of the tenant's pods remain: %v", err)
		}
	})
	deleteAndCheckGone(t, ctx, vc)
}

func createWebDeployment(t *testing.T, ctx context.Context, tenant kubernetes.Interface, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": "web"}
	_, err := tenant.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "web", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", webServer},
						Ports:   []corev1.ContainerPort{{ContainerPort: 8080}},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func scale(t *testing.T, ctx context.Context, tenant kubernetes.Interface, replicas int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := tenant.AppsV1().Deployments("default").Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitTenantPodsRunning waits until the tenant's web pods are exactly n, all Running with an
// IP, and returns them.
func waitTenantPodsRunning(t *testing.T, ctx context.Context, tenant kubernetes.Interface, n int) []corev1.Pod {
	t.Helper()
	var pods *corev1.PodList
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		pods, err = tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil || len(pods.Items) != n {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		var states []string
		for _, p := range pods.Items {
			states = append(states, fmt.Sprintf("%s=%s", p.Name, p.Status.Phase))
		}
		t.Fatalf("want %d Running tenant pods: %v (%s)", n, err, strings.Join(states, ", "))
	}
	return pods.Items
}

func hostPodsOf(t *testing.T, ctx context.Context, ns, vc string) []corev1.Pod {
	t.Helper()
	pods := &corev1.PodList{}
	if err := host.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(clustertree.HostSelector(vc))); err != nil {
		t.Fatal(err)
	}
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// killOperator deletes the operator's pods at once, as a crash would, and returns the name of
// the first.
func killOperator(t *testing.T, ctx context.Context) corev1.Pod {
	t.Helper()
	ops := &corev1.PodList{}
	if err := host.List(ctx, ops, client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil || len(ops.Items) == 0 {
		t.Fatalf("operator pods: %v (%d)", err, len(ops.Items))
	}
	for _, p := range ops.Items {
		if err := host.Delete(ctx, &p, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	return ops.Items[0]
}

// portForward runs kubectl port-forward to a tenant pod and returns what one connection reads.
func portForward(t *testing.T, ctx context.Context, kubeconfig, pod string, port int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, *kubectlPath, "--kubeconfig", kubeconfig, "port-forward", pod, fmt.Sprintf(":%d", port))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("kubectl port-forward printed nothing: %v", err)
	}
	m := regexp.MustCompile(`127\.0\.0\.1:(\d+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("kubectl port-forward: %q", line)
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+m[1], 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	data, _ := io.ReadAll(conn)
	return string(data)
}

func nodeIsReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
