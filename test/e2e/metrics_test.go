//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// TestOperatorMetrics scrapes the operator's metrics Service, as a platform's Prometheus
// would, for the series of a new tenant: Ready, its phase, its certificates, and the time it
// took; and after its deletion, that they are gone.
func TestOperatorMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-metrics")
	vc := newVC(ns, "watched", v1alpha1.ExposureClusterIP)
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ctx, vc)
	tenant := fmt.Sprintf(`namespace=%q,virtualcluster=%q`, ns, vc.Name)
	want := []string{
		`kubenest_virtualcluster_ready{` + tenant + `} 1`,
		fmt.Sprintf(`kubenest_virtualcluster_phase{namespace=%q,phase="Ready",virtualcluster=%q} 1`, ns, vc.Name),
		`kubenest_virtualcluster_asleep{` + tenant + `} 0`,
		`kubenest_virtualcluster_shared_node_pods{` + tenant + `} 0`,
		`kubenest_certificate_expiry_timestamp_seconds{certificate="apiserver",` + tenant + `}`,
		`kubenest_virtualcluster_create_to_ready_seconds_count`,
	}
	// The phase is read when scraped; give the operator's cache a moment to see the status.
	var body string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		body, _ = scrapeOperator(ctx)
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Logf("last scrape: %.2000s", body)
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("the operator's metrics lack %s", w)
			}
		}
		t.FailNow()
	}

	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := scrapeOperator(ctx)
		return err == nil && !strings.Contains(body, tenant), nil
	})
	if err != nil {
		t.Errorf("the deleted tenant's series are still served: %v", err)
	}
}

// scrapeOperator reads the operator's metrics through the host apiserver's Service proxy.
func scrapeOperator(ctx context.Context) (string, error) {
	body, err := hostCS.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/namespaces", portalNamespace, "services", "kubenest-operator-metrics:metrics", "proxy", "metrics").DoRaw(ctx)
	return string(body), err
}
