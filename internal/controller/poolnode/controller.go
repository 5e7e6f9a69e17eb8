// Package poolnode reconciles PoolNodes: it makes one for every host Node opted in to lending,
// drains a node lent to a tenant, hands its node agent what it needs to join the tenant, and
// brings it back into the host when the tenant gives it back.
package poolnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubectl/pkg/drain"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// FieldOwner is the server-side apply field manager of this controller.
const FieldOwner = "kubenest-poolnode"

// Named requeue intervals.
const (
	// drainRetryInterval: pods are being evicted, or a PodDisruptionBudget holds one.
	drainRetryInterval = 2 * time.Second
	// switchRetryInterval: the node agent is moving the kubelet.
	switchRetryInterval = 2 * time.Second
	// steadyInterval: nothing to do; the agent's heartbeat is checked again.
	steadyInterval = 30 * time.Second
)

// Reconciler reconciles PoolNodes, keyed by node name.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	// Kube reaches the host for draining (evictions).
	Kube kubernetes.Interface
	// Namespace is the operator's namespace, where join Secrets live.
	Namespace string
	// ClusterDomain is the tenants' DNS domain, for lent kubelets; their cluster DNS address
	// comes from each tenant's Service range.
	ClusterDomain string
	// Tenants reaches tenants' apiservers, with what the VirtualCluster reconciler loaded.
	Tenants  *tenantclient.Registry
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	// AgentTimeout is how long a node agent may stay silent before its node is Unreachable.
	AgentTimeout time.Duration
}

// +kubebuilder:rbac:groups=kubenest.io,resources=poolnodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kubenest.io,resources=poolnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups="",resources=pods/eviction,verbs=create
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch;delete

// SetupWithManager registers the controller: a PoolNode and its Node share a name, so both
// wake the same key.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	if r.AgentTimeout == 0 {
		r.AgentTimeout = 2 * time.Minute
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.PoolNode{}).
		Watches(&corev1.Node{}, &handler.EnqueueRequestForObject{}).
		WithOptions(opts).
		Named("poolnode").
		Complete(r)
}

// Reconcile brings one lendable node where its PoolNode says.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := r.Client.Get(ctx, req.NamespacedName, node); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		node = nil
	}
	pn := &v1alpha1.PoolNode{}
	if err := r.Client.Get(ctx, req.NamespacedName, pn); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		return reconcile.Result{}, r.adopt(ctx, node)
	}
	if node != nil && node.Labels[v1alpha1.LabelLendable] != "true" && pn.Spec.Tenant == nil && nodepool.InHost(pn) {
		// No longer lendable, and home: the PoolNode goes.
		ctrl.LoggerFrom(ctx).Info("node is no longer lendable; deleting its PoolNode")
		return reconcile.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, pn))
	}
	if err := r.ensureJoinAccess(ctx, pn); err != nil {
		return reconcile.Result{}, err
	}

	if err := r.markClean(ctx, pn); err != nil {
		return reconcile.Result{}, err
	}
	before := pn.DeepCopy()
	now := r.Clock.Now()
	conds := conditionsOf(pn, now)
	result, drained, err := r.reconcileNode(ctx, pn, node, conds)
	conds.reporting(pn, now, r.AgentTimeout)
	conds.clean(pn)
	pn.Status.Phase = nodepool.Phase(pn, drained, now, r.AgentTimeout)
	// The conditions go as one list, so the write must not land on a status that changed since
	// the read (a quarantine set meanwhile would be left with Clean=True). A conflict is no
	// error: the change that caused it is an event that reconciles the node again. The lock is
	// on what pn last read, which reconcileNode's own writes move on.
	before.ResourceVersion = pn.ResourceVersion
	perr := r.Client.Status().Patch(ctx, pn, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(perr):
		return result, err
	case client.IgnoreNotFound(perr) != nil:
		err = errors.Join(err, fmt.Errorf("patching status: %w", perr))
	}
	if before.Status.Phase != pn.Status.Phase {
		ctrl.LoggerFrom(ctx).Info("node phase changed", "from", before.Status.Phase, "to", pn.Status.Phase)
		r.Recorder.Eventf(pn, nil, corev1.EventTypeNormal, string(pn.Status.Phase), "Reconcile", "node is now %s", pn.Status.Phase)
	}
	if err != nil {
		return reconcile.Result{}, err // retried with backoff
	}
	if result.RequeueAfter == 0 {
		result.RequeueAfter = steadyInterval
	}
	return result, nil
}

