package smoke

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/testtenant"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// TestSharedNodeFilter runs a tenant's scheduler (nest-controlplane controllers, as the
// operator runs it) with a shared node and an ordinary node: a pod the shared node would
// refuse is never bound to it, but goes to the ordinary node, or stays Pending saying why when
// it may only run on the shared node; an ordinary pod is bound to the shared node when it asks
// for it, and otherwise to the ordinary (lent) node first.
func TestSharedNodeFilter(t *testing.T) {
	// A tenant the platform granted privileged pods on its lent nodes: the guard lets a
	// host-network pod be, and only the filter keeps it off the shared node.
	vc := testtenant.VirtualCluster("sched", "6b1f7a52-0000-4000-8000-000000000003")
	vc.Spec.Nodes.PodSecurity = v1alpha1.NodePodSecurityPrivileged
	tenant, cfg := testtenant.RunStandalone(t, testtenant.Binaries(t), vc)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := tenant.WaitReady(ctx, cfg); err != nil {
		t.Fatalf("tenant apiserver not ready: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	// The shared node has the room of all the host's nodes, a lent node that of one.
	addNode(t, ctx, client, "kubenest-shared", "40", map[string]string{sharednode.LabelVirtualNode: "true"})
	addNode(t, ctx, client, "lent-1", "4", nil)
	waitServiceAccount(t, ctx, client, "default", "default")

	pod := func(name, node string, change func(*corev1.PodSpec)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "busybox"}},
		}}
		if node != "" {
			p.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node}
		}
		if change != nil {
			change(&p.Spec)
		}
		if _, err := client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		return p
	}
	// A CSI volume: baseline, which a lent node runs, and not the shared node.
	csi := func(s *corev1.PodSpec) {
		s.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "nfs.csi.example.com"}}}}
	}
	pod("ordinary", "kubenest-shared", nil)
	for i := range 3 {
		pod(fmt.Sprintf("unpinned-%d", i), "", nil)
	}
	pod("csi", "", csi)
	pod("csi-pinned", "kubenest-shared", csi)
	pod("host-network-pinned", "kubenest-shared", func(s *corev1.PodSpec) { s.HostNetwork = true })

	boundTo := func(name, node string) {
		t.Helper()
		var got *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			return err == nil && got.Spec.NodeName != "", nil
		})
		if err != nil {
			t.Errorf("pod %s never bound: %v", name, err)
		} else if got.Spec.NodeName != node {
			t.Errorf("pod %s bound to %s, want %s", name, got.Spec.NodeName, node)
		}
	}
	boundTo("ordinary", "kubenest-shared")
	for i := range 3 {
		boundTo(fmt.Sprintf("unpinned-%d", i), "lent-1")
	}
	boundTo("csi", "lent-1")

	pendingSaying := func(name string, says ...string) {
		t.Helper()
		var cond corev1.PodCondition
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if got.Spec.NodeName != "" {
				return false, fmt.Errorf("pod %s was bound to %s", name, got.Spec.NodeName)
			}
			for _, c := range got.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					cond = c
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		t.Logf("pod %s: PodScheduled %s: %s", name, cond.Reason, cond.Message)
		for _, s := range append([]string{"the shared node, which refuses this pod"}, says...) {
			if !strings.Contains(cond.Message, s) {
				t.Errorf("pod %s: PodScheduled says %q, want it to say %q", name, cond.Message, s)
			}
		}
	}
	pendingSaying("csi-pinned", "spec.volumes[0]")
	pendingSaying("host-network-pinned", "spec.hostNetwork")
}

// addNode adds a Ready node with room for pods (cpus, and 2 GiB of memory for each); nothing
// runs behind it.
func addNode(t *testing.T, ctx context.Context, client kubernetes.Interface, name, cpus string, labels map[string]string) {
	t.Helper()
	l := map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"}
	for k, v := range labels {
		l[k] = v
	}
	node, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	cpu := resource.MustParse(cpus)
	memory := resource.NewQuantity(cpu.Value()<<31, resource.BinarySI)
	room := corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: *memory, corev1.ResourcePods: resource.MustParse("110")}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Capacity: room, Allocatable: room,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}},
	}
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("making node %s Ready: %v", name, err)
	}
}
