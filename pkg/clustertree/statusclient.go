package clustertree

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// statusOnlyClient is the tenant client virtual-kubelet is given. virtual-kubelet writes a
// tenant pod's status with UpdateStatus of the whole pod the provider last reported, with the
// resourceVersion the tenant pod has now; and pods/status writes labels, annotations and
// finalizers too. So a label the tenant set after that report was undone, and the provider's
// view of a pod (tenantView's marker annotation) was written into the tenant pod. Through this
// client a pod status update writes the status only: the metadata is the tenant pod's own, as
// the tenant pod informer has it (resourceVersion included, so a pod changed since is a
// conflict, and virtual-kubelet writes the status again).
type statusOnlyClient struct {
	kubernetes.Interface
	// pods is the tenant pod informer's lister, set once virtual-kubelet made it.
	pods corev1listers.PodLister
}

func (c *statusOnlyClient) CoreV1() typedcorev1.CoreV1Interface {
	return statusOnlyCoreV1{CoreV1Interface: c.Interface.CoreV1(), client: c}
}

type statusOnlyCoreV1 struct {
	typedcorev1.CoreV1Interface
	client *statusOnlyClient
}

func (c statusOnlyCoreV1) Pods(namespace string) typedcorev1.PodInterface {
	return statusOnlyPods{PodInterface: c.CoreV1Interface.Pods(namespace), namespace: namespace, client: c.client}
}

type statusOnlyPods struct {
	typedcorev1.PodInterface
	namespace string
	client    *statusOnlyClient
}

func (p statusOnlyPods) UpdateStatus(ctx context.Context, pod *corev1.Pod, opts metav1.UpdateOptions) (*corev1.Pod, error) {
	if p.client.pods != nil {
		current, err := p.client.pods.Pods(p.namespace).Get(pod.Name)
		if err != nil {
			return nil, err
		}
		pod = &corev1.Pod{TypeMeta: pod.TypeMeta, ObjectMeta: *current.ObjectMeta.DeepCopy(), Spec: pod.Spec, Status: pod.Status}
	}
	return p.PodInterface.UpdateStatus(ctx, pod, opts)
}
