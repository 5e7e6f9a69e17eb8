package virtualcluster

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// TestByVirtualClusterLabel: a host object of a tenant wakes its VirtualCluster, in the
// tenant's namespace, whether the object is there (an earlier release's tenant, the admin
// kubeconfig) or in the control-plane namespace; an object elsewhere naming a namespace by
// label wakes nothing of that namespace.
func TestByVirtualClusterLabel(t *testing.T) {
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: "tenants", UID: "u"}}
	legacy := vc.DeepCopy()
	legacy.Status.ControlPlaneNamespace = legacy.Namespace
	a, err := controlplane.NewAuthorities(vc.Name, metav1.Now().Time)
	if err != nil {
		t.Fatal(err)
	}
	caSecret := func(vc *v1alpha1.VirtualCluster) client.Object {
		s, err := controlplane.CASecret(vc, a)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A pod as the StatefulSet controller makes it: the template's labels.
	etcdPod := func(vc *v1alpha1.VirtualCluster) client.Object {
		sts := controlplane.EtcdStatefulSet(vc, controlplane.DefaultSettings(), "")
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: sts.Name + "-0", Namespace: sts.Namespace, Labels: sts.Spec.Template.Labels}}
	}
	tenants := types.NamespacedName{Namespace: "tenants", Name: "alpha"}
	for _, tt := range []struct {
		name string
		obj  client.Object
		want []types.NamespacedName
	}{
		{"control-plane Secret", caSecret(vc), []types.NamespacedName{tenants}},
		{"control-plane Service", controlplane.APIServerService(vc), []types.NamespacedName{tenants}},
		{"control-plane StatefulSet", controlplane.EtcdStatefulSet(vc, controlplane.DefaultSettings(), ""), []types.NamespacedName{tenants}},
		{"an earlier release's tenant's Secret", caSecret(legacy), []types.NamespacedName{tenants}},
		{"an earlier release's tenant's pod", etcdPod(legacy), []types.NamespacedName{tenants}},
		{"control-plane pod", etcdPod(vc), []types.NamespacedName{tenants}},
		{"labelled with a namespace it is not the control-plane namespace of", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: "alpha-ca", Namespace: "kubenest-cp-others",
			Labels: map[string]string{naming.LabelVirtualCluster: "alpha", naming.LabelVirtualClusterNamespace: "tenants"},
		}}, []types.NamespacedName{{Namespace: "kubenest-cp-others", Name: "alpha"}}},
		{"labelled with a namespace, in another", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
			Name: "alpha-ca", Namespace: "others",
			Labels: map[string]string{naming.LabelVirtualCluster: "alpha", naming.LabelVirtualClusterNamespace: "tenants"},
		}}, []types.NamespacedName{{Namespace: "others", Name: "alpha"}}},
		{"no VirtualCluster label", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "kubenest-cp-tenants",
			Labels: map[string]string{naming.LabelVirtualClusterNamespace: "tenants"}}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			byVirtualClusterLabel().Create(context.Background(), event.TypedCreateEvent[client.Object]{Object: tt.obj}, q)
			var got []types.NamespacedName
			for q.Len() > 0 {
				r, _ := q.Get()
				got = append(got, r.NamespacedName)
				q.Done(r)
			}
			if len(got) != len(tt.want) || (len(got) == 1 && got[0] != tt.want[0]) {
				t.Errorf("%s/%s (labels %v) wakes %v, want %v", tt.obj.GetNamespace(), tt.obj.GetName(), tt.obj.GetLabels(), got, tt.want)
			}
		})
	}
}
