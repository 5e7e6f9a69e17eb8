package virtualcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// ephemeralVC is a VirtualCluster of ns with one etcd member on an emptyDir.
func ephemeralVC(name string) *v1alpha1.VirtualCluster {
	return &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.VirtualClusterSpec{Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}}},
	}
}

// tenantObjectsIn counts the host objects of VirtualCluster name in namespace: Secrets,
// Services, StatefulSets, Deployments.
func tenantObjectsIn(t *testing.T, ctx context.Context, c client.Client, namespace, name string) int {
	t.Helper()
	n := 0
	for _, l := range []client.ObjectList{&corev1.SecretList{}, &corev1.ServiceList{}, &appsv1.StatefulSetList{}, &appsv1.DeploymentList{}} {
		if err := c.List(ctx, l, client.InNamespace(namespace), client.MatchingLabels{naming.LabelVirtualCluster: name}); err != nil {
			t.Fatal(err)
		}
		n += meta.LenList(l)
	}
	return n
}

// TestControlPlaneNamespaceTaken: a namespace of the control-plane namespace's name that
// KubeNest did not make for the tenants' namespace (no labels, or another namespace's) is
// never used: the tenant's keys would be where others may read them. Once it is KubeNest's,
// the tenant is made there.
func TestControlPlaneNamespaceTaken(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client
	squatted := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cpNS}}
	if err := c.Create(ctx, squatted); err != nil {
		t.Fatal(err)
	}
	startOperator(t, env, &tenantRoutes{})
	vc := ephemeralVC("squatted")
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	names := naming.For(vc.Name)

	taken := func(t *testing.T) {
		t.Helper()
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return reason(v, v1alpha1.ConditionAPIServerReady) == virtualcluster.ReasonNamespaceTaken
		})
		if cond := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAPIServerReady); !strings.Contains(cond.Message, cpNS) {
			t.Errorf("message %q does not name namespace %s", cond.Message, cpNS)
		}
		if got.Status.Phase == v1alpha1.PhaseReady || isTrue(got, v1alpha1.ConditionCertificatesReady) {
			t.Errorf("phase %s, CertificatesReady %v: want nothing made", got.Status.Phase, isTrue(got, v1alpha1.ConditionCertificatesReady))
		}
		// Nothing of the tenant is made, there or in its own namespace.
		for _, namespace := range []string{cpNS, ns} {
			if n := tenantObjectsIn(t, ctx, c, namespace, vc.Name); n != 0 {
				t.Errorf("%d host objects of the tenant in %s", n, namespace)
			}
		}
		if err := c.Get(ctx, cpKey(names.CASecret()), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("the CA Secret in the namespace KubeNest did not make: %v", err)
		}
		// The namespace is left as it is: not adopted.
		n := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, n); err != nil {
			t.Fatal(err)
		}
		if !n.DeletionTimestamp.IsZero() {
			t.Errorf("the operator deletes namespace %s it did not make", cpNS)
		}
	}

	t.Run("without labels", taken)

	t.Run("made by KubeNest for another namespace", func(t *testing.T) {
		n := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, n); err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: "others"}
		if err := c.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		// A change the operator sees.
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Annotations = map[string]string{"test": "others"} })
		time.Sleep(2 * time.Second) // a pass or two, each of which must find it taken
		taken(t)
	})

	t.Run("once KubeNest's, the tenant is made there", func(t *testing.T) {
		n := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, n); err != nil {
			t.Fatal(err)
		}
		n.Labels = map[string]string{naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: ns}
		if err := c.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionCertificatesReady)
		})
		if got.Status.ControlPlaneNamespace != cpNS {
			t.Errorf("status.controlPlaneNamespace %q, want %s", got.Status.ControlPlaneNamespace, cpNS)
		}
		for _, name := range []string{names.CASecret(), names.EtcdCertsSecret(), names.ControlPlaneCertsSecret()} {
			if err := c.Get(ctx, cpKey(name), &corev1.Secret{}); err != nil {
				t.Errorf("Secret %s/%s: %v", cpNS, name, err)
			}
			if err := c.Get(ctx, key(name), &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("Secret %s/%s in the tenant's namespace: %v", ns, name, err)
			}
		}
	})
}

