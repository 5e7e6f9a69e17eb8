package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 10; i++ {
		ds = append(ds, time.Duration(i)*time.Second)
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 5 * time.Second}, {0.9, 9 * time.Second}, {0.99, 9 * time.Second}, {1, 10 * time.Second}, {0, time.Second}} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("percentile(1..10 s, %v) = %v, want %v", tc.p, got, tc.want)
		}
	}
	if got := percentile(nil, 0.5); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
}

func TestMedianUsage(t *testing.T) {
	got := medianUsage([]usage{{workingSet: 3, rss: 30, cpu: 0.3}, {workingSet: 1, rss: 20, cpu: 0.1}, {workingSet: 2, rss: 10, cpu: 0.2}})
	if got.workingSet != 2 || got.rss != 20 || got.cpu != 0.2 {
		t.Errorf("medianUsage = %+v, want each field's median (2, 20, 0.2)", got)
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[float64]string{1234.56: "1235", 99.94: "99.9", 0.0123456: "0.0123", 3: "3"} {
		if got := formatValue(v); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFromCgroup(t *testing.T) {
	memoryCgroups = t.TempDir()
	dir := filepath.Join(memoryCgroups, "kn-worker-1", "kubepods", "burstable", "poduid-1", "abc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(f, s string) {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory.usage_in_bytes", "1000\n")
	write("memory.stat", "cache 300\nrss 600\ntotal_rss 650\ntotal_inactive_file 250\n")
	got, err := fromCgroup("kn-worker-1", "uid-1", "containerd://abc")
	if err != nil {
		t.Fatal(err)
	}
	if got.workingSet != 750 || got.rss != 650 || !got.fromCgroup {
		t.Errorf("fromCgroup = %+v, want working set 1000-250, RSS total_rss", got)
	}
	if _, err := fromCgroup("kn-worker-2", "uid-1", "containerd://abc"); err == nil {
		t.Error("fromCgroup found a container on the wrong node")
	}
}

func TestTrackerObserve(t *testing.T) {
	tr := &tracker{seen: map[string]map[string]time.Time{}}
	labels := func(component string) map[string]string {
		return map[string]string{naming.LabelVirtualCluster: "a", naming.LabelComponent: component}
	}
	etcd := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a-etcd-0", Labels: labels(naming.ComponentEtcd)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd"}}},
	}
	tr.observe(etcd)
	if tr.has("a", stepEtcdScheduled) {
		t.Fatal("an unscheduled pod counted as scheduled")
	}
	etcd.Spec.NodeName = "n"
	etcd.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "etcd", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	tr.observe(etcd)
	first := tr.seen["a"][stepEtcdScheduled]
	if !tr.has("a", stepEtcdScheduled) || !tr.has("a", stepEtcdRunning) || tr.has("a", stepEtcdPodReady) {
		t.Fatalf("after a scheduled, running pod: %v", tr.seen["a"])
	}
	etcd.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	tr.observe(etcd)
	if !tr.has("a", stepEtcdPodReady) || tr.seen["a"][stepEtcdScheduled] != first {
		t.Errorf("a later event moved the first time a step was seen, or Ready was missed: %v", tr.seen["a"])
	}

	cp := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "a-controlplane-x", Labels: labels(naming.ComponentControlPlane)},
		Spec:       corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "one"}, {Name: "two"}}},
		Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "one", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
	}
	tr.observe(cp)
	if !tr.has("a", stepCPScheduled) || tr.has("a", stepCPRunning) {
		t.Errorf("one of two containers running counted as all: %v", tr.seen["a"])
	}

	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a"}}
	vc.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.ConditionCertificatesReady, Status: metav1.ConditionTrue},
		{Type: v1alpha1.ConditionEtcdReady, Status: metav1.ConditionFalse},
	}
	tr.observe(vc)
	if !tr.has("a", stepCertificates) || tr.has("a", stepEtcdReady) {
		t.Errorf("conditions: %v", tr.seen["a"])
	}
	tr.forget("a")
	if tr.has("a", stepCertificates) {
		t.Error("forget kept what was seen")
	}
	tr.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
	if len(tr.seen) != 0 {
		t.Errorf("a pod of no tenant was tracked: %v", tr.seen)
	}
}

func TestComponentArgs(t *testing.T) {
	var a componentArgs
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	a.register(fs)
	if err := fs.Parse([]string{"--apiserver-arg=watch-cache=false", "--apiserver-arg", "--max-requests-inflight=50", "--scheduler-arg=v=2"}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Parse([]string{"--scheduler-arg=novalue"}); err == nil {
		t.Error("a flag without = was accepted")
	}
	vc := &v1alpha1.VirtualCluster{}
	a.apply(vc)
	if got := vc.Spec.ControlPlane.APIServer.ExtraArgs; len(got) != 2 || got["watch-cache"] != "false" || got["max-requests-inflight"] != "50" {
		t.Errorf("apiserver extraArgs %v", got)
	}
	if vc.Spec.ControlPlane.ControllerManager.ExtraArgs != nil {
		t.Errorf("controller-manager extraArgs %v, want none", vc.Spec.ControlPlane.ControllerManager.ExtraArgs)
	}
	if got, want := a.String(), "; extra flags: kube-apiserver --max-requests-inflight=50 --watch-cache=false, kube-scheduler --v=2"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := (&componentArgs{}).String(); got != "" {
		t.Errorf("no extra flags: String() = %q, want empty", got)
	}
}
