package clustertree

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// A kubelet keeps an ended pod's containers, and so their logs, until the pod is deleted, and
// a cluster's pod garbage collector deletes ended pods only past 12,500 of them. On the shared
// node each ended pod of the tenant is a host pod: an object in the host's etcd, and a dead
// container with up to 50 MiB of logs on a host node's disk. Without a bound, a tenant whose
// Jobs leave thousands of ended pods would fill both, the host's (and every other tenant's)
// nodes pressed for disk. So the shared node keeps the host pods of the tenant's
// Config.FinishedPods most recently ended pods and removes the older ones, oldest first. The
// tenant pod stays as it ended, with its status; only its containers' logs are gone, and
// asking for them says so (finishedLogsGone).

// keepFinished removes, whenever a host pod ends, the host pods of the tenant's ended pods
// past the newest max, until ctx ends. 0: it keeps them all.
func (p *provider) keepFinished(ctx context.Context, max int) {
	if max <= 0 {
		return
	}
	for {
		var again <-chan time.Time
		if waiting := p.trimFinished(ctx, max); waiting {
			again = time.After(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-p.ended:
		case <-again:
		}
		// Ends come in bursts (a Job's pods): one pass for those of the next second.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// hostPodEnded asks keepFinished for a pass, without waiting.
func (p *provider) hostPodEnded() {
	select {
	case p.ended <- struct{}{}:
	default:
	}
}

// trimFinished removes the host pods of the tenant's ended pods past the newest max. A host
// pod is removed only once its tenant pod shows its end: one whose status is still on its way
// to the tenant, or whose tenant pod is not in the cache (not synced yet, or gone, when
// virtual-kubelet removes the host pod itself), is kept for now, and waiting says there is one.
func (p *provider) trimFinished(ctx context.Context, max int) (waiting bool) {
	hosts, err := p.hostPods.Pods(p.tr.HostNamespace).List(labels.SelectorFromSet(HostSelector(p.tr.VirtualCluster)))
	if err != nil {
		return false
	}
	hosts = slices.DeleteFunc(hosts, func(hp *corev1.Pod) bool { return !podutil.IsPodTerminal(hp) || hp.DeletionTimestamp != nil })
	if len(hosts) <= max {
		return false
	}
	slices.SortFunc(hosts, func(a, b *corev1.Pod) int { return endedAt(b).Compare(endedAt(a)) }) // newest first
	removed := 0
	for _, hp := range hosts[max:] {
		tenant, err := p.tenantPods.Pods(hp.Annotations[AnnotationTenantNamespace]).Get(hp.Annotations[AnnotationTenantName])
		if err != nil || string(tenant.UID) != hp.Annotations[AnnotationTenantUID] || !podutil.IsPodTerminal(tenant) {
			waiting = true
			continue
		}
		err = p.host.CoreV1().Pods(p.tr.HostNamespace).Delete(ctx, hp.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(hp.UID))})
		switch {
		case err == nil:
			removed++
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && ctx.Err() == nil:
			p.log.Error(err, "removing the host pod of an ended pod", "hostPod", hp.Name)
		}
	}
	if removed > 0 {
		p.log.Info("removed the host pods of the tenant's oldest ended pods, their logs with them", "removed", removed, "kept", max)
	}
	return waiting
}

// endedAt is when a pod's last container ended; its creation if none says.
func endedAt(pod *corev1.Pod) time.Time {
	var last time.Time
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range statuses {
			if t := cs.State.Terminated; t != nil && t.FinishedAt.After(last) {
				last = t.FinishedAt.Time
			}
		}
	}
	if last.IsZero() {
		return pod.CreationTimestamp.Time
	}
	return last
}

// finishedLogsGone says why an ended tenant pod's logs are not there, or nil if it has not
// ended: its host pod was removed (trimFinished), or deleted in the host.
func finishedLogsGone(tenant *corev1.Pod, max int) error {
	if !podutil.IsPodTerminal(tenant) {
		return nil
	}
	keeps := "its logs are gone"
	if max > 0 {
		keeps = fmt.Sprintf("the shared node keeps the containers and logs of the tenant's %d most recently ended pods (the platform's --shared-node-finished-pods)", max)
	}
	return fmt.Errorf("pod %s/%s ended (%s) and its containers were removed from the shared node: %s",
		tenant.Namespace, tenant.Name, cmp.Or(tenant.Status.Phase, "ended"), keeps)
}
