package virtualcluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
)

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

// TenantMetricsPath is where the operator's metrics server serves each tenant apiserver's own
// metrics: TenantMetricsPath + "<namespace>/<name>/metrics".
const TenantMetricsPath = "/tenants/"

// TenantMetrics serves a tenant apiserver's /metrics, fetched with what the operator holds for
// that tenant, so that a platform's scraper needs no credential of any tenant. It must only be
// mounted behind the metrics server's authentication and authorization (the host's RBAC, on the
// non-resource URL of the request): it authorizes nobody itself. A sleeping tenant is not
// woken: it answers 503.
type TenantMetrics struct {
	Reader  client.Reader
	Tenants *tenantclient.Registry
}

func (h *TenantMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, TenantMetricsPath), "/")
	if r.Method != http.MethodGet || len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] != "metrics" {
		http.Error(w, "GET "+TenantMetricsPath+"<namespace>/<name>/metrics", http.StatusNotFound)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	vc := &v1alpha1.VirtualCluster{}
	if err := h.Reader.Get(ctx, client.ObjectKey{Namespace: parts[0], Name: parts[1]}, vc); err != nil {
		if apierrors.IsNotFound(err) {
			http.Error(w, "no virtual cluster "+parts[0]+"/"+parts[1], http.StatusNotFound)
			return
		}
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if vc.Spec.Sleep.Asleep || meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionAsleep) {
		http.Error(w, "the virtual cluster is asleep: nothing of it runs", http.StatusServiceUnavailable)
		return
	}
	cfg, err := h.Tenants.Config(vc)
	if errors.Is(err, tenantclient.ErrNotReached) {
		http.Error(w, "the virtual cluster's apiserver has not been reached yet", http.StatusServiceUnavailable)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/metrics", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header.Set("Accept", r.Header.Get("Accept"))
	resp, err := hc.Do(req)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Fetching a tenant's metrics", "virtualCluster", klog.KObj(vc), "error", err.Error())
		http.Error(w, "the virtual cluster's apiserver did not answer", http.StatusBadGateway)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}
