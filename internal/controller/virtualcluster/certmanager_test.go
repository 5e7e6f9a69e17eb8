package virtualcluster_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/testcertmanager"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// TestCertManagerIssuer follows a tenant whose CA a cert-manager ClusterIssuer signs, with
// cert-manager's real controllers: a clear condition while cert-manager is missing and while
// the issuer does not exist, then a CA issued by cert-manager that every tenant certificate
// chains to, a refused CA rotation, and nothing left of it after deletion.
func TestCertManagerIssuer(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 4*time.Minute, "cert-manager")
	c := env.Client
	// Each tenant of the platform's issuers may name its own domain in its extra SANs.
	startOperator(t, env, &tenantRoutes{}, func(r *virtualcluster.Reconciler) {
		r.SANDomains = virtualcluster.SANDomains{"{name}.{namespace}.tenants.example.com"}
	})
	ownName := "api.gamma." + ns + ".tenants.example.com"
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "gamma", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			Etcd:         v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{ExtraSANs: []string{ownName, "10.9.8.7"}}},
			PKI:          &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform-ca", Kind: cmapi.ClusterIssuerKind}},
		},
	}
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	names := naming.For(vc.Name)
	certificatesMessage := func(v *v1alpha1.VirtualCluster) string {
		if cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionCertificatesReady); cond != nil {
			return cond.Message
		}
		return ""
	}

	t.Run("without cert-manager", func(t *testing.T) {
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return reason(v, v1alpha1.ConditionCertificatesReady) == virtualcluster.ReasonCertManagerMissing
		})
		if msg := certificatesMessage(got); !strings.Contains(msg, "cert-manager is not installed") {
			t.Errorf("message %q does not say cert-manager is missing", msg)
		}
	})

	crds, err := testcertmanager.CRDDir(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := testcertmanager.InstallCRDs(ctx, env.Config, crds); err != nil {
		t.Fatal(err)
	}
	cmCtx, stopCM := context.WithCancel(context.Background())
	cmDone := make(chan error, 1)
	go func() { cmDone <- testcertmanager.Run(cmCtx, env.WriteKubeconfig(t), "cert-manager") }()
	t.Cleanup(func() {
		stopCM()
		if err := <-cmDone; err != nil {
			t.Errorf("cert-manager: %v", err)
		}
	})

	t.Run("issuer missing", func(t *testing.T) {
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return reason(v, v1alpha1.ConditionCertificatesReady) == virtualcluster.ReasonIssuerNotReady
		})
		if msg := certificatesMessage(got); !strings.Contains(msg, `spec.pki.issuerRef: ClusterIssuer "platform-ca" not found`) {
			t.Errorf("message %q does not name the missing issuer", msg)
		}
	})

	// The platform's CA: a self-signed root, and a CA ClusterIssuer signing with it.
	ref := cmmeta.IssuerReference{Name: "selfsigned", Kind: cmapi.ClusterIssuerKind, Group: "cert-manager.io"}
	for _, obj := range []client.Object{
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "selfsigned"},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{SelfSigned: &cmapi.SelfSignedIssuer{}}}},
		&cmapi.Certificate{ObjectMeta: metav1.ObjectMeta{Name: "platform-root", Namespace: "cert-manager"},
			Spec: cmapi.CertificateSpec{IsCA: true, CommonName: "platform-root", SecretName: "platform-root", IssuerRef: ref,
				PrivateKey: &cmapi.CertificatePrivateKey{Algorithm: cmapi.ECDSAKeyAlgorithm, Size: 256}}},
		&cmapi.ClusterIssuer{ObjectMeta: metav1.ObjectMeta{Name: "platform-ca"},
			Spec: cmapi.IssuerSpec{IssuerConfig: cmapi.IssuerConfig{CA: &cmapi.CAIssuer{SecretName: "platform-root"}}}},
	} {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("issued by cert-manager", func(t *testing.T) {
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionCertificatesReady) && isTrue(v, v1alpha1.ConditionKubeconfigReady)
		})
		rootSecret := &corev1.Secret{}
		if err := c.Get(ctx, types.NamespacedName{Namespace: "cert-manager", Name: "platform-root"}, rootSecret); err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(rootSecret.Data[corev1.TLSCertKey])
		// cert-manager's Secret is in the control-plane namespace, with the Certificate.
		issued := secret(t, ctx, c, cpNS, names.IssuedCASecret())
		if issued.Labels[naming.LabelVirtualCluster] != vc.Name || issued.Labels[naming.LabelVirtualClusterNamespace] != ns {
			t.Errorf("cert-manager's Secret lacks the tenant's labels: %v", issued.Labels)
		}
		if err := c.Get(ctx, key(names.IssuedCASecret()), &corev1.Secret{}); !apierrors.IsNotFound(err) {
			t.Errorf("cert-manager's Secret in the tenant's namespace: %v", err)
		}
		ca := secret(t, ctx, c, cpNS, names.CASecret())
		if string(ca.Data[controlplane.KeyCACert]) != string(issued.Data[corev1.TLSCertKey]) {
			t.Fatal("the tenant's CA is not the one cert-manager issued")
		}

		// The apiserver serves its certificate and the tenant CA: a client trusting only the
		// platform's root verifies it.
		chain := parseChain(t, secret(t, ctx, c, cpNS, names.ControlPlaneCertsSecret()).Data[controlplane.LeafAPIServer.CertFile()])
		if len(chain) != 2 {
			t.Fatalf("apiserver.crt holds %d certificates, want 2", len(chain))
		}
		inter := x509.NewCertPool()
		inter.AddCert(chain[1])
		if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
			t.Errorf("the apiserver's certificate does not chain to the ClusterIssuer's root: %v", err)
		}
		// The admin kubeconfig's client certificate is the tenant CA's too.
		kc, err := kubeconfig.Parse(secret(t, ctx, c, ns, names.KubeconfigSecret()).Data[controlplane.KeyKubeconfig])
		if err != nil {
			t.Fatal(err)
		}
		admin := parseChain(t, kc.ClientCertPEM)
		if _, err := admin[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the admin certificate does not chain to the ClusterIssuer's root: %v", err)
		}
		if got.Status.Certificates == nil || len(got.Status.Certificates.Items) == 0 {
			t.Error("status.certificates is empty")
		}

		// Should the CA's key leak (an earlier release's tenant kept it in its own namespace),
		// what is signed with it for a name that is not the tenant's, a client that trusts
		// the platform's root refuses.
		if c := chain[1]; !c.PermittedDNSDomainsCritical || !slices.Contains(c.PermittedDNSDomains, names.APIServerService()+"."+cpNS+".svc") ||
			!slices.Contains(c.PermittedDNSDomains, ownName) {
			t.Errorf("the issued CA's name constraints: critical %v, permitted %q", c.PermittedDNSDomainsCritical, c.PermittedDNSDomains)
		}
		tenantCA, err := pki.ParseKeyPair(ca.Data[controlplane.KeyCACert], ca.Data[controlplane.KeyCAKey])
		if err != nil {
			t.Fatal(err)
		}
		forged, err := tenantCA.Issue(pki.CertSpec{CommonName: "www.example.com", DNSNames: []string{"www.example.com"}, Usage: pki.UsageServer}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var invalid x509.CertificateInvalidError
		if _, err := forged.Cert.Verify(x509.VerifyOptions{DNSName: "www.example.com", Roots: roots, Intermediates: inter}); !errors.As(err, &invalid) ||
			invalid.Reason != x509.CANotAuthorizedForThisName {
			t.Errorf("a certificate the tenant signed for www.example.com: %v, want refused by the CA's name constraints", err)
		}
	})

	t.Run("an issuer the platform does not allow", func(t *testing.T) {
		other := &v1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "delta", Namespace: ns},
			Spec: v1alpha1.VirtualClusterSpec{
				Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
				// Exists and is ready, but is not one the operator lets tenants use.
				PKI: &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "selfsigned", Kind: cmapi.ClusterIssuerKind}},
			},
		}
		if err := c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, ctx, c, other.Name, func(v *v1alpha1.VirtualCluster) bool {
			return reason(v, v1alpha1.ConditionCertificatesReady) == virtualcluster.ReasonIssuerNotAllowed
		})
		if msg := certificatesMessage(got); !strings.Contains(msg, "spec.pki.issuerRef: ClusterIssuer/selfsigned is not an issuer the platform lets tenants use") {
			t.Errorf("message %q does not name the field and the issuer", msg)
		}
		if err := c.Get(ctx, cpKey(naming.For(other.Name).CACertificate()), &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Certificate was asked of the disallowed issuer: %v", err)
		}
		if err := c.Delete(ctx, other); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an extra SAN outside the tenant's own domain", func(t *testing.T) {
		// Another tenant's name: the CA would be one for gamma's names too, under the root.
		other := &v1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: "epsilon", Namespace: ns},
			Spec: v1alpha1.VirtualClusterSpec{
				Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
				ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{
					ExtraSANs: []string{"epsilon." + ns + ".tenants.example.com", ownName}}},
				PKI: &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform-ca", Kind: cmapi.ClusterIssuerKind}},
			},
		}
		if err := c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		got := waitFor(t, ctx, c, other.Name, func(v *v1alpha1.VirtualCluster) bool {
			return reason(v, v1alpha1.ConditionCertificatesReady) == virtualcluster.ReasonExtraSANNotAllowed
		})
		if msg := certificatesMessage(got); !strings.Contains(msg, "spec.controlPlane.exposure.extraSANs: "+ownName+" is not within") {
			t.Errorf("message %q does not name the field and the name", msg)
		}
		if err := c.Get(ctx, cpKey(naming.For(other.Name).CACertificate()), &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Certificate was asked for with another tenant's name: %v", err)
		}
		if err := c.Delete(ctx, other); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("CA rotation is cert-manager's", func(t *testing.T) {
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) {
			v.Annotations = map[string]string{v1alpha1.AnnotationCARotation: "start"}
		})
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return strings.Contains(certificatesMessage(v), "comes from cert-manager")
		})
		if got.Status.Certificates.CARotation != "" {
			t.Errorf("caRotation %q: the annotation must change nothing", got.Status.Certificates.CARotation)
		}
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		if err := c.Delete(ctx, vc); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			for _, obj := range []client.Object{&v1alpha1.VirtualCluster{}, &cmapi.Certificate{}, &corev1.Secret{}} {
				k := cpKey(names.CACertificate())
				switch obj.(type) {
				case *v1alpha1.VirtualCluster:
					k = key(vc.Name)
				case *corev1.Secret:
					k = cpKey(names.IssuedCASecret())
				}
				if err := c.Get(ctx, k, obj); !apierrors.IsNotFound(err) {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the VirtualCluster, its Certificate or cert-manager's Secret remain: %v", err)
		}
		// Its namespace's last tenant went: so does the control-plane namespace.
		assertNamespaceGoing(t, ctx, c, cpNS)
	})
}

func parseChain(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for block, rest := pem.Decode(data); block != nil; block, rest = pem.Decode(rest) {
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cert)
	}
	if len(out) == 0 {
		t.Fatal("no certificate")
	}
	return out
}
