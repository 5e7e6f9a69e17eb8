package smoke

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// readyTenant runs a tenant's control plane from the operator's material (authorities, leaves,
// the Secrets the pods mount) with the default settings, and waits until its apiserver is
// ready. It returns the tenant, the client config of the admin kubeconfig the operator would
// write for where the apiserver listens on this machine, a client of it, and a context that
// ends with the test (3 minutes at most).
func readyTenant(t *testing.T, name string, uid types.UID) (*testtenant.Tenant, *rest.Config, kubernetes.Interface, context.Context) {
	t.Helper()
	tenant, cfg := testtenant.RunStandalone(t, testtenant.Binaries(t), testtenant.VirtualCluster(name, uid))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	if err := tenant.WaitReady(ctx, cfg); err != nil {
		t.Fatalf("tenant apiserver not ready: %v", err)
	}
	return tenant, cfg, kubernetes.NewForConfigOrDie(cfg), ctx
}
