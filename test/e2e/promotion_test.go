//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
	"github.com/kubenest-io/kubenest/pkg/nodepool/agent"
)

// lendableNode is the local cluster's lendable node (make up labels the last of two).
const lendableNode = "kn-worker-2"

// TestNodePromotion lends the lendable host node to a tenant, uses it there, makes a second
// tenant wait for it, gives it back with the node agent killed mid-switch, lends it to the
// second tenant, and gets it back into the host when that tenant is deleted.
func TestNodePromotion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-promote")
	waitPoolNode(t, ctx, func(pn *v1alpha1.PoolNode) bool { return pn.Status.Phase == v1alpha1.PoolNodeInHost })

	first := newVC(ns, "first", v1alpha1.ExposureNodePort)
	if err := host.Create(ctx, first); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, first)
	tenant := tenantClient(t, downloadKubeconfig(t, ctx, first))

	start := time.Now()
	setPromotion(t, ctx, first, 1)
	waitNodesReady(t, ctx, first)
	waitTenantNodeReady(t, ctx, tenant, lendableNode)
	t.Logf("request → node Ready in the tenant: %s", time.Since(start).Round(100*time.Millisecond))

	t.Run("no tenant's etcd or control plane runs on a lendable node", func(t *testing.T) {
		// One there would keep the node from every tenant: selection never lends it.
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.MatchingLabelsSelector{Selector: nodepool.ControlPlaneSelector}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			n := &corev1.Node{}
			if p.Spec.NodeName == "" || host.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, n) != nil {
				continue
			}
			if n.Labels[v1alpha1.LabelLendable] == "true" {
				t.Errorf("%s/%s runs on lendable node %s", p.Namespace, p.Name, n.Name)
			}
		}
	})

	t.Run("the host no longer schedules onto the node", func(t *testing.T) {
		n := &corev1.Node{}
		if err := host.Get(ctx, client.ObjectKey{Name: lendableNode}, n); err != nil {
			t.Fatal(err)
		}
		if !n.Spec.Unschedulable {
			t.Errorf("host node %s is schedulable while lent", lendableNode)
		}
	})

	t.Run("a tenant pod pinned to the node runs a real container there", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName:                      lendableNode,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", "echo running on $(hostname) as $(id -u); sleep 3600"}}},
			},
		}
		if _, err := tenant.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPodRunning(t, ctx, tenant, "default", "pinned")
		// Running says the container started, not that its first line is written yet.
		var logs []byte
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			logs, err = tenant.CoreV1().Pods("default").GetLogs("pinned", &corev1.PodLogOptions{}).DoRaw(ctx)
			return err == nil && strings.Contains(string(logs), "running on pinned"), nil
		})
		if err != nil {
			t.Errorf("logs of the pinned pod: %q, %v", logs, err)
		}
	})

	t.Run("asleep, the tenant keeps its lent node, whose pod runs on; a request wakes it, and the node is Ready in it again", func(t *testing.T) {
		before, err := tenant.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil || len(before.Status.ContainerStatuses) != 1 || before.Status.ContainerStatuses[0].State.Running == nil {
			t.Fatalf("pod pinned before the sleep: %v %+v", err, before)
		}
		got := sleepAndWait(t, ctx, first)
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionNodesReady); c == nil || c.Reason != "Asleep" {
			t.Errorf("NodesReady while asleep: %+v, want reason Asleep", c)
		}
		// The lent node's kubelet keeps asking the tenant's endpoint: that does not wake it.
		time.Sleep(10 * time.Second)
		got = &v1alpha1.VirtualCluster{}
		if err := host.Get(ctx, client.ObjectKeyFromObject(first), got); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAsleep); !got.Spec.Sleep.Asleep || c == nil || c.Status != metav1.ConditionTrue {
			t.Errorf("10 s after it fell asleep: spec.sleep.asleep %v, Asleep %+v; its lent node's kubelet woke it", got.Spec.Sleep.Asleep, c)
		}
		pn := waitPoolNode(t, ctx, func(*v1alpha1.PoolNode) bool { return true })
		if pn.Spec.Tenant == nil || pn.Spec.Tenant.UID != first.UID || pn.Status.Phase != v1alpha1.PoolNodeInTenant {
			t.Errorf("PoolNode while its tenant sleeps: tenant %+v, phase %s; want lent to %s, InTenant", pn.Spec.Tenant, pn.Status.Phase, first.Name)
		}

		// A person's request does, and is answered.
		start := time.Now()
		if _, err := tenant.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{}); err != nil {
			t.Fatalf("the first request to the sleeping tenant: %v", err)
		}
		t.Logf("the first request to the sleeping tenant with a lent node answered in %s", time.Since(start).Round(100*time.Millisecond))
		waitReady(t, ctx, first)
		waitTenantNodeReady(t, ctx, tenant, lendableNode)
		after, err := tenant.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil || after.UID != before.UID || len(after.Status.ContainerStatuses) != 1 {
			t.Fatalf("pod pinned after waking: %v %+v", err, after)
		}
		// The same container, never restarted: the kubelet ran it on while the tenant slept.
		b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
		if a.State.Running == nil || a.RestartCount != b.RestartCount || !a.State.Running.StartedAt.Equal(&b.State.Running.StartedAt) {
			t.Errorf("container of pod pinned: before the sleep %+v, after %+v; want the same running container", b, a)
		}
	})

	second := newVC(ns, "second", v1alpha1.ExposureNodePort)
	second.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "workers", Count: 1}}
	t.Run("a second tenant asking for the same node is told why it waits", func(t *testing.T) {
		if err := host.Create(ctx, second); err != nil {
			t.Fatal(err)
		}
		got := waitVC(t, ctx, second, 3*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionNodesReady)
			return c != nil && c.Reason == "NotEnoughNodes"
		})
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionNodesReady)
		if !strings.Contains(c.Message, "1 are lent to other tenants") {
			t.Errorf("NodesReady message %q does not say the node is lent to another tenant", c.Message)
		}
		t.Logf("second tenant: %s", c.Message)
	})

	t.Run("given back with the node agent killed mid-switch, the node ends up in the host", func(t *testing.T) {
		pinned, err := tenant.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if logs := podLogsOnNode(t, lendableNode, pinned.UID); len(logs) == 0 {
			t.Fatalf("the lent node holds no log of pod pinned (%s) while it runs; the check below would prove nothing", pinned.UID)
		}
		start := time.Now()
		setPromotion(t, ctx, first, 0)
		step := killAgentMidSwitch(t, ctx)
		t.Logf("killed the node agent at step %q", step)
		// The second tenant is waiting for the node: it gets it once it is home.
		waitNodesReady(t, ctx, second)
		t.Logf("node back from the first tenant and Ready in the second: %s", time.Since(start).Round(100*time.Millisecond))
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := tenant.CoreV1().Nodes().Get(ctx, lendableNode, metav1.GetOptions{})
			return client.IgnoreNotFound(err) == nil && err != nil, nil
		})
		if err != nil {
			t.Errorf("the first tenant still has Node %s: %v", lendableNode, err)
		}
		// The second tenant may be granted the node's files: the first's logs are not there.
		if logs := podLogsOnNode(t, lendableNode, pinned.UID); len(logs) != 0 {
			t.Errorf("the node, now the second tenant's, still holds the first tenant's pod logs: %v", logs)
		}
	})

	t.Run("deleting the tenant brings the node back into the host, where a host pod runs", func(t *testing.T) {
		start := time.Now()
		deleteAndCheckGone(t, ctx, second)
		waitPoolNode(t, ctx, func(pn *v1alpha1.PoolNode) bool { return pn.Status.Phase == v1alpha1.PoolNodeInHost })
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			n := &corev1.Node{}
			return host.Get(ctx, client.ObjectKey{Name: lendableNode}, n) == nil && !n.Spec.Unschedulable && nodeIsReady(n), nil
		})
		if err != nil {
			t.Fatalf("host node %s not Ready and schedulable: %v", lendableNode, err)
		}
		t.Logf("tenant deleted → node Ready in the host: %s", time.Since(start).Round(100*time.Millisecond))
		logs, ok := runPodOn(t, ctx, ns, "back-home", lendableNode, "sh", "-c", "echo home")
		if !ok || !strings.Contains(logs, "home") {
			t.Errorf("host pod on the returned node: ok=%v logs=%q", ok, logs)
		}
	})
	deleteAndCheckGone(t, ctx, first)
}

