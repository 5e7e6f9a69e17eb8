//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// TestOperatorMetrics scrapes the operator's metrics endpoint as a platform's Prometheus would:
// over HTTPS, with a ServiceAccount token the host's RBAC allows (the chart's
// kubenest:metrics-reader), for the series of a new tenant and for that tenant apiserver's own
// metrics; and not at all without a token or without the role. After the tenant's deletion its
// series are gone.
func TestOperatorMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-metrics")
	vc := newVC(ns, "watched", v1alpha1.ExposureClusterIP)
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	token := tenantToken(t, ctx, ns, "scraper", "")
	waitReady(t, ctx, vc)
	base := operatorMetricsURL(t, ctx)

	t.Run("only for scrapers the host allows", func(t *testing.T) {
		// controller-runtime's filter answers 401 without a token, 403 without the role, and
		// 500 for a token the host's TokenReview reports an error for (a made-up one): refused
		// all the same.
		for who, tok := range map[string]string{"no token": "", "a made-up token": "made-up", "a ServiceAccount without the role": token} {
			code, body := scrape(ctx, base+"/metrics", tok)
			if code == http.StatusOK || strings.Contains(body, "kubenest_") {
				t.Errorf("%s: %d %.200s", who, code, body)
			}
			if code, body := scrape(ctx, base+"/tenants/"+ns+"/"+vc.Name+"/metrics", tok); code == http.StatusOK || strings.Contains(body, "apiserver_") {
				t.Errorf("%s, the tenant's apiserver metrics: %d %.200s", who, code, body)
			}
		}
	})

	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-scraper"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubenest:metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}}}
	if err := host.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Delete(context.Background(), crb) })

	tenant := fmt.Sprintf(`namespace=%q,virtualcluster=%q`, ns, vc.Name)
	want := []string{
		`kubenest_virtualcluster_ready{` + tenant + `} 1`,
		fmt.Sprintf(`kubenest_virtualcluster_phase{namespace=%q,phase="Ready",virtualcluster=%q} 1`, ns, vc.Name),
		`kubenest_virtualcluster_asleep{` + tenant + `} 0`,
		`kubenest_virtualcluster_shared_node_pods{` + tenant + `} 0`,
		`kubenest_certificate_expiry_timestamp_seconds{certificate="apiserver",` + tenant + `}`,
		`kubenest_virtualcluster_create_to_ready_seconds_count`,
	}
	t.Run("the tenant's series", func(t *testing.T) {
		// The phase is read when scraped, and the role is cached by the operator for a while
		// once refused: poll.
		var body string
		err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, body = scrape(ctx, base+"/metrics", token)
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
		}
	})

	t.Run("the tenant apiserver's own metrics", func(t *testing.T) {
		code, body := scrape(ctx, base+"/tenants/"+ns+"/"+vc.Name+"/metrics", token)
		if code != http.StatusOK || !strings.Contains(body, "apiserver_request_total") {
			t.Errorf("%d %.300s", code, body)
		}
		if code, _ := scrape(ctx, base+"/tenants/"+ns+"/nope/metrics", token); code != http.StatusNotFound {
			t.Errorf("a tenant that does not exist: %d", code)
		}
	})

	if err := host.Delete(ctx, vc); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		code, body := scrape(ctx, base+"/metrics", token)
		return code == http.StatusOK && !strings.Contains(body, tenant), nil
	})
	if err != nil {
		t.Errorf("the deleted tenant's series are still served: %v", err)
	}
}

// operatorMetricsURL is the elected operator pod's metrics endpoint, which this machine reaches
// directly (its pod network is routed here).
func operatorMetricsURL(t *testing.T, ctx context.Context) string {
	t.Helper()
	pods := &corev1.PodList{}
	if err := host.List(ctx, pods, client.InNamespace(portalNamespace), client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			return "https://" + net.JoinHostPort(p.Status.PodIP, "8080")
		}
	}
	t.Fatalf("no running operator pod in %s", portalNamespace)
	return ""
}

// scrape GETs url with a bearer token (none when empty), trusting the operator's self-signed
// certificate as a Prometheus told insecureSkipVerify would.
func scrape(ctx context.Context, url, token string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
