package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/testenv"
)

// TestValidation checks each admission rule of the VirtualCluster CRD against a real
// kube-apiserver: what it rejects, and that its message names the field.
func TestValidation(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	ctx := context.Background()

	vc := func(name string, mutate func(*v1alpha1.VirtualCluster)) *v1alpha1.VirtualCluster {
		v := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		if mutate != nil {
			mutate(v)
		}
		return v
	}
	ephemeral := v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}

	t.Run("create", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			vc     *v1alpha1.VirtualCluster
			errHas []string // empty: accepted
		}{
			{name: "minimal", vc: vc("minimal", nil)},
			{name: "everything", vc: vc("everything", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.Replicas = ptr.To[int32](3)
				v.Spec.ControlPlane.Exposure = v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort, NodePort: ptr.To[int32](31443),
					ExtraSANs: []string{"10.1.2.3", "fd00::1", "api.example.com", "*.tenants.example.com"}}
				v.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"v": "2", "audit-log-maxage": "3"}
				v.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"v": "1"}
				v.Spec.Etcd = v1alpha1.EtcdSpec{Replicas: 3, Storage: v1alpha1.EtcdStorage{PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimStorage{
					Size: resource.MustParse("2Gi"), StorageClassName: ptr.To("fast")}}}
				v.Spec.Nodes = v1alpha1.NodesSpec{Shared: true, Promotions: []v1alpha1.NodePromotion{{Name: "gpu", Count: 2,
					Selector: metav1.LabelSelector{MatchLabels: map[string]string{"gpu": "true"}}}},
					SharedQuota: corev1.ResourceList{"cpu": resource.MustParse("8"), "memory": resource.MustParse("16Gi"), "pods": resource.MustParse("300"),
						"ephemeral-storage": resource.MustParse("50Gi"), "hugepages-2Mi": resource.MustParse("1Gi"), "nvidia.com/gpu": resource.MustParse("2")}}
				v.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform-ca", Kind: "ClusterIssuer"}}
				v.Spec.Sleep.Asleep = true
			})},
			{name: "external issuer", vc: vc("external-issuer", func(v *v1alpha1.VirtualCluster) {
				v.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "pca", Kind: "AWSPCAClusterIssuer", Group: "awspca.cert-manager.io"}}
			})},
			{name: "cert-manager issuer of an unknown kind", vc: vc("issuer-kind", func(v *v1alpha1.VirtualCluster) {
				v.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "ca", Kind: "Vault"}}
			}), errHas: []string{"spec.pki.issuerRef", "issuerRef.kind must be Issuer or ClusterIssuer"}},
			{name: "issuer name not a DNS name", vc: vc("issuer-name", func(v *v1alpha1.VirtualCluster) {
				v.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "My_CA"}}
			}), errHas: []string{"spec.pki.issuerRef.name"}},
			{name: "promotions of a tenant exposed as ClusterIP", vc: vc("lend-clusterip", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "workers", Count: 1}}
			}), errHas: []string{"spec.controlPlane.exposure.type", "nodes.promotions need controlPlane.exposure.type NodePort or LoadBalancer"}},
			{name: "no node asked of a tenant exposed as ClusterIP", vc: vc("lend-none", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "workers", Count: 0}}
			})},
			{name: "a share of something pods do not request", vc: vc("share-name", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Nodes.SharedQuota = corev1.ResourceList{"cpu": resource.MustParse("2"), "requests.cpu": resource.MustParse("2")}
			}), errHas: []string{"spec.nodes.sharedQuota", "sharedQuota: requests.cpu is not a resource pods request"}},
			{name: "a negative share", vc: vc("share-negative", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Nodes.SharedQuota = corev1.ResourceList{"memory": resource.MustParse("-1Gi")}
			}), errHas: []string{"spec.nodes.sharedQuota", "quantities must not be negative"}},
			{name: "name too long", vc: vc(strings.Repeat("a", 41), nil),
				errHas: []string{"metadata.name must be at most 40 characters"}},
			{name: "name with a dot", vc: vc("a.b", nil),
				errHas: []string{"metadata.name must be a DNS label"}},
			{name: "name starting with a digit", vc: vc("1abc", nil),
				errHas: []string{"metadata.name must be a DNS label"}},
			{name: "etcd replicas 2", vc: vc("etcd-two", func(v *v1alpha1.VirtualCluster) { v.Spec.Etcd.Replicas = 2 }),
				errHas: []string{"spec.etcd.replicas", "supported values"}},
			{name: "ephemeral etcd of three", vc: vc("eph-three", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Etcd = v1alpha1.EtcdSpec{Replicas: 3, Storage: ephemeral}
			}), errHas: []string{"spec.etcd", "etcd.storage.ephemeral needs etcd.replicas 1"}},
			{name: "asleep with ephemeral etcd", vc: vc("eph-asleep", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Etcd.Storage, v.Spec.Sleep.Asleep = ephemeral, true
			}), errHas: []string{"spec.sleep.asleep", "needs etcd.storage.persistentVolumeClaim"}},
			{name: "two kinds of storage", vc: vc("two-storage", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Etcd.Storage = v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{},
					PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimStorage{Size: resource.MustParse("1Gi")}}
			}), errHas: []string{"spec.etcd.storage", "exactly one of persistentVolumeClaim or ephemeral"}},
			{name: "control-plane replicas 0", vc: vc("cp-zero", func(v *v1alpha1.VirtualCluster) { v.Spec.ControlPlane.Replicas = ptr.To[int32](0) }),
				errHas: []string{"spec.controlPlane.replicas", "greater than or equal to 1"}},
			{name: "control-plane replicas 6", vc: vc("cp-six", func(v *v1alpha1.VirtualCluster) { v.Spec.ControlPlane.Replicas = ptr.To[int32](6) }),
				errHas: []string{"spec.controlPlane.replicas", "less than or equal to 5"}},
			{name: "unknown exposure", vc: vc("exp-bad", func(v *v1alpha1.VirtualCluster) { v.Spec.ControlPlane.Exposure.Type = "Ingress" }),
				errHas: []string{"spec.controlPlane.exposure.type", "supported values"}},
			{name: "nodePort with ClusterIP", vc: vc("np-clusterip", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.Exposure = v1alpha1.ExposureSpec{Type: v1alpha1.ExposureClusterIP, NodePort: ptr.To[int32](31000)}
			}), errHas: []string{"spec.controlPlane.exposure", "nodePort can only be set when type is NodePort or LoadBalancer"}},
			{name: "bad SAN", vc: vc("bad-san", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.Exposure.ExtraSANs = []string{"ok.example.com", "not_a_name"}
			}), errHas: []string{"spec.controlPlane.exposure.extraSANs", "not_a_name is neither an IP address nor a lowercase DNS name"}},
			{name: "uppercase SAN", vc: vc("upper-san", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.Exposure.ExtraSANs = []string{"API.example.com"}
			}), errHas: []string{"spec.controlPlane.exposure.extraSANs", "API.example.com is neither"}},
			{name: "owned apiserver flag", vc: vc("owned-api", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"v": "2", "etcd-servers": "https://elsewhere:2379"}
			}), errHas: []string{"spec.controlPlane.apiServer", "flag --etcd-servers is set by the operator"}},
			{name: "owned controller-manager flag", vc: vc("owned-kcm", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"root-ca-file": "/x"}
			}), errHas: []string{"spec.controlPlane.controllerManager", "flag --root-ca-file is set by the operator"}},
			{name: "owned scheduler flag", vc: vc("owned-sched", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"kubeconfig": "/x"}
			}), errHas: []string{"spec.controlPlane.scheduler", "flag --kubeconfig is set by the operator"}},
			{name: "a process flag of the controller-manager and the scheduler set to two values", vc: vc("process-flag", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"v": "4", "profiling": "true"}
				v.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"v": "2", "profiling": "false"}
			}), errHas: []string{"spec.controlPlane", "set --v differently", "one process"}},
			{name: "a process flag set to the same value twice", vc: vc("process-flag-same", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"v": "4", "profiling": "true"}
				v.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"v": "4", "profiling": "false"}
			})},
			{name: "flag with dashes", vc: vc("dashes", func(v *v1alpha1.VirtualCluster) {
				v.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"--v": "2"}
			}), errHas: []string{"spec.controlPlane.apiServer.extraArgs", "flag names without leading dashes"}},
			{name: "negative promotion count", vc: vc("neg-count", func(v *v1alpha1.VirtualCluster) {
				v.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "a", Count: -1}}
			}), errHas: []string{"spec.nodes.promotions[0].count", "greater than or equal to 0"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := env.Client.Create(ctx, tc.vc)
				if len(tc.errHas) == 0 {
					if err != nil {
						t.Fatalf("rejected: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("accepted, want rejected")
				}
				for _, want := range tc.errHas {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
			})
		}
	})

	t.Run("defaults", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := env.Client.Get(ctx, keyOf("minimal"), got); err != nil {
			t.Fatal(err)
		}
		if got.Spec.Etcd.Replicas != 1 || ptr.Deref(got.Spec.ControlPlane.Replicas, 0) != 1 ||
			got.Spec.ControlPlane.Exposure.Type != v1alpha1.ExposureClusterIP ||
			got.Spec.Etcd.Storage.PersistentVolumeClaim == nil || got.Spec.Etcd.Storage.PersistentVolumeClaim.Size.String() != "1Gi" {
			t.Errorf("defaults not applied: %+v", got.Spec)
		}
	})

	t.Run("update", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*v1alpha1.VirtualCluster)
			errHas []string
		}{
			{name: "scale control plane", mutate: func(v *v1alpha1.VirtualCluster) { v.Spec.ControlPlane.Replicas = ptr.To[int32](2) }},
			{name: "change exposure", mutate: func(v *v1alpha1.VirtualCluster) { v.Spec.ControlPlane.Exposure.Type = v1alpha1.ExposureNodePort }},
			{name: "add an issuer", mutate: func(v *v1alpha1.VirtualCluster) {
				v.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "ca"}}
			}, errHas: []string{"pki is immutable"}},
			{name: "etcd replicas", mutate: func(v *v1alpha1.VirtualCluster) { v.Spec.Etcd.Replicas = 3 },
				errHas: []string{"spec.etcd.replicas", "etcd.replicas is immutable"}},
			{name: "etcd storage", mutate: func(v *v1alpha1.VirtualCluster) {
				v.Spec.Etcd.Storage.PersistentVolumeClaim.Size = resource.MustParse("5Gi")
			}, errHas: []string{"spec.etcd.storage", "etcd.storage is immutable"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				v := &v1alpha1.VirtualCluster{}
				if err := env.Client.Get(ctx, keyOf("minimal"), v); err != nil {
					t.Fatal(err)
				}
				tc.mutate(v)
				err := env.Client.Update(ctx, v)
				if len(tc.errHas) == 0 {
					if err != nil {
						t.Fatalf("rejected: %v", err)
					}
					return
				}
				if err == nil {
					t.Fatal("accepted, want rejected")
				}
				for _, want := range tc.errHas {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
			})
		}
	})
}

func keyOf(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "default", Name: name}
}
