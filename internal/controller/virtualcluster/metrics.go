package virtualcluster

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// certificateExpiry is when each of a tenant's certificates expires, for alerts such as
// "expires within 30 days" (a certificate the operator renews never gets there).
var certificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "kubenest_certificate_expiry_timestamp_seconds",
	Help: "When a tenant's certificate or certificate authority expires, in seconds since the epoch.",
}, []string{"namespace", "virtualcluster", "certificate"})

func init() { metrics.Registry.MustRegister(certificateExpiry) }

// recordCertificates publishes a tenant's certificate expiries, replacing what it had.
func recordCertificates(vc *v1alpha1.VirtualCluster, items []v1alpha1.CertificateExpiry) {
	forgetCertificates(vc)
	for _, it := range items {
		certificateExpiry.WithLabelValues(vc.Namespace, vc.Name, it.Name).Set(float64(it.NotAfter.Unix()))
	}
}

// forgetCertificates removes a deleted tenant's series.
func forgetCertificates(vc *v1alpha1.VirtualCluster) {
	certificateExpiry.DeletePartialMatch(prometheus.Labels{"namespace": vc.Namespace, "virtualcluster": vc.Name})
}
