package clustertree

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/virtual-kubelet/virtual-kubelet/errdefs"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"
	"k8s.io/utils/ptr"
)

// Reasons of the tenant pod events and statuses clustertree writes.
const (
	ReasonForbidden   = "Forbidden"
	ReasonHostPodGone = "HostPodGone"
)

// provider runs tenant pods as host pods: virtual-kubelet's PodLifecycleHandler, PodNotifier
// and kubelet API handlers for one virtual node.
type provider struct {
	tr       Translator
	owner    metav1.OwnerReference
	host     kubernetes.Interface
	hostREST *rest.Config
	hostPods corev1listers.PodLister
	// hostPodIndex is the host pods' cache, indexed by the copies they refer to (indexRefs).
	hostPodIndex cache.Indexer
	tenant       kubernetes.Interface
	// Tenant listers, from virtual-kubelet's informers; ConfigMaps and Secrets by their
	// metadata only (statusOnlyClient).
	tenantPods       corev1listers.PodLister
	tenantConfigMaps corev1listers.ConfigMapLister
	tenantSecrets    corev1listers.SecretLister
	tenantServices   corev1listers.ServiceLister
	recorder         record.EventRecorder
	log              klog.Logger
	// unreferencedGrace keeps a host copy that no host pod refers to yet (its pod is being
	// created) from being collected.
	unreferencedGrace time.Duration
	// wokeAt is Config.WokeAt.
	wokeAt time.Time

	// quota is the tenant's share of the shared nodes (Config.Quota); nil: no limit but the
	// host's. admitted holds, under admitMu, the pods admitted lately (quota.go).
	quota    corev1.ResourceList
	admitMu  sync.Mutex
	admitted map[types.UID]admission
	// copies counts the bytes of the host copies of the tenant's objects (copybudget.go).
	copies *copyBudget
	// finishedPods is Config.FinishedPods; ended asks for a pass of keepFinished (finished.go).
	finishedPods int
	ended        chan struct{}

	mu     sync.Mutex
	notify func(*corev1.Pod)
	// refused holds tenant pods refused on the shared node, by namespace/name, with the failed
	// status they were given, so they are not tried again.
	refused map[string]*corev1.Pod
}

// NotifyPods registers virtual-kubelet's callback for status changes.
func (p *provider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = cb
}

func (p *provider) send(pod *corev1.Pod) {
	p.mu.Lock()
	cb := p.notify
	p.mu.Unlock()
	if cb != nil {
		cb(pod)
	}
}

// createRetry bounds how long CreatePod retries on its own (about 6 s in all).
var createRetry = wait.Backoff{Steps: 6, Duration: 200 * time.Millisecond, Factor: 2, Cap: 3 * time.Second}

// CreatePod runs a tenant pod: it copies the ConfigMaps and Secrets it refers to, requests its
// service-account tokens from the tenant, and creates the host pod. virtual-kubelet marks a pod
// with restartPolicy Never Failed on any error CreatePod returns, so a passing one (a conflict
// with the host kubelet or with the copy follower, a host apiserver that is busy, an earlier
// host pod of the same name still going) is retried here first.
func (p *provider) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	return retry.OnError(createRetry, func(err error) bool {
		if ctx.Err() != nil {
			return false
		}
		p.log.Info("creating the host pod failed; trying again", "pod", klog.KObj(pod), "err", err.Error())
		return true
	}, func() error { return p.createPod(ctx, pod) })
}

