package virtualcluster

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStalledStart(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 10, 0, time.UTC)
	boundAgo := func(d time.Duration) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-d))}
	}
	noSandbox := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse}
	sandbox := corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue}
	pod := func(node string, mutate func(*corev1.Pod), conds ...corev1.PodCondition) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "alpha-etcd-0"}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: conds}}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantStalled bool
		wantWait    time.Duration
	}{
		{"bound 5 s ago, the kubelet made no sandbox", pod("n1", nil, boundAgo(5*time.Second), noSandbox), true, 0},
		{"bound 5 s ago, not a word from the kubelet yet", pod("n1", nil, boundAgo(5*time.Second)), true, 0},
		{"bound 1 s ago: not yet, look again in 2 s", pod("n1", nil, boundAgo(time.Second), noSandbox), false, 2 * time.Second},
		{"sandbox made", pod("n1", nil, boundAgo(time.Minute), sandbox), false, 0},
		{"a container ran (a restart)", pod("n1", func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}}
		}, boundAgo(time.Minute), noSandbox), false, 0},
		{"not bound", pod("", nil), false, 0},
		{"already annotated once", pod("n1", func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationKubeletRetry: now.Format(time.RFC3339)}
		}, boundAgo(time.Minute), noSandbox), false, 0},
		{"going away", pod("n1", func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }, boundAgo(time.Minute)), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stalled, wait := stalledStart(tc.pod, now)
			if stalled != tc.wantStalled || wait != tc.wantWait {
				t.Errorf("stalledStart = %v, %s; want %v, %s", stalled, wait, tc.wantStalled, tc.wantWait)
			}
		})
	}
}