// reconcileNode takes the node one step towards where its PoolNode says, and reports whether
// the host's pods are drained from it.
func (r *Reconciler) reconcileNode(ctx context.Context, pn *v1alpha1.PoolNode, node *corev1.Node, conds conditionSetter) (reconcile.Result, bool, error) {
	t := pn.Spec.Tenant
	switch {
	case t != nil && nodepool.InTenant(pn, t):
		ready, where := r.tenantNodeReady(ctx, t, pn.Name)
		conds.kubeletReady(ready, where)
		if !ready {
			// Tenant Nodes are not watched: look again soon while the kubelet registers.
			return reconcile.Result{RequeueAfter: switchRetryInterval}, true, nil
		}
		return reconcile.Result{}, true, nil

	case t != nil && pn.Spec.JoinSecretName == "":
		// Lent, not yet drained: cordon, evict, then hand the agent the join Secret.
		vc, err := r.tenant(ctx, t)
		if err != nil || vc == nil {
			return reconcile.Result{}, false, err
		}
		if node == nil {
			conds.Set(v1alpha1.PoolNodeConditionDrained, false, "NodeMissing", "the host has no Node of this name")
			return reconcile.Result{RequeueAfter: steadyInterval}, false, nil
		}
		if cp, err := r.controlPlaneOn(ctx, node.Name); err != nil || cp != "" {
			if err != nil {
				return reconcile.Result{}, false, err
			}
			// Picked while that pod was being scheduled there: the node is given back rather
			// than the pod evicted (an ephemeral etcd would lose its data). The tenant is
			// offered another node, if there is one.
			return reconcile.Result{}, false, r.refuseLending(ctx, pn, t, cp)
		}
		remaining, why, err := r.drain(ctx, node)
		if err != nil {
			return reconcile.Result{}, false, err
		}
		if remaining > 0 || why != "" {
			conds.Set(v1alpha1.PoolNodeConditionDrained, false, "Evicting", fmt.Sprintf("%d pods left to evict%s", remaining, withWhy(why)))
			return reconcile.Result{RequeueAfter: drainRetryInterval}, false, nil
		}
		// Claimed by a new tenant as soon as its agent said "home", the node may not have been
		// seen home here: forget the tenant it served before, as coming home does, before its
		// join Secret is rewritten for the new one.
		if err := r.forgetTenant(ctx, pn.Name, vc.UID); err != nil {
			return reconcile.Result{}, false, err
		}
		name, err := r.ensureJoinSecret(ctx, pn, vc)
		if err != nil {
			return reconcile.Result{}, true, err
		}
		patch := client.MergeFrom(pn.DeepCopy())
		pn.Spec.JoinSecretName = name
		if err := r.Client.Patch(ctx, pn, patch); err != nil {
			return reconcile.Result{}, true, err
		}
		// After the patch: its answer carries the stored status, which would drop this.
		conds.Set(v1alpha1.PoolNodeConditionDrained, true, "Drained", "the host's pods are gone from the node (DaemonSet pods stay)")
		ctrl.LoggerFrom(ctx).Info("node drained; its agent may join the tenant", "tenant", nodepool.TenantKey(t))
		return reconcile.Result{RequeueAfter: switchRetryInterval}, true, nil

	case t != nil:
		// The agent is moving the kubelet to the tenant; keep its bootstrap token fresh.
		vc, err := r.tenant(ctx, t)
		if err != nil || vc == nil {
			return reconcile.Result{}, true, err
		}
		if _, err := r.ensureJoinSecret(ctx, pn, vc); err != nil {
			return reconcile.Result{}, true, err
		}
		conds.Set(v1alpha1.PoolNodeConditionKubeletReady, false, "Joining", "the node agent is moving the kubelet to the tenant"+agentSays(pn))
		return reconcile.Result{RequeueAfter: switchRetryInterval}, true, nil

	case pn.Spec.JoinSecretName != "":
		// Given back: the agent returns the kubelet once the join Secret is no longer named.
		patch := client.MergeFrom(pn.DeepCopy())
		pn.Spec.JoinSecretName = ""
		if err := r.Client.Patch(ctx, pn, patch); err != nil {
			return reconcile.Result{}, false, err
		}
		ctrl.LoggerFrom(ctx).Info("node given back; its agent returns the kubelet to the host")
		return reconcile.Result{RequeueAfter: switchRetryInterval}, false, nil

	case nodepool.Quarantined(pn) && !nodepool.OutOfService(pn):
		conds.Set(v1alpha1.PoolNodeConditionKubeletReady, false, "Quarantining",
			"the node agent is stopping the kubelet: the node is quarantined and serves no cluster until it is marked clean"+agentSays(pn))
		return reconcile.Result{RequeueAfter: switchRetryInterval}, false, nil

	case nodepool.Quarantined(pn):
		// Out of the tenant, and out of the host's service too: the node stays cordoned, its
		// kubelet stopped, until the platform reimages it and marks it clean.
		if err := r.forgetTenant(ctx, pn.Name, ""); err != nil {
			return reconcile.Result{}, false, err
		}
		conds.Set(v1alpha1.PoolNodeConditionKubeletReady, false, "Quarantined", "the kubelet serves no cluster until the node is marked clean")
		meta.RemoveStatusCondition(&pn.Status.Conditions, v1alpha1.PoolNodeConditionDrained)
		return reconcile.Result{}, false, nil

	case !nodepool.InHost(pn):
		conds.Set(v1alpha1.PoolNodeConditionKubeletReady, false, "Returning", "the node agent is moving the kubelet back to the host"+agentSays(pn))
		return reconcile.Result{RequeueAfter: switchRetryInterval}, false, nil

	default:
		// Home: forget the tenant, and let the host schedule onto the node again.
		if err := r.forgetTenant(ctx, pn.Name, ""); err != nil {
			return reconcile.Result{}, false, err
		}
		if node != nil {
			if err := r.uncordon(ctx, node); err != nil {
				return reconcile.Result{}, false, err
			}
			conds.kubeletReady(nodeReady(node), "the kubelet serves the host")
		}
		meta.RemoveStatusCondition(&pn.Status.Conditions, v1alpha1.PoolNodeConditionDrained)
		return reconcile.Result{}, false, nil
	}
}