func (p *provider) createPod(ctx context.Context, pod *corev1.Pod) (err error) {
	hostName := HostName(p.tr.VirtualCluster, pod.Namespace, pod.Name)
	if existing, err := p.hostPods.Pods(p.tr.HostNamespace).Get(hostName); err == nil {
		if existing.Annotations[AnnotationTenantUID] == string(pod.UID) {
			p.send(p.tenantView(pod, existing))
			return nil
		}
		// A host pod of an earlier tenant pod of the same name (a StatefulSet's, say) is
		// still going; the new one is created once it is gone.
		if existing.DeletionTimestamp == nil {
			if err := p.host.CoreV1().Pods(p.tr.HostNamespace).Delete(ctx, hostName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting the host pod of an earlier %s/%s: %w", pod.Namespace, pod.Name, err)
			}
		}
		return fmt.Errorf("host pod %s of an earlier %s/%s is still terminating", hostName, pod.Namespace, pod.Name)
	}
	if started := pod.Status.StartTime; started != nil {
		if !started.Time.Before(p.wokeAt) || pod.Spec.RestartPolicy == corev1.RestartPolicyNever {
			// The pod ran before and its host pod is gone (deleted while no one watched): like
			// a pod whose node vanished, it is deleted, and its controller replaces it.
			p.log.Info("tenant pod lost its host pod; deleting it", "pod", klog.KObj(pod))
			p.send(deletedOnHost(pod))
			return nil
		}
		p.log.Info("tenant pod ran before the tenant slept; its host pod is made again", "pod", klog.KObj(pod))
	}

	services, err := p.tenantServices.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	hostPod, refs, err := p.tr.Pod(pod, services)
	var forbidden *ForbiddenError
	if errors.As(err, &forbidden) {
		p.refuse(pod, ReasonForbidden, forbidden.Error())
		return nil
	}
	if err != nil {
		return err
	}
	var full *quotaError
	if err := p.admit(pod.UID, podRequests(hostPod)); errors.As(err, &full) {
		p.refuse(pod, full.Reason(), full.Error())
		return nil
	} else if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			p.forget(pod.UID)
		}
	}()
	hostPod.OwnerReferences = []metav1.OwnerReference{p.owner}
	var over *copyBudgetError
	if err := p.syncRefs(ctx, pod, hostName, refs); errors.As(err, &over) {
		// Copies it made before the one that did not fit go once no pod refers to them.
		p.forget(pod.UID)
		p.refuse(pod, ReasonCopyBudget, over.Error())
		return nil
	} else if err != nil {
		return err
	}
	ephemeral := hostPod.Spec.EphemeralContainers
	hostPod.Spec.EphemeralContainers = nil // never part of a create
	created, err := p.host.CoreV1().Pods(p.tr.HostNamespace).Create(ctx, hostPod, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsInvalid(err) || (apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity")) {
		// The host refused it for good (Pod Security admission, say): the tenant hears why.
		// Other refusals (a quota, a missing service account) may pass later and are retried.
		p.forget(pod.UID)
		p.refuse(pod, ReasonForbidden, "the host cluster refused the pod: "+err.Error())
		return nil
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating host pod %s: %w", hostName, err)
	}
	if created != nil {
		p.send(p.tenantView(pod, created))
		return p.addEphemeralContainers(ctx, pod, created, ephemeral)
	}
	return nil
}

// withResources gives pod the containers' resources of want; false when they are the same.
func withResources(pod, want *corev1.Pod) bool {
	changed := false
	for _, pair := range [][2][]corev1.Container{{pod.Spec.Containers, want.Spec.Containers}, {tenantInitContainers(pod), tenantInitContainers(want)}} {
		for i := range min(len(pair[0]), len(pair[1])) {
			if !equality.Semantic.DeepEqual(pair[0][i].Resources, pair[1][i].Resources) {
				pair[0][i].Resources = pair[1][i].Resources
				changed = true
			}
		}
	}
	return changed
}

// withEphemeralContainers adds to pod the ephemeral containers of want it lacks (kubectl debug
// in the tenant: they are only ever added); false when it has them all.
func withEphemeralContainers(pod *corev1.Pod, want []corev1.EphemeralContainer) bool {
	n := len(pod.Spec.EphemeralContainers)
	for _, ec := range want {
		if !slices.ContainsFunc(pod.Spec.EphemeralContainers, func(c corev1.EphemeralContainer) bool { return c.Name == ec.Name }) {
			pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, ec)
		}
	}
	return len(pod.Spec.EphemeralContainers) > n
}

// addEphemeralContainers adds to the host pod the ephemeral containers of want it lacks
// (kubectl debug in the tenant); the host's Pod Security admission checks them too.
func (p *provider) addEphemeralContainers(ctx context.Context, tenant, current *corev1.Pod, want []corev1.EphemeralContainer) error {
	pods := p.host.CoreV1().Pods(p.tr.HostNamespace)
	_, err := p.writeHostPod(ctx, current, func(next *corev1.Pod) bool { return withEphemeralContainers(next, want) },
		func(next *corev1.Pod) (*corev1.Pod, error) {
			return pods.UpdateEphemeralContainers(ctx, next.Name, next, metav1.UpdateOptions{FieldManager: fieldManager})
		})
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		p.recorder.Event(tenant, corev1.EventTypeWarning, ReasonForbidden, "the host cluster refused the ephemeral container: "+err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("adding ephemeral containers to host pod %s: %w", current.Name, err)
	}
	return nil
}

