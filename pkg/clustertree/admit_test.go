package clustertree

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// A pod bound straight to the shared node, past the tenant's scheduler, asks the host only for
// what the tenant's share allows: a device or hugepages the share does not name fail it, as
// on a kubelet without them.
func TestAdmitAllowsByList(t *testing.T) {
	p := &provider{
		tr:       Translator{HostNamespace: "tenants", VirtualCluster: "team-a"},
		hostPods: corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})),
		quota:    corev1.ResourceList{"cpu": resource.MustParse("2"), "nvidia.com/gpu": resource.MustParse("1")},
		admitted: map[types.UID]admission{},
	}
	ask := func(uid types.UID, r corev1.ResourceList) error { return p.admit(uid, r) }
	if err := ask("a", corev1.ResourceList{"cpu": resource.MustParse("1"), "memory": resource.MustParse("1Gi"),
		"ephemeral-storage": resource.MustParse("1Gi"), "pods": resource.MustParse("1"), "nvidia.com/gpu": resource.MustParse("1")}); err != nil {
		t.Errorf("a pod within the share: %v", err)
	}
	for name, q := range map[corev1.ResourceName]string{"amd.com/gpu": "1", "hugepages-2Mi": "512Mi"} {
		err := ask(types.UID(name), corev1.ResourceList{name: resource.MustParse(q)})
		var full *quotaError
		if !errors.As(err, &full) || full.Reason() != "OutOf"+string(name) {
			t.Errorf("a pod asking for %s %s, which the share does not name: %v", q, name, err)
		}
	}
	if err := ask("zero", corev1.ResourceList{"amd.com/gpu": resource.MustParse("0")}); err != nil {
		t.Errorf("a pod asking for none of a device: %v", err)
	}
}
