//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// certManagerNamespace is where the local cluster's cert-manager keeps ClusterIssuer Secrets.
const certManagerNamespace = "cert-manager"

// TestCertManagerIssuer: a tenant whose issuer is a cert-manager CA ClusterIssuer (cert-manager's
// real controllers run in the local cluster) becomes Ready, its apiserver's certificate
// chains to the ClusterIssuer's root, kubectl works, and deleting it leaves nothing behind.
func TestCertManagerIssuer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-cert-manager")

	// The platform's CA: a root the platform brings (made here) in a Secret, and a CA
	// ClusterIssuer that signs with it. (A root issued by cert-manager's own self-signed
	// issuer was once issued twice within a second, with a new key the second time, so that
	// the tenant's CA chained to a root the Secret no longer held.)
	root, err := pki.NewCA("e2e-platform-root", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	rootKey, err := root.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	rootCert := pki.EncodeCert(root.Cert)
	platform := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "e2e-platform-root", Namespace: certManagerNamespace}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: rootCert, corev1.TLSPrivateKeyKey: rootKey}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "e2e-platform-ca"},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "e2e-platform-root"}}}},
	}
	for _, obj := range platform {
		if err := host.Create(ctx, obj); err != nil {
			t.Fatalf("creating %s: %v (is the local cluster's cert-manager running? 'make up' starts it)", obj.GetName(), err)
		}
		t.Cleanup(func() { _ = host.Delete(context.Background(), obj) })
	}

	vc := newVC(ns, "issued", v1alpha1.ExposureNodePort)
	vc.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "e2e-platform-ca", Kind: cmapi.ClusterIssuerKind}}
	start := time.Now()
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	if vc.Spec.PKI == nil {
		t.Fatal("spec.pki was dropped: the cluster's VirtualCluster CRD is older than this test (Helm never upgrades CRDs; 'make redeploy' applies them)")
	}
	got := waitReady(t, ctx, vc)
	t.Logf("tenant with a cert-manager CA Ready in %s", time.Since(start).Round(100*time.Millisecond))

	// A client that trusts only the ClusterIssuer's root verifies the apiserver: it serves
	// its certificate with the tenant CA cert-manager issued.
	roots := x509.NewCertPool()
	roots.AddCert(root.Cert)
	endpoint, err := url.Parse(got.Status.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", endpoint.Host, &tls.Config{RootCAs: roots, ServerName: endpoint.Hostname()})
	if err != nil {
		t.Fatalf("TLS to the tenant apiserver %s, trusting only the ClusterIssuer's root: %v", endpoint.Host, err)
	}
	chain := conn.ConnectionState().VerifiedChains[0]
	_ = conn.Close()
	if len(chain) != 3 || chain[1].Subject.CommonName != vc.Name+"-ca" || chain[2].Subject.CommonName != "e2e-platform-root" {
		var names []string
		for _, c := range chain {
			names = append(names, c.Subject.CommonName)
		}
		t.Errorf("verified chain %v, want apiserver -> %s-ca -> e2e-platform-root", names, vc.Name)
	}

	kubeconfig := downloadKubeconfig(t, ctx, vc)
	kubectl(t, "--kubeconfig", kubeconfig, "get", "namespace", "kube-system")

	// The tenant's CA Certificate, and the Secret cert-manager writes its key to, are in the
	// control-plane namespace, not in the tenant's.
	names := naming.For(vc.Name)
	cpNS := controlplane.Namespace(got)
	if cpNS != naming.ControlPlaneNamespace(ns) {
		t.Errorf("status.controlPlaneNamespace %q, want %q", got.Status.ControlPlaneNamespace, naming.ControlPlaneNamespace(ns))
	}
	if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: names.CACertificate()}, &cmapi.Certificate{}); err != nil {
		t.Errorf("the tenant's cert-manager Certificate in %s: %v", cpNS, err)
	}
	for _, name := range []string{names.CACertificate(), names.IssuedCASecret()} {
		if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("Secret %s in the tenant's namespace %s: %v; want none", name, ns, err)
		}
	}
	if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: names.CACertificate()}, &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
		t.Errorf("a cert-manager Certificate %s in the tenant's namespace %s: %v; want none", names.CACertificate(), ns, err)
	}

	deleteAndCheckGone(t, ctx, vc)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: names.CACertificate()}, &cmapi.Certificate{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("the tenant's cert-manager Certificate remains in %s after deletion", cpNS)
	}
}
