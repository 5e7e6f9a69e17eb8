package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/testenv"
)

// TestGrants: the chart's admission policies let only a host user with the verb
// grant-privileged on virtualclusters make a tenant privileged on its lent nodes, and only one
// with grant-shared-quota give it a share of the shared nodes of its own; creating and editing
// VirtualClusters is not enough.
func TestGrants(t *testing.T) {
	env := testenv.Start(t, testenv.Options{APIServerFlags: []string{"--authorization-mode=RBAC"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Client
	testenv.CreateFromChartFile(t, ctx, c, "grants.yaml")
	for _, obj := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "vc-editor"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"kubenest.io"}, Resources: []string{"virtualclusters"}, Verbs: []string{"get", "create", "update", "patch"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "editors", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "vc-editor"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "tenant"}, {APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "platform"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "granters", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubenest:privileged-grant"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "platform"}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "quota-granters", Namespace: "team-a"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubenest:shared-quota-grant"},
			Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "platform"}}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user string) client.Client {
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
		cl, err := client.New(cfg, client.Options{Scheme: c.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	tenant, platform := as("tenant"), as("platform")
	vc := func(name string, security v1alpha1.NodePodSecurity) *v1alpha1.VirtualCluster {
		return &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"},
			Spec: v1alpha1.VirtualClusterSpec{Nodes: v1alpha1.NodesSpec{PodSecurity: security}}}
	}

	// The policy is in force once the apiserver has loaded it.
	var err error
	_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err = tenant.Create(ctx, vc("root", v1alpha1.NodePodSecurityPrivileged), client.DryRunAll)
		return err != nil, nil
	})
	if err == nil || !strings.Contains(err.Error(), "spec.nodes.podSecurity: Privileged") || !strings.Contains(err.Error(), "grant-privileged") {
		t.Fatalf("a tenant making itself privileged: %v", err)
	}
	if err := tenant.Create(ctx, vc("plain", v1alpha1.NodePodSecurityBaseline)); err != nil {
		t.Fatalf("a tenant creating a baseline VirtualCluster: %v", err)
	}
	plain := &v1alpha1.VirtualCluster{}
	if err := tenant.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "plain"}, plain); err != nil {
		t.Fatal(err)
	}
	plain.Spec.Nodes.PodSecurity = v1alpha1.NodePodSecurityPrivileged
	if err := tenant.Update(ctx, plain); err == nil || !strings.Contains(err.Error(), "grant-privileged") {
		t.Errorf("a tenant raising its own VirtualCluster to privileged: %v", err)
	}
	if err := platform.Update(ctx, plain); err != nil {
		t.Fatalf("the platform granting privileged pods: %v", err)
	}
	// Granted once, other edits by the tenant go through.
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
		t.Fatal(err)
	}
	plain.Spec.Nodes.Shared = true
	if err := tenant.Update(ctx, plain); err != nil {
		t.Errorf("a tenant editing its granted VirtualCluster: %v", err)
	}

	// The share of the shared nodes: not at creation, nor by an edit, nor by a change, unless
	// granted.
	share := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourcePods: resource.MustParse(q)}
	}
	denied := func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "spec.nodes.sharedQuota") && strings.Contains(err.Error(), "grant-shared-quota")
	}
	big := vc("big", "")
	big.Spec.Nodes.SharedQuota = share("1000")
	if err := tenant.Create(ctx, big, client.DryRunAll); !denied(err) {
		t.Errorf("a tenant creating a VirtualCluster with a share of its own: %v", err)
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
		t.Fatal(err)
	}
	plain.Spec.Nodes.SharedQuota = share("1000")
	if err := tenant.Update(ctx, plain); !denied(err) {
		t.Errorf("a tenant giving its own VirtualCluster a share: %v", err)
	}
	if err := platform.Update(ctx, plain); err != nil {
		t.Fatalf("the platform giving a share: %v", err)
	}
	if err := tenant.Get(ctx, client.ObjectKeyFromObject(plain), plain); err != nil {
		t.Fatal(err)
	}
	plain.Spec.Nodes.SharedQuota = share("2000")
	if err := tenant.Update(ctx, plain); !denied(err) {
		t.Errorf("a tenant raising the share it was given: %v", err)
	}
	plain.Spec.Nodes.SharedQuota = share("1000")
	plain.Spec.Nodes.Shared = false
	if err := tenant.Update(ctx, plain); err != nil {
		t.Errorf("a tenant editing a VirtualCluster given a share, the share unchanged: %v", err)
	}
	if err := platform.Create(ctx, big); err != nil {
		t.Errorf("the platform creating a VirtualCluster with a share: %v", err)
	}
}
