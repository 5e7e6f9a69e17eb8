package clustertree

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// The shared node's /metrics counts the tenant's pods on it as a kubelet counts its own, and
// says nothing of the process that serves it.
func TestNodeMetrics(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	exited := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	for _, p := range []*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: "kubenest-shared"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "init", State: exited}},
				ContainerStatuses:     []corev1.ContainerStatus{{Name: "web", State: running}, {Name: "sidecar", State: running}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "job"}, Spec: corev1.PodSpec{NodeName: "kubenest-shared"},
			Status: corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{Name: "job", State: exited}}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "pending"}, Spec: corev1.PodSpec{NodeName: "kubenest-shared"},
			Status: corev1.PodStatus{Phase: corev1.PodPending}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "elsewhere"}, Spec: corev1.PodSpec{NodeName: "lent-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "c", State: running}}}},
	} {
		if err := indexer.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(metricsHandler("kubenest-shared", corev1listers.NewPodLister(indexer)))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := string(body)
	for _, want := range []string{
		`kubelet_node_name{node="kubenest-shared"} 1`,
		"kubelet_running_pods 1",
		`kubelet_running_containers{container_state="running"} 2`,
		`kubelet_running_containers{container_state="exited"} 2`,
	} {
		if !strings.Contains(got, want+"\n") {
			t.Errorf("/metrics has no line %q:\n%s", want, got)
		}
	}
	for _, line := range strings.Split(got, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "kubelet_") {
			t.Errorf("/metrics says more than the tenant's own figures: %q", line)
		}
	}
}
