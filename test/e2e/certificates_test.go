//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// rotationWatch is how long the tenant with short-lived certificates is watched.
const rotationWatch = 10 * time.Minute

// TestCertificateRotation: a tenant with 2-minute leaf certificates keeps serving kubectl
// across rotations, with its admin kubeconfig Secret renewed each time; a forced rotation
// and a CA rotation, step by step, on another tenant meanwhile.
func TestCertificateRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), rotationWatch+10*time.Minute)
	t.Cleanup(cancel) // after the parallel subtests, unlike a defer
	ns := createNamespace(t, ctx, "e2e-certs")

	t.Run("2-minute certificates are renewed and the tenant keeps serving", func(t *testing.T) {
		t.Parallel()
		vc := newVC(ns, "short", v1alpha1.ExposureNodePort)
		vc.Annotations = map[string]string{v1alpha1.AnnotationTestLeafValidity: "2m"}
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		got := waitReady(t, ctx, vc)
		for _, it := range got.Status.Certificates.Items {
			if it.Name == "apiserver" {
				if left := it.NotAfter.Sub(it.RenewAfter.Time); left < 35*time.Second || left > 50*time.Second {
					t.Errorf("apiserver certificate: renewed %s before it expires, want about 40s (a third of 2m)", left)
				}
			}
		}

		// Every 2 s, a user fetches the kubeconfig from the Secret and runs kubectl with it.
		admins := map[string]bool{}
		var failures, tries int
		var outage, longest time.Duration
		var down time.Time
		for end := time.Now().Add(rotationWatch); time.Now().Before(end); time.Sleep(2 * time.Second) {
			kc := kubeconfigData(t, ctx, vc)
			admins[clientCertSerial(t, kc)] = true
			tries++
			err := kubectlWith(kc, "get", "namespace", "kube-system", "-o", "name")
			switch {
			case err != nil && down.IsZero():
				down = time.Now()
				failures++
				t.Logf("kubectl failed (%d admin certificates so far): %v", len(admins), err)
			case err != nil:
				failures++
			case !down.IsZero():
				outage = time.Since(down)
				longest = max(longest, outage)
				t.Logf("kubectl works again after %s", outage.Round(time.Second))
				down = time.Time{}
			}
		}
		// The watch may end inside an outage (a roll): it is given the time any other gets.
		for !down.IsZero() && time.Since(down) < 30*time.Second {
			time.Sleep(2 * time.Second)
			if kubectlWith(kubeconfigData(t, ctx, vc), "get", "namespace", "kube-system", "-o", "name") == nil {
				outage = time.Since(down)
				longest = max(longest, outage)
				t.Logf("kubectl works again after %s", outage.Round(time.Second))
				down = time.Time{}
			}
		}
		t.Logf("%s watched: %d admin certificates, kubectl %d/%d ok, longest outage %s",
			rotationWatch, len(admins), tries-failures, tries, longest.Round(time.Second))
		if want := int(rotationWatch/(80*time.Second)) - 1; len(admins) < want {
			t.Errorf("%d admin certificates in %s, want at least %d (renewed every 80 s)", len(admins), rotationWatch, want)
		}
		if !down.IsZero() {
			t.Errorf("kubectl has failed since %s", down.Format(time.TimeOnly))
		}
		// One apiserver restart is allowed; the control plane rolls with a surge pod, so
		// usually there is none.
		if longest > 30*time.Second {
			t.Errorf("the tenant API was unreachable for %s at once", longest.Round(time.Second))
		}
	})

	t.Run("forced rotation, then a CA rotation step by step", func(t *testing.T) {
		t.Parallel()
		vc := newVC(ns, "rotate", v1alpha1.ExposureNodePort)
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ctx, vc)

		before := kubeconfigData(t, ctx, vc)
		annotate(t, ctx, vc, v1alpha1.AnnotationRotateCertificates, "e2e-1")
		start := time.Now()
		waitVC(t, ctx, vc, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			return v.Status.Certificates != nil && v.Status.Certificates.RotationRequest == "e2e-1"
		})
		after := kubeconfigData(t, ctx, vc)
		if clientCertSerial(t, after) == clientCertSerial(t, before) {
			t.Fatal("the admin certificate was not renewed on request")
		}
		eventually(t, "the renewed kubeconfig works", 3*time.Minute, func() error { return kubectlWith(after, "get", "ns") })
		t.Logf("forced rotation: renewed kubeconfig works %s after the request", time.Since(start).Round(100*time.Millisecond))

		// CA rotation. "old" fetched before it starts, "during" while both CAs are trusted.
		old := after
		annotate(t, ctx, vc, v1alpha1.AnnotationCARotation, controlplane.CARotationStart)
		waitVC(t, ctx, vc, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			return v.Status.Certificates.CARotation == v1alpha1.CARotationTrusting
		})
		during := kubeconfigData(t, ctx, vc)
		if n := len(kubeconfigCAs(t, during)); n != 2 {
			t.Fatalf("while trusting both, the kubeconfig holds %d CA certificates, want 2", n)
		}
		for name, kc := range map[string][]byte{"old": old, "during": during} {
			eventually(t, name+" kubeconfig works while both CAs are trusted", 3*time.Minute, func() error { return kubectlWith(kc, "get", "ns") })
		}

		annotate(t, ctx, vc, v1alpha1.AnnotationCARotation, controlplane.CARotationSwitch)
		waitVC(t, ctx, vc, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			return v.Status.Certificates.CARotation == v1alpha1.CARotationSwitched
		})
		// Once the apiserver serves with the new CA, clients that never fetched the new
		// kubeconfig are cut off; those that did keep working, with their old certificates.
		eventually(t, "the apiserver serves a certificate of the new CA", 3*time.Minute, func() error {
			if kubectlWith(old, "get", "ns") == nil {
				return fmt.Errorf("a kubeconfig from before the rotation still verifies the apiserver")
			}
			return nil
		})
		eventually(t, "a kubeconfig fetched while both were trusted keeps working", time.Minute, func() error { return kubectlWith(during, "get", "ns") })
		switched := kubeconfigData(t, ctx, vc)
		eventually(t, "the current kubeconfig works", time.Minute, func() error { return kubectlWith(switched, "get", "ns") })

		annotate(t, ctx, vc, v1alpha1.AnnotationCARotation, controlplane.CARotationFinish)
		waitVC(t, ctx, vc, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			return v.Status.Certificates.CARotation == ""
		})
		finished := kubeconfigData(t, ctx, vc)
		if n := len(kubeconfigCAs(t, finished)); n != 1 {
			t.Errorf("after the rotation, the kubeconfig holds %d CA certificates, want 1", n)
		}
		eventually(t, "the kubeconfig works after the rotation", 3*time.Minute, func() error { return kubectlWith(finished, "get", "ns") })
		// The old CA is gone from the apiserver's trust: the admin certificate of "during",
		// which it signed, is refused.
		eventually(t, "certificates of the old CA are refused", 3*time.Minute, func() error {
			if kubectlWith(during, "get", "ns") == nil {
				return fmt.Errorf("a certificate signed by the old CA is still accepted")
			}
			return nil
		})
	})
}