func setPromotion(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, count int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"nodes":{"promotions":[{"name":"workers","count":%d}]}}}`, count)
	if err := host.Patch(ctx, vc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func waitVC(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, timeout time.Duration, ok func(*v1alpha1.VirtualCluster) bool) *v1alpha1.VirtualCluster {
	t.Helper()
	got := &v1alpha1.VirtualCluster{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil && ok(got), nil
	})
	if err != nil {
		t.Fatalf("%s/%s: %v; conditions %+v", vc.Namespace, vc.Name, err, got.Status.Conditions)
	}
	return got
}

func waitNodesReady(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) {
	t.Helper()
	waitVC(t, ctx, vc, 5*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.ConditionNodesReady) && len(v.Status.Nodes) > 0
	})
}

func waitPoolNode(t *testing.T, ctx context.Context, ok func(*v1alpha1.PoolNode) bool) *v1alpha1.PoolNode {
	t.Helper()
	pn := &v1alpha1.PoolNode{}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		return host.Get(ctx, client.ObjectKey{Name: lendableNode}, pn) == nil && ok(pn), nil
	})
	if err != nil {
		t.Fatalf("PoolNode %s: %v; status %+v", lendableNode, err, pn.Status)
	}
	return pn
}

func waitTenantNodeReady(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name string) {
	t.Helper()
	var n *corev1.Node
	var getErr error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, getErr = tenant.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return getErr == nil && nodeIsReady(n), nil
	})
	if err == nil {
		return
	}
	// Say why, in the failure itself: the tenant's view of the node, the agent's, and the
	// kubelet's own last errors (its log is the local cluster's; CI keeps only the output).
	why := fmt.Sprintf("get: %v", getErr)
	if getErr == nil {
		why = fmt.Sprintf("conditions %+v", n.Status.Conditions)
	}
	pn := &v1alpha1.PoolNode{}
	_ = host.Get(ctx, client.ObjectKey{Name: name}, pn)
	t.Fatalf("node %s not Ready in the tenant: %v\n%s\nPoolNode: %+v\nthe kubelet's last errors:\n%s",
		name, err, why, pn.Status, lastErrors(filepath.Join("..", "..", "_output", "local", "logs", name+"-kubelet.log"), 12))
}

// lastErrors returns the last n error lines (klog's "E" prefix) of a log file.
func lastErrors(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var errs []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "E") {
			errs = append(errs, line)
		}
	}
	return strings.Join(errs[max(0, len(errs)-n):], "\n")
}

// killAgentMidSwitch waits until the lendable node's agent reports a step of a switch and
// kills it with SIGKILL, as a crash would; the local cluster restarts it, as systemd would.
// It returns the step the agent was at.
func killAgentMidSwitch(t *testing.T, ctx context.Context) string {
	t.Helper()
	var step string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pn := &v1alpha1.PoolNode{}
		if host.Get(ctx, client.ObjectKey{Name: lendableNode}, pn) != nil {
			return false, nil
		}
		step = pn.Status.Agent.Step
		return step != "", nil
	})
	if err != nil {
		t.Fatalf("the node agent never reported a step: %v", err)
	}
	pids := agentPIDs(lendableNode)
	if len(pids) == 0 {
		t.Fatalf("no node agent process for %s", lendableNode)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing node agent %d: %v", pid, err)
		}
	}
	return step
}

// agentPIDs finds the node agent processes of a node: their command runs node-agent (not the
// shell that restarts it) with its node name.
func agentPIDs(node string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if len(args) < 2 || filepath.Base(string(args[0])) != "node-agent" || !bytes.Contains(cmdline, []byte("--node-name="+node+"\x00")) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// podLogsOnNode lists what the node's kubelet keeps of a pod's logs: its directory in the
// kubelet's podLogsDir (read from the configuration the node agent runs the kubelet with) and
// the links to its containers' logs in /var/log/containers.
func podLogsOnNode(t *testing.T, node string, uid types.UID) []string {
	t.Helper()
	pids := agentPIDs(node)
	if len(pids) == 0 {
		t.Fatalf("no node agent process for %s", node)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	var config string
	for _, a := range bytes.Split(cmdline, []byte{0}) {
		if v, ok := bytes.CutPrefix(a, []byte("--kubelet-config=")); ok {
			config = string(v)
		}
	}
	data, err := os.ReadFile(config)
	if err != nil {
		t.Fatalf("the kubelet configuration of %s: %v", node, err)
	}
	dir, err := agent.PodLogsDir(data)
	if err != nil {
		t.Fatal(err)
	}
	found, _ := filepath.Glob(filepath.Join(dir, "*_"+string(uid)))
	links, _ := filepath.Glob(filepath.Join(agent.ContainerLogsDir, "*.log"))
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.Contains(target, "_"+string(uid)+"/") {
			found = append(found, l)
		}
	}
	return found
}

// runPodOn runs a busybox pod in the host to completion, on node when it is not empty.
func runPodOn(t *testing.T, ctx context.Context, ns, name, node string, command ...string) (string, bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: command}},
		},
	}
	if node != "" {
		pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
	}
	if err := host.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = host.Delete(context.Background(), pod) }()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := host.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return false, nil
		}
		return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed, nil
	})
	if err != nil {
		t.Fatalf("pod %s on %s did not finish: %v (phase %s)", name, node, err, pod.Status.Phase)
	}
	logs, _ := hostCS.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(logs), pod.Status.Phase == corev1.PodSucceeded
}