// refuse fails a tenant pod that may not run on the shared node, with an event saying why.
func (p *provider) refuse(pod *corev1.Pod, reason, why string) {
	msg := "refused by the shared node: " + why
	p.recorder.Event(pod, corev1.EventTypeWarning, reason, msg)
	failed := pod.DeepCopy()
	failed.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: reason, Message: msg}
	p.mu.Lock()
	p.refused[pod.Namespace+"/"+pod.Name] = failed
	p.mu.Unlock()
	p.log.Info("refused a tenant pod", "pod", klog.KObj(pod), "reason", reason, "why", why)
	p.send(failed)
}

// UpdatePod carries the tenant pod's changes (images, deadline, labels, annotations) to the
// host pod: its labels and annotations become what Pod makes of the tenant's now, so the
// downward API's files follow them as on a kubelet.
func (p *provider) UpdatePod(ctx context.Context, pod *corev1.Pod) error {
	services, err := p.tenantServices.Services(pod.Namespace).List(labels.Everything())
	if err != nil {
		return err
	}
	want, refs, err := p.tr.Pod(pod, services)
	var forbidden *ForbiddenError
	if errors.As(err, &forbidden) {
		// A refused pod has no host pod to update; a running one that asks for more than the
		// shared node gives (a privileged ephemeral container, say) hears why.
		if _, running := p.hostPods.Pods(p.tr.HostNamespace).Get(HostName(p.tr.VirtualCluster, pod.Namespace, pod.Name)); running == nil {
			p.recorder.Event(pod, corev1.EventTypeWarning, ReasonForbidden, "refused by the shared node: "+forbidden.Error())
		}
		return nil
	}
	if err != nil {
		return err
	}
	current, err := p.hostPods.Pods(p.tr.HostNamespace).Get(want.Name)
	if err != nil {
		return err
	}
	if current.Annotations[AnnotationTenantUID] != string(pod.UID) {
		// The host pod is an earlier tenant pod's of the same name: this one is new.
		return p.CreatePod(ctx, pod)
	}
	pods := p.host.CoreV1().Pods(p.tr.HostNamespace)
	opts := metav1.UpdateOptions{FieldManager: fieldManager}
	current, err = p.writeHostPod(ctx, current, func(next *corev1.Pod) bool {
		// The tenant's init containers pair by their place in the tenant pod, whether or not
		// the host pod has the /etc/hosts writer (one made before KubeNest added it has none).
		nextInits, wantInits := tenantInitContainers(next), tenantInitContainers(want)
		next.Labels, next.Annotations = want.Labels, want.Annotations
		next.Spec.ActiveDeadlineSeconds = want.Spec.ActiveDeadlineSeconds
		for i := range min(len(next.Spec.Containers), len(want.Spec.Containers)) {
			next.Spec.Containers[i].Image = want.Spec.Containers[i].Image
		}
		for i := range min(len(nextInits), len(wantInits)) {
			nextInits[i].Image = wantInits[i].Image
		}
		return true
	}, func(next *corev1.Pod) (*corev1.Pod, error) { return pods.Update(ctx, next, opts) })
	if err != nil {
		return err
	}
	// An in-place resize of the tenant pod is one of the host pod, through its resize
	// subresource; the host's kubelet reports how it went in the status the tenant sees. One
	// that asks for more than the tenant's share has room for is not made, as a kubelet leaves
	// one its node has no room for.
	if resized := current.DeepCopy(); withResources(resized, want) {
		var full *quotaError
		if err := p.admit(pod.UID, podRequests(resized)); errors.As(err, &full) {
			p.recorder.Event(pod, corev1.EventTypeWarning, full.Reason(), "resize refused by the shared node: "+full.Error())
			return nil
		} else if err != nil {
			return err
		}
	}
	current, err = p.writeHostPod(ctx, current, func(next *corev1.Pod) bool { return withResources(next, want) },
		func(next *corev1.Pod) (*corev1.Pod, error) { return pods.UpdateResize(ctx, next.Name, next, opts) })
	if err != nil {
		p.forget(pod.UID)
	}
	if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
		p.recorder.Event(pod, corev1.EventTypeWarning, ReasonForbidden, "the host cluster refused the resize: "+err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("resizing host pod %s: %w", current.Name, err)
	}
	if len(want.Spec.EphemeralContainers) == 0 {
		return nil
	}
	// What a new ephemeral container refers to is copied first.
	if err := p.syncRefs(ctx, pod, want.Name, refs); err != nil {
		return err
	}
	return p.addEphemeralContainers(ctx, pod, current, want.Spec.EphemeralContainers)
}

