package virtualcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A host kubelet that fails to start a pod backs off 10 to 15 seconds before it tries again,
// unless the pod changes meanwhile. One failure happens right after the host's scheduler
// binds a pod (twice in about twenty wakes on the local cluster): the kubelet asks for the pod's volume claim before the host's node authorizer
// has linked the pod to the node, is refused ("no relationship found between node ... and
// this object"), and waits (kubernetes/kubernetes#135175). An etcd pod of a tenant, the one
// with a claim, then starts 15 s late, on every kind of start, a wake from sleep among them.
// So a control-plane or etcd pod that is bound but has no sandbox after kubeletRetryAfter
// gets the annotation AnnotationKubeletRetry, once: the kubelet takes the change for an
// update of the pod and tries again at once. A kubelet that was merely slow just syncs the pod
// once more.
const (
	kubeletRetryAfter      = 3 * time.Second
	AnnotationKubeletRetry = "kubenest.io/kubelet-retry"
)

// retryStalledStarts gives the tenant's pods whose kubelet has not started them
// kubeletRetryAfter after they were bound the AnnotationKubeletRetry annotation. It returns
// how long until the next bound pod without a sandbox reaches that age (0 if none will).
func (r *Reconciler) retryStalledStarts(ctx context.Context, pods []corev1.Pod) (time.Duration, error) {
	var next time.Duration
	for i := range pods {
		p := &pods[i]
		stalled, wait := stalledStart(p, r.Clock.Now())
		if wait > 0 && (next == 0 || wait < next) {
			next = wait
		}
		if !stalled {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, AnnotationKubeletRetry, r.Clock.Now().UTC().Format(time.RFC3339))
		if err := r.Client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("asking the kubelet of pod %s to retry: %w", p.Name, err)
		}
		ctrl.LoggerFrom(ctx).Info("the host's kubelet has not started a pod bound to its node; annotated the pod so that the kubelet retries now rather than after its back-off",
			"pod", p.Name, "node", p.Spec.NodeName, "annotation", AnnotationKubeletRetry)
	}
	return next, nil
}

// stalledStart says whether p is bound to a node, has no sandbox, has not been annotated yet
// and was bound at least kubeletRetryAfter ago; if it is bound without a sandbox and not yet
// that old, wait is how long until it is.
func stalledStart(p *corev1.Pod, now time.Time) (stalled bool, wait time.Duration) {
	if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Annotations[AnnotationKubeletRetry] != "" || hasSandbox(p) {
		return false, 0
	}
	var bound time.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			bound = c.LastTransitionTime.Time
		}
	}
	if bound.IsZero() {
		return false, 0
	}
	// Conditions have whole seconds: bound is up to a second earlier than the binding.
	if age := now.Sub(bound); age < kubeletRetryAfter {
		return false, kubeletRetryAfter - age
	}
	return true, 0
}

// hasSandbox says whether the kubelet has made p's sandbox (or ran a container of it).
func hasSandbox(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if cs.State.Running != nil || cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}
