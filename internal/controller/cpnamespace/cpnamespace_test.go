package cpnamespace_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

func TestIsControlPlanePod(t *testing.T) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	// "old" was made by an earlier release (its control plane in its own namespace, as its
	// status says); "new" keeps its control plane in KubeNest's namespace.
	old := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "team"},
		Status: v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: "team"}}
	young := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: "team"},
		Status: v1alpha1.VirtualClusterStatus{ControlPlaneNamespace: naming.ControlPlaneNamespace("team")}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(old, young).Build()
	pod := func(ns, vc, vcNamespace string) *corev1.Pod {
		l := map[string]string{naming.LabelVirtualCluster: vc, naming.LabelComponent: naming.ComponentEtcd}
		if vcNamespace != "" {
			l[naming.LabelVirtualClusterNamespace] = vcNamespace
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: vc + "-etcd-0", Namespace: ns, Labels: l}}
	}
	for _, tc := range []struct {
		what string
		pod  *corev1.Pod
		want bool
	}{
		{"in the control-plane namespace its labels name", pod(naming.ControlPlaneNamespace("team"), "new", "team"), true},
		{"of an earlier release's tenant, in its own namespace", pod("team", "old", ""), true},
		{"labelled as a tenant's, in a namespace its user may write", pod("team", "new", "team"), false},
		{"labelled as another namespace's tenant's", pod("elsewhere", "new", "team"), false},
		{"labelled as a tenant that does not exist", pod("team", "ghost", ""), false},
		{"naming a control-plane namespace that is not its own", pod(naming.ControlPlaneNamespace("team"), "new", "other"), false},
	} {
		if got := cpnamespace.IsControlPlanePod(context.Background(), c, tc.pod); got != tc.want {
			t.Errorf("a pod %s: %v, want %v", tc.what, got, tc.want)
		}
	}
}
