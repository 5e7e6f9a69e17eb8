package virtualcluster

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// The operator's per-tenant series, served with controller-runtime's own on its metrics
// endpoint. Every series has the labels namespace and virtualcluster.
var (
	// certificateExpiry is when each of a tenant's certificates expires, for alerts such as
	// "expires within 30 days" (a certificate the operator renews never gets there).
	certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kubenest_certificate_expiry_timestamp_seconds",
		Help: "When a tenant's certificate or certificate authority expires, in seconds since the epoch.",
	}, []string{"namespace", "virtualcluster", "certificate"})

	// createToReady is how long new tenants took to become Ready the first time.
	createToReady = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "kubenest_virtualcluster_create_to_ready_seconds",
		Help:    "Seconds from a VirtualCluster's creation to its first Ready (not counting later recoveries or wakes).",
		Buckets: []float64{2, 4, 6, 8, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600},
	})

	// reconcileErrors counts the reconcile passes of a tenant that failed (and were retried).
	reconcileErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kubenest_virtualcluster_reconcile_errors_total",
		Help: "Reconcile passes of a VirtualCluster that ended in an error.",
	}, []string{"namespace", "virtualcluster"})
)

// Series read from the operator's cache when scraped (TenantCollector).
var (
	phaseDesc = prometheus.NewDesc("kubenest_virtualcluster_phase",
		"1 for a VirtualCluster's current phase, 0 for the others.", []string{"namespace", "virtualcluster", "phase"}, nil)
	readyDesc = prometheus.NewDesc("kubenest_virtualcluster_ready",
		"1 when a VirtualCluster's Ready condition is True, else 0.", []string{"namespace", "virtualcluster"}, nil)
	asleepDesc = prometheus.NewDesc("kubenest_virtualcluster_asleep",
		"1 when a VirtualCluster is asleep (no process of it runs in the host), else 0.", []string{"namespace", "virtualcluster"}, nil)
	lentNodesDesc = prometheus.NewDesc("kubenest_virtualcluster_lent_nodes",
		"Host nodes lent to a VirtualCluster.", []string{"namespace", "virtualcluster"}, nil)
	sharedPodsDesc = prometheus.NewDesc("kubenest_virtualcluster_shared_node_pods",
		"Host pods running a VirtualCluster's pods of the shared node (not finished).", []string{"namespace", "virtualcluster"}, nil)
)

// phases are every phase kubenest_virtualcluster_phase reports.
var phases = []v1alpha1.VirtualClusterPhase{v1alpha1.PhasePending, v1alpha1.PhaseProvisioning, v1alpha1.PhaseReady,
	v1alpha1.PhaseDegraded, v1alpha1.PhaseFailed, v1alpha1.PhaseDeleting, v1alpha1.PhaseSleeping}

func init() {
	metrics.Registry.MustRegister(certificateExpiry, createToReady, reconcileErrors)
}

// recordCertificates publishes a tenant's certificate expiries, replacing what it had.
func recordCertificates(vc *v1alpha1.VirtualCluster, items []v1alpha1.CertificateExpiry) {
	certificateExpiry.DeletePartialMatch(tenantLabels(vc))
	for _, it := range items {
		certificateExpiry.WithLabelValues(vc.Namespace, vc.Name, it.Name).Set(float64(it.NotAfter.Unix()))
	}
}

// forgetMetrics removes a deleted tenant's series.
func forgetMetrics(vc *v1alpha1.VirtualCluster) {
	certificateExpiry.DeletePartialMatch(tenantLabels(vc))
	reconcileErrors.DeletePartialMatch(tenantLabels(vc))
}

func tenantLabels(vc *v1alpha1.VirtualCluster) prometheus.Labels {
	return prometheus.Labels{"namespace": vc.Namespace, "virtualcluster": vc.Name}
}

// countError counts a failed reconcile pass of vc, and returns err.
func countError(vc *v1alpha1.VirtualCluster, err error) error {
	if err != nil {
		reconcileErrors.With(tenantLabels(vc)).Inc()
	}
	return err
}

// firstReady records how long vc took to become Ready, when this pass made it Ready for the
// first time: from Pending or Provisioning, not from Degraded or Sleeping.
func firstReady(vc *v1alpha1.VirtualCluster, before v1alpha1.VirtualClusterPhase, now time.Time) {
	if vc.Status.Phase == v1alpha1.PhaseReady && (before == "" || before == v1alpha1.PhasePending || before == v1alpha1.PhaseProvisioning) {
		createToReady.Observe(now.Sub(vc.CreationTimestamp.Time).Seconds())
	}
}

// TenantCollector reports each tenant's phase, readiness, sleep, lent nodes and shared-node
// pods from the operator's cache when scraped: nothing to keep up to date, nothing left over
// when a tenant goes. Only the elected operator reports them, so that a standby replica does
// not double them.
type TenantCollector struct {
	Reader  client.Reader
	Elected <-chan struct{}
}

// Describe implements prometheus.Collector.
func (c *TenantCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{phaseDesc, readyDesc, asleepDesc, lentNodesDesc, sharedPodsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *TenantCollector) Collect(ch chan<- prometheus.Metric) {
	select {
	case <-c.Elected:
	default:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	vcs := &v1alpha1.VirtualClusterList{}
	if err := c.Reader.List(ctx, vcs); err != nil {
		klog.Background().Error(err, "Listing VirtualClusters for metrics")
		return
	}
	pods := &corev1.PodList{}
	if err := c.Reader.List(ctx, pods, client.MatchingLabels{clustertree.LabelOrigin: clustertree.OriginClusterTree}); err != nil {
		klog.Background().Error(err, "Listing shared-node pods for metrics")
		return
	}
	shared := map[client.ObjectKey]int{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			shared[client.ObjectKey{Namespace: p.Namespace, Name: p.Labels[naming.LabelVirtualCluster]}]++
		}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, vc := range vcs.Items {
		ns, name := vc.Namespace, vc.Name
		current := vc.Status.Phase
		if current == "" {
			current = v1alpha1.PhasePending
		}
		for _, p := range phases {
			gauge(phaseDesc, boolValue(p == current), ns, name, string(p))
		}
		gauge(readyDesc, boolValue(meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionReady)), ns, name)
		gauge(asleepDesc, boolValue(meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionAsleep)), ns, name)
		gauge(lentNodesDesc, float64(len(vc.Status.Nodes)), ns, name)
		gauge(sharedPodsDesc, float64(shared[client.ObjectKey{Namespace: ns, Name: name}]), ns, name)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
