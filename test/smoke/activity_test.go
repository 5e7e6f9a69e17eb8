package smoke

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/activity"
)

// TestActivity: the tenant's apiserver records its admin's requests in the activity Lease, and
// not those of its own components or of a ServiceAccount, which reads the Lease all along (a
// read by the admin would be activity itself).
func TestActivity(t *testing.T) {
	_, cfg, admin, ctx := readyTenant(t, "activity", "6b1f7a52-0000-4000-8000-000000000005")
	const ns = activity.LeaseNamespace
	// A ServiceAccount that may read the Lease, made by the admin.
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lease-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lease-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "lease-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "robot", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "robot", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adminLast := time.Now()
	robotCfg := rest.AnonymousClientConfig(cfg)
	robotCfg.BearerToken = tr.Status.Token
	robot := kubernetes.NewForConfigOrDie(robotCfg)

	// waitLease waits for the Lease to record a request at or after since, reading it as the
	// robot, and returns what it records.
	waitLease := func(since time.Time) time.Time {
		t.Helper()
		var last time.Time
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			last, err = activity.Read(ctx, robot)
			return err == nil && !last.Before(since.Add(-time.Second)), nil
		})
		if err != nil {
			t.Fatalf("the activity Lease records %v (err %v), want a request at %v or later", last, err, since)
		}
		return last
	}
	recorded := waitLease(adminLast)
	if recorded.After(time.Now()) {
		t.Errorf("the activity Lease records %v, in the future", recorded)
	}

	// The controller-manager and scheduler run meanwhile; the robot reads on.
	quiet := time.Now().Add(15 * time.Second)
	for time.Now().Before(quiet) {
		last, err := activity.Read(ctx, robot)
		if err != nil {
			t.Fatal(err)
		}
		if !last.Equal(recorded) {
			t.Fatalf("with only the tenant's components and a ServiceAccount at work, the activity Lease moved from %v to %v", recorded, last)
		}
		time.Sleep(time.Second)
	}

	before := time.Now()
	if _, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := waitLease(before); !got.After(recorded) {
		t.Errorf("after the admin's request the activity Lease records %v, want later than %v", got, recorded)
	}
}