// writeHostPod writes a copy of the host pod current that change changed (it returns false
// when there is nothing to write), again on the latest pod after a conflict with the host's
// kubelet writing the pod's status: an error here would fail the tenant pod
// (virtual-kubelet's handling of provider errors). It returns the pod written, or current.
func (p *provider) writeHostPod(ctx context.Context, current *corev1.Pod, change func(*corev1.Pod) bool, write func(*corev1.Pod) (*corev1.Pod, error)) (*corev1.Pod, error) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		next := current.DeepCopy()
		if !change(next) {
			return nil
		}
		written, err := write(next)
		if err == nil {
			current = written
		} else if apierrors.IsConflict(err) {
			if latest, getErr := p.host.CoreV1().Pods(p.tr.HostNamespace).Get(ctx, current.Name, metav1.GetOptions{}); getErr == nil {
				current = latest
			}
		}
		return err
	})
	return current, err
}

// DeletePod deletes the host pod, with the tenant pod's grace period. Its end is reported
// through NotifyPods when the host pod is gone.
func (p *provider) DeletePod(ctx context.Context, pod *corev1.Pod) error {
	p.mu.Lock()
	delete(p.refused, pod.Namespace+"/"+pod.Name)
	p.mu.Unlock()
	p.forget(pod.UID)
	hostName := HostName(p.tr.VirtualCluster, pod.Namespace, pod.Name)
	opts := metav1.DeleteOptions{GracePeriodSeconds: maxGrace(pod.DeletionGracePeriodSeconds)}
	if uid := pod.UID; uid != "" {
		if existing, err := p.hostPods.Pods(p.tr.HostNamespace).Get(hostName); err == nil && existing.Annotations[AnnotationTenantUID] != string(uid) {
			return errdefs.NotFoundf("host pod %s belongs to another tenant pod", hostName)
		}
	}
	err := p.host.CoreV1().Pods(p.tr.HostNamespace).Delete(ctx, hostName, opts)
	if apierrors.IsNotFound(err) {
		p.send(terminated(pod, "deleted"))
		return errdefs.NotFoundf("host pod %s", hostName)
	}
	return err
}

// GetPod returns the tenant pod as the host runs it: the tenant's spec with the host pod's
// images, deadline and status, and its metadata marked when the host pod's is out of date
// (tenantView), so virtual-kubelet sees what still has to change.
func (p *provider) GetPod(_ context.Context, namespace, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	refused := p.refused[namespace+"/"+name]
	p.mu.Unlock()
	if refused != nil {
		return refused.DeepCopy(), nil
	}
	host, err := p.hostPods.Pods(p.tr.HostNamespace).Get(HostName(p.tr.VirtualCluster, namespace, name))
	if apierrors.IsNotFound(err) {
		return nil, errdefs.NotFoundf("pod %s/%s", namespace, name)
	}
	if err != nil {
		return nil, err
	}
	tenant, err := p.tenantPods.Pods(namespace).Get(name)
	if err != nil {
		return minimalTenantPod(host), nil
	}
	if string(tenant.UID) != host.Annotations[AnnotationTenantUID] {
		// An earlier tenant pod's host pod (a StatefulSet's pod made again, say): the tenant
		// pod of this name has none yet, and CreatePod makes it once the earlier one is gone.
		return nil, errdefs.NotFoundf("pod %s/%s", namespace, name)
	}
	return p.tenantView(tenant, host), nil
}

// GetPodStatus returns the tenant view of a host pod's status.
func (p *provider) GetPodStatus(ctx context.Context, namespace, name string) (*corev1.PodStatus, error) {
	pod, err := p.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	return &pod.Status, nil
}

