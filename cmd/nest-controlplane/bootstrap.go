package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
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
// that exist, as upstream's hook does (reconciliation is upstream's), several at a time: one
// after another, the ~130 reads and writes of a new tenant took a second.
// Not done: upstream's one-time copies of roles from before Kubernetes 1.9
// (ClusterRolesToAggregate, ClusterRoleBindingsToSplit), which a tenant's etcd, always
// written by a later version, never holds.
func bootstrapRBAC(_ context.Context, client kubernetes.Interface) error {
	rbac, namespaces := client.RbacV1(), client.CoreV1().Namespaces()
	var tasks []func() error
	// A new tenant has none of them: each is created first, which saves the read that
	// reconciliation starts with, and reconciled only if that fails (it exists, say).
	role := func(role reconciliation.RuleOwner, c reconciliation.RuleOwnerModifier) {
		tasks = append(tasks, func() error {
			if _, err := c.Create(role); err == nil {
				return nil
			}
			r, err := (&reconciliation.ReconcileRoleOptions{Role: role, Client: c, Confirm: true}).Run()
			if err == nil && r.Protected && r.Operation != reconciliation.ReconcileNone {
				klog.InfoS("Skipped a reconcile-protected bootstrap role that lacks permissions", "namespace", role.GetNamespace(), "name", role.GetName())
			}
			return err
		})
	}
	binding := func(binding reconciliation.RoleBinding, c reconciliation.RoleBindingModifier) {
		tasks = append(tasks, func() error {
			if _, err := c.Create(binding); err == nil {
				return nil
			}
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
