// Command certmanager runs cert-manager's real certificate controllers and its CA and
// self-signed issuers against the local host cluster, so tenants whose spec.pki names a
// cert-manager issuer can be tested end to end. Test-only: "make up" starts it as a process of
// this machine and "make down" stops it. It installs cert-manager's CRDs first.
//
//	certmanager --kubeconfig _output/host.kubeconfig [--crds DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubenest-io/kubenest/internal/testcertmanager"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Kubeconfig of the host cluster, with rights to cert-manager's kinds and to Secrets everywhere. Required.")
	crds := flag.String("crds", "", "Directory of cert-manager's CRDs (deploy/crds of its module); default: found with 'go list -m' in this repository.")
	namespace := flag.String("cluster-resource-namespace", "cert-manager", "Namespace where ClusterIssuers keep their Secrets (created when missing).")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: certmanager --kubeconfig FILE\n\nRuns cert-manager's certificate, CA and self-signed issuer controllers (test-only).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *kubeconfig == "" {
		fmt.Fprintln(os.Stderr, "certmanager: --kubeconfig is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *crds, *namespace); err != nil {
		fmt.Fprintf(os.Stderr, "certmanager: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, crds, namespace string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	if crds == "" {
		if crds, err = testcertmanager.CRDDir(ctx); err != nil {
			return fmt.Errorf("--crds not given: %w", err)
		}
	}
	if err := testcertmanager.InstallCRDs(ctx, cfg, crds); err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	fmt.Printf("certmanager: CRDs installed; running cert-manager's controllers (ClusterIssuer Secrets in %s)\n", namespace)
	return testcertmanager.Run(ctx, kubeconfig, namespace)
}