// kubeconfigData reads the tenant's admin kubeconfig from its Secret.
func kubeconfigData(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) []byte {
	t.Helper()
	s := &corev1.Secret{}
	if err := host.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: naming.For(vc.Name).KubeconfigSecret()}, s); err != nil {
		t.Fatal(err)
	}
	return s.Data[controlplane.KeyKubeconfig]
}

// kubectlWith runs kubectl with a kubeconfig given by content.
func kubectlWith(kubeconfig []byte, args ...string) error {
	f, err := os.CreateTemp("", "kubeconfig-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(kubeconfig); err != nil {
		return err
	}
	f.Close()
	cmd := exec.Command(*kubectlPath, append([]string{"--kubeconfig", f.Name(), "--request-timeout=10s"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

func clientCertSerial(t *testing.T, kubeconfig []byte) string {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		block, _ := pem.Decode(u.ClientCertificateData)
		if block == nil {
			t.Fatal("no client certificate in the kubeconfig")
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return c.SerialNumber.String()
	}
	t.Fatal("no user in the kubeconfig")
	return ""
}

func kubeconfigCAs(t *testing.T, kubeconfig []byte) []*x509.Certificate {
	t.Helper()
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var out []*x509.Certificate
	for _, c := range cfg.Clusters {
		rest := c.CertificateAuthorityData
		for {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, cert)
		}
	}
	return out
}

func annotate(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	if err := host.Patch(ctx, vc, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// eventually retries f every second until it succeeds or the timeout passes.
func eventually(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	var err error
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(time.Second) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("%s: not within %s: %v", what, timeout, err)
}
