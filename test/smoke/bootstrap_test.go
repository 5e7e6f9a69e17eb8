package smoke

import (
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// TestBootstrapOnRestart restarts a tenant's control plane on its existing data, as a wake
// from sleep does, after a tenant admin changed Kubernetes' bootstrap RBAC: the apiserver puts back
// what was taken (a deleted role and binding, a rule removed) before it is ready, and leaves
// alone what the admin protected with rbac.authorization.kubernetes.io/autoupdate: "false".
func TestBootstrapOnRestart(t *testing.T) {
	tenant, cfg, client, ctx := readyTenant(t, "restart", "6b1f7a52-0000-4000-8000-000000000005")
	roles, bindings := client.RbacV1().ClusterRoles(), client.RbacV1().ClusterRoleBindings()

	const (
		deletedRole    = "system:controller:deployment-controller"
		deletedBinding = "system:public-info-viewer"
		trimmedRole    = "system:controller:replicaset-controller"
		protectedRole  = "system:controller:job-controller"
	)
	if err := roles.Delete(ctx, deletedRole, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := bindings.Delete(ctx, deletedBinding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	trimmed, err := roles.Get(ctx, trimmedRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	protected, err := roles.Get(ctx, protectedRole, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantRules := trimmed.Rules
	if len(wantRules) < 2 || len(protected.Rules) < 2 {
		t.Fatalf("%s and %s should have several rules each to take some away", trimmedRole, protectedRole)
	}
	trimmed.Rules = trimmed.Rules[:1]
	if _, err := roles.Update(ctx, trimmed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	protected.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	protected.Rules = protected.Rules[:1]
	if _, err := roles.Update(ctx, protected, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	tenant.Restart(t)
	if err := tenant.WaitReady(ctx, cfg); err != nil {
		t.Fatalf("the tenant is not ready after its restart: %v", err)
	}
	t.Logf("ready %.2fs after its restart", time.Since(tenant.Started).Seconds())

	if _, err := roles.Get(ctx, deletedRole, metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted ClusterRole %s is not back: %v", deletedRole, err)
	}
	if _, err := bindings.Get(ctx, deletedBinding, metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted ClusterRoleBinding %s is not back: %v", deletedBinding, err)
	}
	if got, err := roles.Get(ctx, trimmedRole, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if !covers(got.Rules, wantRules) {
		t.Errorf("ClusterRole %s has rules %v after the restart, want %v back", trimmedRole, got.Rules, wantRules)
	}
	if got, err := roles.Get(ctx, protectedRole, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if len(got.Rules) != 1 {
		t.Errorf("ClusterRole %s, protected from updates, has %d rules after the restart, want the 1 it was left with", protectedRole, len(got.Rules))
	}
	// Nothing else lost its way: the restarted apiserver still serves the tenant.
	if _, err := client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{}); err != nil {
		t.Errorf("reading kube-system after the restart: %v", err)
	}
}

// covers says whether the rules got allow everything want does (reconciliation adds missing
// permissions as rules of its own shape).
func covers(got, want []rbacv1.PolicyRule) bool {
	ok, _ := validation.Covers(got, want)
	return ok
}
