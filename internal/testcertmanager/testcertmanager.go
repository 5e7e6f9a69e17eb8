// Package testcertmanager runs cert-manager's real controllers (certificates, the CA and
// self-signed issuers, the request approver) in this process, against a host cluster, for
// KubeNest's tests. cert-manager's own binaries live in modules the Go proxy does not serve;
// its root module holds the controllers and the CRDs, which is all a test needs. ACME, Vault,
// Venafi and the webhook are not run.
package testcertmanager

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	"k8s.io/client-go/rest"

	"github.com/kubenest-io/kubenest/internal/crdinstall"

	// The controllers register themselves with controllerpkg.Known().
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// Module is the cert-manager module whose controllers and CRDs are used; go.mod pins it.
const Module = "github.com/cert-manager/cert-manager"

// controllers are what a CA or self-signed issuer needs, end to end: issuers become Ready,
// Certificates get CertificateRequests, which are approved and signed, and the Secret is
// written and kept.
var controllers = []string{
	"issuers", "clusterissuers",
	"certificates-trigger", "certificates-key-manager", "certificates-request-manager",
	"certificates-issuing", "certificates-readiness", "certificates-revision-manager",
	"certificaterequests-approver", "certificaterequests-issuer-ca", "certificaterequests-issuer-selfsigned",
}

// crdFiles are the CRDs of the kinds those controllers use.
var crdFiles = []string{
	"cert-manager.io_certificates.yaml", "cert-manager.io_certificaterequests.yaml",
	"cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml",
}

// CRDDir is the directory of cert-manager's CRDs in the Go module cache (go list -m, run in
// this repository).
func CRDDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", Module).Output()
	if err != nil {
		return "", fmt.Errorf("finding the %s module (go list -m): %w", Module, err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "deploy", "crds"), nil
}

// InstallCRDs creates or updates the CRDs of cert-manager's kinds the controllers use, from
// dir (see CRDDir), and waits until they are served.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) error {
	paths := make([]string, 0, len(crdFiles))
	for _, f := range crdFiles {
		paths = append(paths, filepath.Join(dir, f))
	}
	return crdinstall.Install(ctx, cfg, paths...)
}

// Run runs the controllers until ctx ends. kubeconfig reaches the host cluster with rights
// to cert-manager's kinds and to Secrets everywhere; ClusterIssuers keep their CA Secrets in
// clusterResourceNamespace.
func Run(ctx context.Context, kubeconfig, clusterResourceNamespace string) error {
	ctx = logf.NewContext(ctx, logf.Log, "cert-manager")
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace:        clusterResourceNamespace,
			ClusterIssuerAmbientCredentials: true,
		},
		CertificateOptions: controllerpkg.CertificateOptions{
			// cert-manager's defaults; zero would retry a failed request in a hot loop.
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("cert-manager context: %w", err)
	}
	base, err := factory.Build()
	if err != nil {
		return fmt.Errorf("cert-manager context: %w", err)
	}
	// Every controller registers its informers when built, so all are built before the
	// informer factories start.
	var loops []controllerpkg.Interface
	for _, name := range controllers {
		construct, ok := controllerpkg.Known()[name]
		if !ok {
			return fmt.Errorf("cert-manager controller %q is not registered", name)
		}
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("building cert-manager controller %s: %w", name, err)
		}
		loops = append(loops, c)
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	errs := make(chan error, len(loops))
	for i, c := range loops {
		go func() {
			if err := c.Run(2, ctx); err != nil {
				errs <- fmt.Errorf("cert-manager controller %s: %w", controllers[i], err)
				return
			}
			errs <- nil
		}()
	}
	var first error
	for range loops {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
