package virtualcluster_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/testenv"
)

// TestControlPlaneQuotas: the ResourceQuotas of a tenant's namespace bound its control plane,
// in its control-plane namespace, as copies that follow them.
func TestControlPlaneQuotas(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client
	startOperator(t, env, &tenantRoutes{})
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("20"), corev1.ResourceRequestsStorage: resource.MustParse("50Gi")}}}
	mustCreateObj(t, ctx, c, quota)
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}}}}
	mustCreateObj(t, ctx, c, vc)

	copyHolds := func(what string, want *corev1.ResourceQuotaSpec) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got := &corev1.ResourceQuota{}
			err := c.Get(ctx, client.ObjectKey{Namespace: cpNS, Name: "team"}, got)
			if want == nil {
				return apierrors.IsNotFound(err), nil
			}
			return err == nil && equality.Semantic.DeepEqual(got.Spec, *want) && got.Labels[virtualcluster.LabelQuotaOf] == "team", nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	copyHolds("the namespace's ResourceQuota is not copied into the control-plane namespace", &quota.Spec)

	// The platform raises it; a namespace's user edits the copy: it follows the namespace's.
	patch := client.MergeFrom(quota.DeepCopy())
	quota.Spec.Hard[corev1.ResourcePods] = resource.MustParse("30")
	if err := c.Patch(ctx, quota, patch); err != nil {
		t.Fatal(err)
	}
	copyHolds("the copy does not follow its ResourceQuota", &quota.Spec)
	edited := &corev1.ResourceQuota{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: cpNS, Name: "team"}, edited); err != nil {
		t.Fatal(err)
	}
	edited.Spec.Hard = corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1000")}
	if err := c.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	copyHolds("an edit of the copy is not undone", &quota.Spec)

	if err := c.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	copyHolds("the copy of a deleted ResourceQuota stays", nil)
}
