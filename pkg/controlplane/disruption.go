package controlplane

import (
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// DisruptionBudgets are the PodDisruptionBudgets of a tenant's etcd and control plane, each
// letting one pod at a time be evicted (a drain of a host node, a node upgrade), so that a
// 3-member etcd keeps its quorum and a control plane of several replicas keeps an apiserver.
// want are those the tenant's spec calls for; unwanted names those it does not (a lone etcd
// member or a single control-plane pod: a budget that allowed no eviction would hold every drain
// of the host node under it forever), which must not exist.
func DisruptionBudgets(vc *v1alpha1.VirtualCluster) (want []*policyv1.PodDisruptionBudget, unwanted []string) {
	names := naming.For(vc.Name)
	for _, c := range []struct {
		name, component string
		replicas        int32
	}{
		{names.EtcdStatefulSet(), naming.ComponentEtcd, etcdMembers(vc)},
		{names.ControlPlaneDeployment(), naming.ComponentControlPlane, ptr.Deref(vc.Spec.ControlPlane.Replicas, 1)},
	} {
		if c.replicas < 2 {
			unwanted = append(unwanted, c.name)
			continue
		}
		want = append(want, &policyv1.PodDisruptionBudget{
			TypeMeta:   typeMeta("policy/v1", "PodDisruptionBudget"),
			ObjectMeta: objectMeta(vc, c.name, c.component),
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: names.Labels(c.component)},
			},
		})
	}
	return want, unwanted
}