// GetPods lists every tenant pod that has a host pod.
func (p *provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	hosts, err := p.hostPods.Pods(p.tr.HostNamespace).List(labels.SelectorFromSet(HostSelector(p.tr.VirtualCluster)))
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, minimalTenantPod(h))
	}
	return out, nil
}

// withTenantOnly is a host container's resources with the extended resources only its tenant
// container has: the tenant's own accounting, which the host pod does not ask the host for
// (Translator.HostHas).
func withTenantOnly(host, tenant corev1.ResourceRequirements) corev1.ResourceRequirements {
	add := func(to, from corev1.ResourceList) corev1.ResourceList {
		for name, q := range from {
			if _, ok := to[name]; !ok && v1helper.IsExtendedResourceName(name) {
				if to == nil {
					to = corev1.ResourceList{}
				}
				to[name] = q
			}
		}
		return to
	}
	out := *host.DeepCopy()
	out.Limits, out.Requests = add(out.Limits, tenant.Limits), add(out.Requests, tenant.Requests)
	return out
}

// tenantView is the tenant pod with what the host pod really runs.
func (p *provider) tenantView(tenant, host *corev1.Pod) *corev1.Pod {
	out := tenant.DeepCopy()
	out.Status = TenantStatus(host)
	// A pod's QoS class never changes, and the tenant's apiserver set it from the tenant
	// pod's resources, which the host pod's may differ from (the /etc/hosts writer, extended
	// resources the host does not have).
	out.Status.QOSClass = tenant.Status.QOSClass
	if out.Status.ObservedGeneration == 0 {
		SetObservedGeneration(&out.Status, tenant.Status.ObservedGeneration)
	}
	for i := range out.Spec.Containers {
		if i < len(host.Spec.Containers) {
			out.Spec.Containers[i].Image = host.Spec.Containers[i].Image
			out.Spec.Containers[i].Resources = withTenantOnly(host.Spec.Containers[i].Resources, out.Spec.Containers[i].Resources)
		}
	}
	inits := tenantInitContainers(host)
	for i := range out.Spec.InitContainers {
		if i < len(inits) {
			out.Spec.InitContainers[i].Image = inits[i].Image
			out.Spec.InitContainers[i].Resources = withTenantOnly(inits[i].Resources, out.Spec.InitContainers[i].Resources)
		}
	}
	out.Spec.ActiveDeadlineSeconds = host.Spec.ActiveDeadlineSeconds
	// The ephemeral containers the host pod has: virtual-kubelet calls UpdatePod, which adds
	// them, while the tenant's has more.
	out.Spec.EphemeralContainers = slices.DeleteFunc(out.Spec.EphemeralContainers, func(ec corev1.EphemeralContainer) bool {
		return !slices.ContainsFunc(host.Spec.EphemeralContainers, func(h corev1.EphemeralContainer) bool { return h.Name == ec.Name })
	})
	if len(out.Spec.EphemeralContainers) == 0 {
		out.Spec.EphemeralContainers = nil
	}
	// The host pod carries the tenant's labels translated and none of its annotations, so they
	// are not read back; the host pod says instead (AnnotationTenantMetadata) which labels and
	// annotations of the tenant's it was made from. virtual-kubelet calls UpdatePod only when
	// this view differs from the tenant pod, so while the host pod was made from other ones,
	// the view's annotations are made to differ from the tenant's: that annotation is set to
	// what the host has, or removed if the tenant's own annotations hold that very value.
	if digest := host.Annotations[AnnotationTenantMetadata]; digest != MetadataDigest(tenant) {
		marker := "host:" + digest
		if out.Annotations == nil {
			out.Annotations = map[string]string{}
		}
		if v, ok := out.Annotations[AnnotationTenantMetadata]; ok && v == marker {
			delete(out.Annotations, AnnotationTenantMetadata)
		} else {
			out.Annotations[AnnotationTenantMetadata] = marker
		}
	}
	return out
}

// minimalTenantPod names the tenant pod a host pod runs, from its annotations.
func minimalTenantPod(host *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      host.Annotations[AnnotationTenantName],
			Namespace: host.Annotations[AnnotationTenantNamespace],
			UID:       types.UID(host.Annotations[AnnotationTenantUID]),
		},
		Status: TenantStatus(host),
	}
}

