package controlplane_test

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

func TestDisruptionBudgets(t *testing.T) {
	names := naming.For(vcName)
	for _, tt := range []struct {
		name           string
		etcd, cp       int32
		want, unwanted []string
	}{
		{"one of each: none, a budget would hold every drain", 1, 1, nil, []string{names.EtcdStatefulSet(), names.ControlPlaneDeployment()}},
		{"3-member etcd", 3, 1, []string{names.EtcdStatefulSet()}, []string{names.ControlPlaneDeployment()}},
		{"HA", 3, 2, []string{names.EtcdStatefulSet(), names.ControlPlaneDeployment()}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vc := newVC(func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.Etcd.Replicas = tt.etcd
				vc.Spec.ControlPlane.Replicas = ptr.To(tt.cp)
			})
			want, unwanted := controlplane.DisruptionBudgets(vc)
			var got []string
			for _, pdb := range want {
				got = append(got, pdb.Name)
				if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Namespace != cpNS || len(pdb.OwnerReferences) != 0 {
					t.Errorf("%s: maxUnavailable %v, namespace %s, owners %v", pdb.Name, pdb.Spec.MaxUnavailable, pdb.Namespace, pdb.OwnerReferences)
				}
				component := pdb.Labels[naming.LabelComponent]
				if sel := pdb.Spec.Selector.MatchLabels; sel[naming.LabelComponent] != component || sel[naming.LabelVirtualCluster] != vcName {
					t.Errorf("%s selects %v", pdb.Name, sel)
				}
			}
			if !slices.Equal(got, tt.want) || !slices.Equal(unwanted, tt.unwanted) {
				t.Errorf("budgets %v, none for %v; want %v, none for %v", got, unwanted, tt.want, tt.unwanted)
			}
		})
	}
}
