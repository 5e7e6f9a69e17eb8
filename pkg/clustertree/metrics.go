package clustertree

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

// metricsHandler serves the virtual node's /metrics, as a kubelet's: what a kubelet says there
// of its node and pods, for the tenant's own monitoring (a Prometheus that scrapes every
// node's kubelet through the apiserver, as most do, finds the shared node up, and
// Kubernetes' e2e framework reads it when a test fails). Only the tenant's own figures: nothing
// of the process that serves them, which serves other tenants too. The tenant's authorizer
// decides who may read it (nodes/metrics, as for a kubelet).
func metricsHandler(node string, pods corev1listers.PodLister) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(&nodeMetrics{
		node: node, pods: pods,
		nodeName: prometheus.NewDesc("kubelet_node_name", "The node's name. The count is always 1.", []string{"node"}, nil),
		runningPods: prometheus.NewDesc("kubelet_running_pods",
			"Number of pods that have a running pod sandbox (on the shared node: pods Running in the host).", nil, nil),
		runningContainers: prometheus.NewDesc("kubelet_running_containers",
			"Number of containers currently running (container_state: running, or exited for those that ended).", []string{"container_state"}, nil),
	})
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

// nodeMetrics computes the figures from the tenant's pods on the node when they are read.
type nodeMetrics struct {
	node                                     string
	pods                                     corev1listers.PodLister
	nodeName, runningPods, runningContainers *prometheus.Desc
}

func (m *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.nodeName
	ch <- m.runningPods
	ch <- m.runningContainers
}

func (m *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.nodeName, prometheus.GaugeValue, 1, m.node)
	pods, err := m.pods.List(labels.Everything())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.runningPods, err)
		return
	}
	var running, containersRunning, containersExited int
	for _, p := range pods {
		if p.Spec.NodeName != m.node {
			continue
		}
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
			for _, s := range statuses {
				switch {
				case s.State.Running != nil:
					containersRunning++
				case s.State.Terminated != nil:
					containersExited++
				}
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(m.runningPods, prometheus.GaugeValue, float64(running))
	ch <- prometheus.MustNewConstMetric(m.runningContainers, prometheus.GaugeValue, float64(containersRunning), "running")
	ch <- prometheus.MustNewConstMetric(m.runningContainers, prometheus.GaugeValue, float64(containersExited), "exited")
}
