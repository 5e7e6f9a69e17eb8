package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	rbacclient "k8s.io/client-go/kubernetes/typed/rbac/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/klog/v2"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
	schedulingrest "k8s.io/kubernetes/pkg/registry/scheduling/rest"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// The apiserver's bootstrap objects: the RBAC roles and bindings of Kubernetes' own
// components, and the two system PriorityClasses. Upstream's post-start hooks that create them
// (rbac/bootstrap-roles, scheduling/bootstrap-system-priority-classes) start with a one-second
// sleep (wait.Poll), and /readyz, which the tenant's components and the operator wait for,
// waits for them: every other check passes within 0.3 s of the apiserver serving, so the
// sleep was a second of every tenant's creation. These hooks do the same work from their
// first try, retrying every 200 ms within upstream's 30 s.
var replacedHooks = []string{rbacrest.PostStartHookName, schedulingrest.PostStartHookName}

const (
	bootstrapRetry    = 200 * time.Millisecond
	bootstrapTimeout  = 30 * time.Second // upstream's; after it the apiserver exits
	bootstrapParallel = 8                // objects reconciled at a time
)

// addBootstrapHooks adds the hooks that replace upstream's (see replacedHooks) to s.
func addBootstrapHooks(s *genericapiserver.GenericAPIServer) {
	s.AddPostStartHookOrDie("kubenest/bootstrap-roles", bootstrapHook("RBAC roles and bindings", bootstrapRBAC))
	s.AddPostStartHookOrDie("kubenest/bootstrap-system-priority-classes", bootstrapHook("system PriorityClasses", bootstrapPriorityClasses))
}

// bootstrapHook runs ensure with the apiserver's loopback client until it succeeds; like
// upstream, it fails the apiserver if that takes longer than bootstrapTimeout.
func bootstrapHook(what string, ensure func(context.Context, kubernetes.Interface) error) genericapiserver.PostStartHookFunc {
	return func(hook genericapiserver.PostStartHookContext) error {
		client, err := kubernetes.NewForConfig(hook.LoopbackClientConfig)
		if err != nil {
			return fmt.Errorf("loopback client: %w", err)
		}
		start := time.Now()
		var last error
		err = wait.PollUntilContextTimeout(hook, bootstrapRetry, bootstrapTimeout, true, func(ctx context.Context) (bool, error) {
			last = ensure(ctx, client)
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("creating the %s: %w (last error: %v)", what, err, last)
		}
		klog.InfoS("Bootstrap objects in place", "objects", what, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
}

// bootstrapRBAC creates the bootstrap roles and bindings, Kubernetes' and KubeNest's own
// users' (controlplane.TenantClusterRoles), that are missing and adds what is missing to those
// that exist, as upstream's hook does (reconciliation is upstream's), several at a time.
// Upstream reads each object before it reconciles it: about 130 reads, 1.2 s of every
// apiserver start on existing data (a tenant waking from sleep) with 8 at a time. Here one
// LIST of each kind (listedRBAC) answers every object's first read, so a restart that finds
// them all in place writes nothing and reads 2 + 2 per namespace; a retry after a conflict
// reads the object from the API again.
// Not done: upstream's one-time copies of roles from before Kubernetes 1.9
// (ClusterRolesToAggregate, ClusterRoleBindingsToSplit), which a tenant's etcd, always
// written by a later version, never holds.
func bootstrapRBAC(ctx context.Context, client kubernetes.Interface) error {
	rbac, namespaces := client.RbacV1(), client.CoreV1().Namespaces()
	listed, err := listRBAC(ctx, rbac, slices.Concat(slices.Collect(maps.Keys(bootstrappolicy.NamespaceRoles())), slices.Collect(maps.Keys(bootstrappolicy.NamespaceRoleBindings()))))
	if err != nil {
		return err
	}
	var tasks []func() error
	role := func(role reconciliation.RuleOwner, c reconciliation.RuleOwnerModifier) {
		c = listedRoles{c, firstRead(listed.roles, role.GetNamespace(), role.GetName(), c.Get)}
		tasks = append(tasks, func() error {
			r, err := (&reconciliation.ReconcileRoleOptions{Role: role, Client: c, Confirm: true}).Run()
			if err == nil && r.Protected && r.Operation != reconciliation.ReconcileNone {
				klog.InfoS("Skipped a reconcile-protected bootstrap role that lacks permissions", "namespace", role.GetNamespace(), "name", role.GetName())
			}
			return err
		})
	}
	binding := func(binding reconciliation.RoleBinding, c reconciliation.RoleBindingModifier) {
		c = listedBindings{c, firstRead(listed.bindings, binding.GetNamespace(), binding.GetName(), c.Get)}
		tasks = append(tasks, func() error {
			r, err := (&reconciliation.ReconcileRoleBindingOptions{RoleBinding: binding, Client: c, Confirm: true}).Run()
			if err == nil && r.Protected && r.Operation != reconciliation.ReconcileNone {
				klog.InfoS("Skipped a reconcile-protected bootstrap binding that lacks subjects", "namespace", binding.GetNamespace(), "name", binding.GetName())
			}
			return err
		})
	}
	for _, r := range slices.Concat(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles(), controlplane.TenantClusterRoles()) {
		role(reconciliation.ClusterRoleRuleOwner{ClusterRole: &r}, reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()})
	}
	for _, b := range slices.Concat(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings(), controlplane.TenantClusterRoleBindings()) {
		binding(reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b}, reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()})
	}
	for _, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			role(reconciliation.RoleRuleOwner{Role: &r}, reconciliation.RoleModifier{Client: rbac, NamespaceClient: namespaces})
		}
	}
	for _, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, b := range bindings {
			binding(reconciliation.RoleBindingAdapter{RoleBinding: &b}, reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: namespaces})
		}
	}
	errs := make([]error, len(tasks)) // each task's own, so that none stops the others
	var g errgroup.Group
	g.SetLimit(bootstrapParallel)
	for i, task := range tasks {
		g.Go(func() error {
			// Retried as upstream's hook does: on a conflict, and on the 503 of an apiserver
			// still updating its storage versions.
			errs[i] = retry.OnError(retry.DefaultBackoff, func(err error) bool {
				return apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err)
			}, task)
			return nil
		})
	}
	_ = g.Wait()
	return errors.Join(errs...)
}