// markClean ends a node's quarantine when the platform marks it clean (AnnotationMarkClean):
// the status forgets it, the annotation goes, and the node agent brings the kubelet back to the
// host (or, on a reimaged machine, finds it there already).
func (r *Reconciler) markClean(ctx context.Context, pn *v1alpha1.PoolNode) error {
	if _, ok := pn.Annotations[v1alpha1.AnnotationMarkClean]; !ok {
		return nil
	}
	if q := pn.Status.Quarantine; q != nil {
		patch := client.MergeFromWithOptions(pn.DeepCopy(), client.MergeFromWithOptimisticLock{})
		SetQuarantine(pn, nil, r.Clock.Now())
		if err := r.Client.Status().Patch(ctx, pn, patch); err != nil {
			return fmt.Errorf("clearing the quarantine: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("node marked clean; its quarantine ends", "lentTo", nodepool.TenantKey(&q.Tenant))
		r.Recorder.Eventf(pn, nil, corev1.EventTypeNormal, "MarkedClean", "Reconcile",
			"marked clean: the quarantine that began when the node was lent to %s ends", nodepool.TenantKey(&q.Tenant))
	}
	patch := client.MergeFrom(pn.DeepCopy())
	delete(pn.Annotations, v1alpha1.AnnotationMarkClean)
	if err := r.Client.Patch(ctx, pn, patch); err != nil {
		return fmt.Errorf("removing annotation %s: %w", v1alpha1.AnnotationMarkClean, err)
	}
	return nil
}

// controlPlaneOn names a tenant etcd or control-plane pod that runs on the node, if any.
func (r *Reconciler) controlPlaneOn(ctx context.Context, node string) (string, error) {
	pods, err := cpnamespace.ControlPlanePods(ctx, r.Client)
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.Spec.NodeName == node {
			return "pod " + p.Namespace + "/" + p.Name, nil
		}
	}
	return "", nil
}

// refuseLending gives back a node that was picked for a tenant but runs a tenant's control
// plane (cp), with an event saying so.
func (r *Reconciler) refuseLending(ctx context.Context, pn *v1alpha1.PoolNode, t *v1alpha1.TenantReference, cp string) error {
	patch := client.MergeFromWithOptions(pn.DeepCopy(), client.MergeFromWithOptimisticLock{})
	pn.Spec.Tenant = nil
	if err := r.Client.Patch(ctx, pn, patch); err != nil {
		return fmt.Errorf("giving the node back: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("not lending the node: it runs a tenant's control plane", "tenant", nodepool.TenantKey(t), "pod", cp)
	r.Recorder.Eventf(pn, nil, corev1.EventTypeWarning, "ControlPlaneOnNode", "Drain",
		"not lent to %s: the node runs %s, a tenant's control plane, which lending would evict", nodepool.TenantKey(t), cp)
	return nil
}

// adopt makes a PoolNode for a Node labelled lendable; the Node owns it.
func (r *Reconciler) adopt(ctx context.Context, node *corev1.Node) error {
	if node == nil || node.Labels[v1alpha1.LabelLendable] != "true" {
		return nil
	}
	pn := &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{
		Name: node.Name,
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
		}},
	}}
	if err := r.Client.Create(ctx, pn, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating PoolNode: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("node is lendable; created its PoolNode")
	return nil
}

// ensureJoinAccess lets the node itself read its join Secret, and only that Secret: its node
// agent runs with the node's own host credentials.
func (r *Reconciler) ensureJoinAccess(ctx context.Context, pn *v1alpha1.PoolNode) error {
	name := "kubenest-node-agent:" + pn.Name
	owner := []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PoolNode", Name: pn.Name, UID: pn.UID}}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace, OwnerReferences: owner},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"},
			ResourceNames: []string{nodepool.JoinSecretName(pn.Name)},
		}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.Namespace, OwnerReferences: owner},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "system:node:" + pn.Name}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := ssa.Apply(ctx, r.Client, o, FieldOwner); err != nil {
			return err
		}
	}
	return nil
}

