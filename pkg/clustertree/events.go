package clustertree

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// The host kubelet's events about a host pod (pulling, started, back-off, probe failures,
// killing, ...) are the tenant pod's events in the tenant, as its own kubelet's would be:
// with the tenant pod as the object, the tenant's names in the message, and the virtual node
// as the source. Only the kubelet's events about this tenant's host pods are passed on (the
// host's scheduler and controllers speak of host matters), and the tenant's event recorder
// rate-limits and aggregates them like any.

// mirrorHostEvents passes the host kubelet's events about this tenant's host pods to the
// tenant until ctx ends. Events older than since (made before this run) are not passed again.
func (p *provider) mirrorHostEvents(ctx context.Context, host kubernetes.Interface, since time.Time) error {
	factory := informers.NewSharedInformerFactoryWithOptions(host, 0, informers.WithNamespace(p.tr.HostNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.Set{"involvedObject.kind": "Pod", "source": "kubelet"}.String()
		}),
		informers.WithTransform(slimEvent))
	_, err := factory.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if ev, ok := obj.(*corev1.Event); ok {
				p.mirrorHostEvent(ev, since)
			}
		},
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Event)
			ev, ok2 := obj.(*corev1.Event)
			if ok1 && ok2 && o.ResourceVersion != ev.ResourceVersion {
				p.mirrorHostEvent(ev, since)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// maxEventMessage bounds an event's message as the mirror keeps it: a kubelet's are a line or
// two, and the namespace's users may write events of any length (core/v1 sets no bound), which
// every VirtualCluster of the namespace would otherwise hold in the operator's memory.
const maxEventMessage = 1024

// slimEvent keeps of an event what mirrorHostEvent reads.
func slimEvent(obj any) (any, error) {
	ev, ok := obj.(*corev1.Event)
	if !ok {
		return obj, nil
	}
	msg := ev.Message
	if len(msg) > maxEventMessage {
		msg = strings.ToValidUTF8(msg[:maxEventMessage], "")
	}
	out := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: ev.Name, Namespace: ev.Namespace, UID: ev.UID,
			ResourceVersion: ev.ResourceVersion, CreationTimestamp: ev.CreationTimestamp},
		InvolvedObject: corev1.ObjectReference{Kind: ev.InvolvedObject.Kind, Name: ev.InvolvedObject.Name,
			UID: ev.InvolvedObject.UID, FieldPath: ev.InvolvedObject.FieldPath},
		Type: ev.Type, Reason: ev.Reason, Message: msg,
		LastTimestamp: ev.LastTimestamp, EventTime: ev.EventTime,
	}
	if ev.Series != nil {
		out.Series = &corev1.EventSeries{LastObservedTime: ev.Series.LastObservedTime}
	}
	return out, nil
}

// mirrorHostEvent records one host kubelet event on the tenant pod its host pod runs.
func (p *provider) mirrorHostEvent(ev *corev1.Event, since time.Time) {
	if last := eventTime(ev); last.Before(since) {
		return
	}
	hostPod, err := p.hostPods.Pods(p.tr.HostNamespace).Get(ev.InvolvedObject.Name)
	if err != nil || (ev.InvolvedObject.UID != "" && ev.InvolvedObject.UID != hostPod.UID) {
		return // not a host pod of this tenant's
	}
	if ev.Type == corev1.EventTypeNormal && writesEtcHosts(hostPod) && ev.InvolvedObject.FieldPath == "spec.initContainers{"+EtcHostsName+"}" {
		return // the /etc/hosts writer is not the tenant's; only its trouble is told
	}
	tenant := minimalTenantPod(hostPod)
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: tenant.Namespace, Name: tenant.Name, UID: tenant.UID,
		FieldPath: ev.InvolvedObject.FieldPath}
	p.recorder.Event(ref, ev.Type, ev.Reason, tenantMessage(ev.Message, hostPod, tenant.Namespace, tenant.Name, tenant.UID))
}

// tenantMessage is a host kubelet's message with the host pod's names put back as the
// tenant's: the kubelet writes "<pod>_<namespace>(<uid>)" in some, the pod's name in others.
func tenantMessage(msg string, hostPod *corev1.Pod, namespace, name string, uid types.UID) string {
	return strings.NewReplacer(
		hostPod.Name+"_"+hostPod.Namespace+"("+string(hostPod.UID)+")", name+"_"+namespace+"("+string(uid)+")",
		string(hostPod.UID), string(uid),
		hostPod.Name, name,
	).Replace(msg)
}

func eventTime(ev *corev1.Event) time.Time {
	switch {
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	case ev.Series != nil:
		return ev.Series.LastObservedTime.Time
	}
	return ev.CreationTimestamp.Time
}