// deletedOnHost is the tenant pod, unchanged but marked deleted: virtual-kubelet deletes it in
// the tenant (it does so only for a status it already has), and its controller, if any,
// replaces it, as for a pod whose node went away.
func deletedOnHost(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	now := metav1.NewTime(time.Now().Add(-time.Second))
	out.DeletionTimestamp = &now
	out.DeletionGracePeriodSeconds = new(int64)
	return out
}

// terminated is the tenant pod with every container ended, the status virtual-kubelet waits
// for before it removes a pod the tenant deleted.
func terminated(pod *corev1.Pod, why string) *corev1.Pod {
	out := pod.DeepCopy()
	now := metav1.Now()
	for i := range out.Status.ContainerStatuses {
		cs := &out.Status.ContainerStatuses[i]
		if cs.State.Terminated == nil {
			cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 137, Reason: ReasonHostPodGone, Message: why, FinishedAt: now,
			}}
		}
		cs.Ready = false
	}
	return out
}

// onHostPod reports a host pod's change to the tenant.
func (p *provider) onHostPod(host *corev1.Pod) {
	ns, name := host.Annotations[AnnotationTenantNamespace], host.Annotations[AnnotationTenantName]
	if podutil.IsPodTerminal(host) {
		p.hostPodEnded()
	}
	tenant, err := p.tenantPods.Pods(ns).Get(name)
	if err != nil || string(tenant.UID) != host.Annotations[AnnotationTenantUID] {
		return
	}
	p.send(p.tenantView(tenant, host))
}

// onHostPodDeleted reports a host pod's end to the tenant.
func (p *provider) onHostPodDeleted(host *corev1.Pod) {
	ns, name := host.Annotations[AnnotationTenantNamespace], host.Annotations[AnnotationTenantName]
	tenant, err := p.tenantPods.Pods(ns).Get(name)
	if err != nil || string(tenant.UID) != host.Annotations[AnnotationTenantUID] {
		return
	}
	if tenant.DeletionTimestamp != nil {
		p.send(terminated(p.tenantView(tenant, host), "deleted"))
		return
	}
	if podutil.IsPodTerminal(tenant) {
		return // it ended as its status says; only its containers went (finished.go)
	}
	p.log.Info("host pod deleted; deleting its tenant pod", "pod", klog.KObj(tenant))
	p.send(deletedOnHost(tenant))
}

// GetContainerLogs streams a container's logs from the host pod.
func (p *provider) GetContainerLogs(ctx context.Context, namespace, podName, containerName string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	lo := &corev1.PodLogOptions{
		Container:  containerName,
		Follow:     opts.Follow,
		Previous:   opts.Previous,
		Timestamps: opts.Timestamps,
	}
	if opts.Tail > 0 {
		lo.TailLines = ptr.To[int64](int64(opts.Tail))
	}
	if opts.LimitBytes > 0 {
		lo.LimitBytes = ptr.To[int64](int64(opts.LimitBytes))
	}
	if opts.SinceSeconds > 0 {
		lo.SinceSeconds = ptr.To[int64](int64(opts.SinceSeconds))
	}
	if !opts.SinceTime.IsZero() {
		t := metav1.NewTime(opts.SinceTime)
		lo.SinceTime = &t
	}
	hostName := HostName(p.tr.VirtualCluster, namespace, podName)
	if _, err := p.hostPods.Pods(p.tr.HostNamespace).Get(hostName); apierrors.IsNotFound(err) {
		if tenant, err := p.tenantPods.Pods(namespace).Get(podName); err == nil {
			if gone := finishedLogsGone(tenant, p.finishedPods); gone != nil {
				return nil, errdefs.AsInvalidInput(gone) // 400: the apiserver passes its message on, as it does not a 404's
			}
		}
	}
	return p.host.CoreV1().Pods(p.tr.HostNamespace).GetLogs(hostName, lo).Stream(ctx)
}

// GetStatsSummary is not served: the host's kubelets hold the numbers.
func (p *provider) GetStatsSummary(context.Context) (*statsv1alpha1.Summary, error) {
	return nil, errdefs.InvalidInput("stats are not served by the shared node")
}

// GetMetricsResource is not served either.
func (p *provider) GetMetricsResource(context.Context) ([]*dto.MetricFamily, error) {
	return nil, errdefs.InvalidInput("metrics are not served by the shared node")
}
