package virtualcluster_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/testenv"
)

// metricValue is the value of the series name with exactly labels in what g gathers, read as
// a gauge or counter, or a histogram's sample count; ok is false when there is none.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// tenantSeries gathers the TenantCollector's series from c, as the elected operator would.
func tenantSeries(c client.Reader) prometheus.Gatherer {
	elected := make(chan struct{})
	close(elected)
	reg := prometheus.NewRegistry()
	reg.MustRegister(&virtualcluster.TenantCollector{Reader: c, Elected: elected})
	return reg
}

// TestDashboardSeries: every kubenest_ series the chart's Grafana dashboard queries is one the
// operator serves.
func TestDashboardSeries(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "kubenest", "files", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	served := map[string]bool{}
	for _, d := range []prometheus.Collector{&virtualcluster.TenantCollector{}} {
		ch := make(chan *prometheus.Desc, 16)
		d.Describe(ch)
		close(ch)
		for desc := range ch {
			served[regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(desc.String())[1]] = true
		}
	}
	families, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		served[f.GetName()] = true
	}
	// Histograms and vectors without a series yet are not gathered: these are registered.
	for _, name := range []string{"kubenest_virtualcluster_create_to_ready_seconds", "kubenest_virtualcluster_reconcile_errors_total", "kubenest_certificate_expiry_timestamp_seconds"} {
		served[name] = true
	}
	series := regexp.MustCompile(`kubenest_[a-z_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			for _, name := range series.FindAllString(target.Expr, -1) {
				base := regexp.MustCompile(`_(bucket|sum|count)$`).ReplaceAllString(name, "")
				if !served[name] && !served[base] {
					t.Errorf("panel %q queries %s, which the operator does not serve", p.Title, name)
				}
			}
		}
	}
}