// listedRBAC is what one LIST of each kind found: the bootstrap roles' and bindings' kinds,
// cluster-wide and in the namespaces that hold bootstrap objects, keyed "namespace/name".
type listedRBAC struct {
	roles    map[string]reconciliation.RuleOwner
	bindings map[string]reconciliation.RoleBinding
}

func listRBAC(ctx context.Context, rbac rbacclient.RbacV1Interface, namespaces []string) (listedRBAC, error) {
	l := listedRBAC{roles: map[string]reconciliation.RuleOwner{}, bindings: map[string]reconciliation.RoleBinding{}}
	clusterRoles, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return l, fmt.Errorf("listing ClusterRoles: %w", err)
	}
	for i := range clusterRoles.Items {
		l.roles["/"+clusterRoles.Items[i].Name] = reconciliation.ClusterRoleRuleOwner{ClusterRole: &clusterRoles.Items[i]}
	}
	clusterBindings, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return l, fmt.Errorf("listing ClusterRoleBindings: %w", err)
	}
	for i := range clusterBindings.Items {
		l.bindings["/"+clusterBindings.Items[i].Name] = reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &clusterBindings.Items[i]}
	}
	slices.Sort(namespaces)
	for _, ns := range slices.Compact(namespaces) {
		roles, err := rbac.Roles(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return l, fmt.Errorf("listing the Roles of namespace %s: %w", ns, err)
		}
		for i := range roles.Items {
			l.roles[ns+"/"+roles.Items[i].Name] = reconciliation.RoleRuleOwner{Role: &roles.Items[i]}
		}
		bindings, err := rbac.RoleBindings(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return l, fmt.Errorf("listing the RoleBindings of namespace %s: %w", ns, err)
		}
		for i := range bindings.Items {
			l.bindings[ns+"/"+bindings.Items[i].Name] = reconciliation.RoleBindingAdapter{RoleBinding: &bindings.Items[i]}
		}
	}
	return l, nil
}

// firstRead answers the first read of namespace/name from listed (not found if the LIST did
// not hold it), and every later one, as reconciliation makes after a write failed, with get.
// One reconciliation runs at a time per object.
func firstRead[T any](listed map[string]T, namespace, name string, get func(namespace, name string) (T, error)) func(namespace, name string) (T, error) {
	read := false
	return func(ns, n string) (T, error) {
		if read || ns != namespace || n != name {
			return get(ns, n)
		}
		read = true
		if obj, ok := listed[namespace+"/"+name]; ok {
			return obj, nil
		}
		var none T
		return none, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName}, name)
	}
}

type listedRoles struct {
	reconciliation.RuleOwnerModifier
	get func(namespace, name string) (reconciliation.RuleOwner, error)
}

func (c listedRoles) Get(namespace, name string) (reconciliation.RuleOwner, error) {
	return c.get(namespace, name)
}

type listedBindings struct {
	reconciliation.RoleBindingModifier
	get func(namespace, name string) (reconciliation.RoleBinding, error)
}

func (c listedBindings) Get(namespace, name string) (reconciliation.RoleBinding, error) {
	return c.get(namespace, name)
}

// bootstrapPriorityClasses creates system-cluster-critical and system-node-critical.
func bootstrapPriorityClasses(ctx context.Context, client kubernetes.Interface) error {
	for _, pc := range schedulingapiv1.SystemPriorityClasses() {
		_, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("PriorityClass %s: %w", pc.Name, err)
		}
	}
	return nil
}
