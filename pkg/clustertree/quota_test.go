package clustertree_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kubenest-io/kubenest/pkg/clustertree"
)

func TestParseQuota(t *testing.T) {
	got, err := clustertree.ParseQuota(" cpu=2, memory=4Gi,pods=110,nvidia.com/gpu=1,hugepages-2Mi=1Gi,ephemeral-storage=20Gi")
	if err != nil {
		t.Fatal(err)
	}
	want := map[corev1.ResourceName]string{"cpu": "2", "memory": "4Gi", "pods": "110", "nvidia.com/gpu": "1", "hugepages-2Mi": "1Gi", "ephemeral-storage": "20Gi"}
	if len(got) != len(want) {
		t.Errorf("ParseQuota: %v, want %v", got, want)
	}
	for name, q := range want {
		if g := got[name]; g.String() != q {
			t.Errorf("ParseQuota: %s = %s, want %s", name, g.String(), q)
		}
	}
	if s := clustertree.FormatQuota(got); s != "cpu=2,ephemeral-storage=20Gi,hugepages-2Mi=1Gi,memory=4Gi,nvidia.com/gpu=1,pods=110" {
		t.Errorf("FormatQuota: %s", s)
	}
	if q, err := clustertree.ParseQuota(""); q != nil || err != nil {
		t.Errorf("ParseQuota(\"\") = %v, %v; want no quota", q, err)
	}
	for in, msg := range map[string]string{
		"cpu":               "want name=quantity",
		"=2":                "want name=quantity",
		"cpu=2,cpu=3":       "cpu: given twice",
		"cpus=2":            "cpus: not a resource pods request",
		"requests.cpu=2":    "requests.cpu: not a resource pods request",
		"memory=4Gx":        `memory: "4Gx" is not a quantity`,
		"cpu=2,memory=-1Gi": "memory: -1Gi is negative",
	} {
		if _, err := clustertree.ParseQuota(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseQuota(%q): %v, want an error saying %q", in, err, msg)
		}
	}
}

func TestAllocatable(t *testing.T) {
	capacity := corev1.ResourceList{"cpu": resource.MustParse("4"), "memory": resource.MustParse("8Gi"), "pods": resource.MustParse("220")}
	quota := corev1.ResourceList{"cpu": resource.MustParse("2"), "memory": resource.MustParse("16Gi"), "nvidia.com/gpu": resource.MustParse("1")}
	got := clustertree.Allocatable(capacity, quota)
	// The quota lowers what the host has more of, never raises what it has less of, and gives
	// nothing the host does not have.
	for name, want := range map[corev1.ResourceName]string{"cpu": "2", "memory": "8Gi", "pods": "220"} {
		if g := got[name]; g.String() != want {
			t.Errorf("Allocatable %s = %s, want %s", name, g.String(), want)
		}
	}
	if _, ok := got["nvidia.com/gpu"]; ok {
		t.Errorf("Allocatable gives a GPU the host does not have: %v", got)
	}
	if c := capacity["cpu"]; c.String() != "4" {
		t.Errorf("Allocatable changed the capacity it was given: %v", capacity)
	}
	if got := clustertree.Allocatable(capacity, nil); len(got) != 3 {
		t.Errorf("Allocatable without a quota = %v, want the capacity", got)
	}
	// With a quota, the host's hugepages and devices only where the quota names them;
	// ephemeral storage as the host has it unless named.
	capacity["nvidia.com/gpu"], capacity["hugepages-2Mi"], capacity["ephemeral-storage"] = resource.MustParse("8"), resource.MustParse("1Gi"), resource.MustParse("100Gi")
	got = clustertree.Allocatable(capacity, quota)
	for name, want := range map[corev1.ResourceName]string{"nvidia.com/gpu": "1", "ephemeral-storage": "100Gi"} {
		if g := got[name]; g.String() != want {
			t.Errorf("Allocatable %s = %s, want %s", name, g.String(), want)
		}
	}
	if g, ok := got["hugepages-2Mi"]; ok {
		t.Errorf("Allocatable offers hugepages the quota does not name: %s", g.String())
	}
}
