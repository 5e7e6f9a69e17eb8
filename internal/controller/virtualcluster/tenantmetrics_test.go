package virtualcluster_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
)

// TestTenantMetricsRefusals: what the tenant metrics endpoint answers before it would reach a
// tenant; reaching one is the e2e's (TestOperatorMetrics). A sleeping tenant is never woken.
func TestTenantMetricsRefusals(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = v1alpha1.AddToScheme(scheme)
	asleep := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "sleepy"}}
	asleep.Spec.Sleep.Asleep = true
	fresh := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fresh"}}
	h := &virtualcluster.TenantMetrics{
		Reader:  fake.NewClientBuilder().WithScheme(scheme).WithObjects(asleep, fresh).Build(),
		Tenants: &tenantclient.Registry{},
	}
	for path, want := range map[string]struct {
		code int
		says string
	}{
		"/tenants/team/sleepy/metrics":     {http.StatusServiceUnavailable, "asleep"},
		"/tenants/team/fresh/metrics":      {http.StatusServiceUnavailable, "not been reached"},
		"/tenants/team/gone/metrics":       {http.StatusNotFound, "no virtual cluster team/gone"},
		"/tenants/team/fresh":              {http.StatusNotFound, "<namespace>/<name>/metrics"},
		"/tenants/team/fresh/metrics/more": {http.StatusNotFound, "<namespace>/<name>/metrics"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want.code || !strings.Contains(rec.Body.String(), want.says) {
			t.Errorf("%s: %d %q, want %d saying %q", path, rec.Code, rec.Body.String(), want.code, want.says)
		}
	}
}