// tenant returns the VirtualCluster t names, or nil (and clears the assignment) when it is
// gone or is another one of the same name.
func (r *Reconciler) tenant(ctx context.Context, t *v1alpha1.TenantReference) (*v1alpha1.VirtualCluster, error) {
	vc := &v1alpha1.VirtualCluster{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: t.Namespace, Name: t.Name}, vc)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	if err == nil && vc.UID == t.UID {
		return vc, nil
	}
	return nil, nil
}

// drain cordons the node and evicts the host's pods from it through the eviction API, so
// PodDisruptionBudgets hold; DaemonSet and mirror pods stay. It reports how many pods are left
// and, if something blocks, why.
func (r *Reconciler) drain(ctx context.Context, node *corev1.Node) (int, string, error) {
	if !node.Spec.Unschedulable {
		patch := client.MergeFrom(node.DeepCopy())
		node.Spec.Unschedulable = true
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		node.Annotations[v1alpha1.AnnotationCordoned] = "true"
		if err := r.Client.Patch(ctx, node, patch); err != nil {
			return 0, "", fmt.Errorf("cordoning node: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("cordoned the node")
	}
	helper := &drain.Helper{
		Ctx: ctx, Client: r.Kube, GracePeriodSeconds: -1,
		IgnoreAllDaemonSets: true, DeleteEmptyDirData: true,
		Out: io.Discard, ErrOut: io.Discard,
	}
	list, errs := helper.GetPodsForDeletion(node.Name)
	if len(errs) > 0 {
		// Pods no controller would recreate, for one: lending the node would lose them.
		return 0, utilErrors(errs), nil
	}
	var blocked []string
	pods := list.Pods()
	for _, pod := range pods {
		if pod.DeletionTimestamp != nil {
			continue
		}
		err := r.evict(ctx, pod)
		switch {
		case err == nil || apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			blocked = append(blocked, pod.Namespace+"/"+pod.Name)
		default:
			return 0, "", fmt.Errorf("evicting pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	why := ""
	if len(blocked) > 0 {
		why = "a PodDisruptionBudget does not allow evicting " + strings.Join(blocked, ", ") + " yet"
	}
	return len(pods), why, nil
}

// evict asks the API server to evict a pod, once. A PodDisruptionBudget's refusal comes with
// "retry after 10s", which client-go would honour ten times over; the reconciler comes back
// on its own schedule instead.
func (r *Reconciler) evict(ctx context.Context, pod corev1.Pod) error {
	eviction := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace},
		DeleteOptions: &metav1.DeleteOptions{},
	}
	return r.Kube.PolicyV1().RESTClient().Post().MaxRetries(0).AbsPath("/api/v1").
		Namespace(pod.Namespace).Resource("pods").Name(pod.Name).SubResource("eviction").
		Body(eviction).Do(ctx).Error()
}

func (r *Reconciler) uncordon(ctx context.Context, node *corev1.Node) error {
	if node.Annotations[v1alpha1.AnnotationCordoned] != "true" {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	node.Spec.Unschedulable = false
	delete(node.Annotations, v1alpha1.AnnotationCordoned)
	if err := r.Client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("uncordoning node: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("the node is back in the host; uncordoned it")
	return nil
}

func (r *Reconciler) tenantNodeReady(ctx context.Context, t *v1alpha1.TenantReference, name string) (bool, string) {
	vc, err := r.tenant(ctx, t)
	if err != nil || vc == nil {
		return false, "the tenant cannot be read"
	}
	if vc.Spec.Sleep.Asleep {
		return false, "the tenant " + nodepool.TenantKey(t) + " is asleep; the kubelet reconnects when it wakes"
	}
	cs, err := r.Tenants.Clientset(vc)
	if err != nil {
		return false, "the tenant cannot be reached: " + err.Error()
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, "the tenant has no Node " + name + " yet"
	}
	return nodeReady(n), "the kubelet serves the tenant " + nodepool.TenantKey(t)
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func agentSays(pn *v1alpha1.PoolNode) string {
	a := pn.Status.Agent
	if a.Step == "" && a.Message == "" {
		return ""
	}
	return fmt.Sprintf(" (agent: step %q, %s)", a.Step, a.Message)
}

func withWhy(why string) string {
	if why == "" {
		return ""
	}
	return "; " + why
}

func utilErrors(errs []error) string {
	var msgs []string
	for _, e := range errs {
		msgs = append(msgs, e.Error())
	}
	return strings.Join(msgs, "; ")
}