// TestEarlierReleasesTenant: a VirtualCluster an earlier release made (a status without
// controlPlaneNamespace) keeps its control plane in its own namespace, owned by it; a
// status.controlPlaneNamespace the operator did not write is never used; the control-plane
// namespace stays while a tenant of the namespace uses it, and goes with the last.
func TestEarlierReleasesTenant(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client

	// Both exist, with their statuses, before this operator starts.
	old, bogus, fresh := ephemeralVC("old"), ephemeralVC("bogus"), ephemeralVC("fresh")
	for _, tt := range []struct {
		vc     *v1alpha1.VirtualCluster
		status v1alpha1.VirtualClusterStatus
	}{
		// As an earlier release left it: conditions, no controlPlaneNamespace.
		{old, v1alpha1.VirtualClusterStatus{Phase: v1alpha1.PhaseProvisioning, Conditions: []metav1.Condition{{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: virtualcluster.ReasonNotReady,
			Message: "CertificatesReady is not True", LastTransitionTime: metav1.Now(),
		}}}},
		// A namespace no release ever chose.
		{bogus, v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: "kube-system"}},
	} {
		if err := c.Create(ctx, tt.vc); err != nil {
			t.Fatal(err)
		}
		tt.vc.Status = tt.status
		if err := c.Status().Update(ctx, tt.vc); err != nil {
			t.Fatal(err)
		}
	}
	startOperator(t, env, &tenantRoutes{})
	if err := c.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}

	t.Run("an earlier release's tenant stays in its namespace", func(t *testing.T) {
		got := waitFor(t, ctx, c, old.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionCertificatesReady) && isTrue(v, v1alpha1.ConditionKubeconfigReady)
		})
		if got.Status.ControlPlaneNamespace != ns {
			t.Errorf("status.controlPlaneNamespace %q, want %s", got.Status.ControlPlaneNamespace, ns)
		}
		names := naming.For(old.Name)
		for _, o := range []client.Object{
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.CASecret()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.ControlPlaneCertsSecret()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.KubeconfigSecret()}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names.APIServerService()}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: names.EtcdStatefulSet()}},
		} {
			if err := c.Get(ctx, key(o.GetName()), o); err != nil {
				t.Errorf("%T %s/%s: %v", o, ns, o.GetName(), err)
				continue
			}
			if owner := metav1.GetControllerOf(o); owner == nil || owner.UID != got.UID {
				t.Errorf("%T %s: controller owner %+v, want the VirtualCluster", o, o.GetName(), owner)
			}
		}
		if n := tenantObjectsIn(t, ctx, c, cpNS, old.Name); n != 0 {
			t.Errorf("%d host objects of the earlier release's tenant in %s", n, cpNS)
		}
		if want := "https://old-apiserver.tenants.svc:6443"; got.Status.Endpoint != want {
			t.Errorf("endpoint %q, want %q", got.Status.Endpoint, want)
		}
	})

	t.Run("a status naming another namespace is not used", func(t *testing.T) {
		got := waitFor(t, ctx, c, bogus.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionCertificatesReady)
		})
		if got.Status.ControlPlaneNamespace != cpNS {
			t.Errorf("status.controlPlaneNamespace %q, want %s", got.Status.ControlPlaneNamespace, cpNS)
		}
		if err := c.Get(ctx, cpKey(naming.For(bogus.Name).CASecret()), &corev1.Secret{}); err != nil {
			t.Errorf("the CA Secret in %s: %v", cpNS, err)
		}
		if n := tenantObjectsIn(t, ctx, c, "kube-system", bogus.Name); n != 0 {
			t.Errorf("%d host objects of the tenant in kube-system", n)
		}
		if err := c.Get(ctx, key(naming.For(bogus.Name).CASecret()), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("the CA Secret in the tenant's namespace: %v", err)
		}
	})

	deleteVC := func(t *testing.T, vc *v1alpha1.VirtualCluster) {
		t.Helper()
		if err := c.Delete(ctx, vc); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			return apierrors.IsNotFound(c.Get(ctx, key(vc.Name), &v1alpha1.VirtualCluster{})), nil
		})
		if err != nil {
			t.Fatalf("VirtualCluster %s not gone: %v", vc.Name, err)
		}
	}
	namespaceStays := func(t *testing.T) {
		t.Helper()
		n := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, n); err != nil {
			t.Fatalf("namespace %s: %v", cpNS, err)
		}
		if !n.DeletionTimestamp.IsZero() {
			t.Errorf("namespace %s is being deleted while a tenant of %s uses it", cpNS, ns)
		}
	}

	t.Run("the control-plane namespace stays while a tenant uses it", func(t *testing.T) {
		waitFor(t, ctx, c, fresh.Name, func(v *v1alpha1.VirtualCluster) bool { return isTrue(v, v1alpha1.ConditionCertificatesReady) })
		deleteVC(t, bogus)
		namespaceStays(t)
		if n := tenantObjectsIn(t, ctx, c, cpNS, bogus.Name); n != 0 {
			t.Errorf("%d host objects of the deleted tenant left in %s", n, cpNS)
		}
		if n := tenantObjectsIn(t, ctx, c, cpNS, fresh.Name); n == 0 {
			t.Errorf("the other tenant's host objects went with the deleted one")
		}
	})

	t.Run("the control-plane namespace stays while an earlier release's tenant is left", func(t *testing.T) {
		deleteVC(t, fresh)
		if n := tenantObjectsIn(t, ctx, c, cpNS, fresh.Name); n != 0 {
			t.Errorf("%d host objects of the deleted tenant left in %s", n, cpNS)
		}
		namespaceStays(t)
	})

	t.Run("the control-plane namespace goes with the namespace's last tenant, an earlier release's too", func(t *testing.T) {
		deleteVC(t, old)
		if n := tenantObjectsIn(t, ctx, c, ns, old.Name); n != 0 {
			t.Errorf("%d host objects of the deleted tenant left in %s", n, ns)
		}
		assertNamespaceGoing(t, ctx, c, cpNS)
	})
}

// TestFailedFirstPassStaysNew: a new VirtualCluster whose first pass fails (here: labelling
// its namespace for Pod Security is refused for a while) still gets its control plane in the
// control-plane namespace: the status that pass writes must not make it look like an earlier
// release's.
func TestFailedFirstPassStaysNew(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client
	// Updates of the tenants' namespace are refused until the binding goes.
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "tenants-namespace-frozen"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"namespaces"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name != '" + ns + "'"}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The policy is in force once an update is refused.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: ns}, n); err != nil {
			return false, err
		}
		n.Annotations = map[string]string{"probe": time.Now().String()}
		return c.Update(ctx, n) != nil, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	startOperator(t, env, &tenantRoutes{})
	vc := ephemeralVC("first")
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool { return len(v.Status.Conditions) > 0 })
	if err := c.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool { return isTrue(v, v1alpha1.ConditionCertificatesReady) })
	if got.Status.ControlPlaneNamespace != cpNS {
		t.Errorf("status.controlPlaneNamespace %q, want %s", got.Status.ControlPlaneNamespace, cpNS)
	}
	if err := c.Get(ctx, key(naming.For(vc.Name).CASecret()), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the CA Secret, with the tenant's CA keys, in the tenant's namespace %s: %v", ns, err)
	}
}
