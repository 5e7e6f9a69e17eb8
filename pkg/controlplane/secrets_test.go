package controlplane_test

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// tenantSecrets are the four Secrets of one tenant after a first pass.
type tenantSecrets struct {
	authorities                     *controlplane.Authorities
	leaves                          controlplane.Leaves
	ca, etcd, controlPlane, kubecfg *corev1.Secret
}

const endpoint = "https://192.0.2.10:31443"

func newTenantSecrets(t *testing.T, vc *v1alpha1.VirtualCluster) tenantSecrets {
	t.Helper()
	a := newAuthorities(t)
	leaves, _ := ensure(t, a, leafSpecs(t, vc, controlplane.DefaultSettings(), controlplane.Exposure{ClusterIP: "10.96.0.20"}), nil, now)
	ts := tenantSecrets{authorities: a, leaves: leaves}
	var err error
	if ts.ca, err = controlplane.CASecret(vc, a); err != nil {
		t.Fatalf("CASecret: %v", err)
	}
	if ts.etcd, err = controlplane.EtcdCertsSecret(vc, a, leaves); err != nil {
		t.Fatalf("EtcdCertsSecret: %v", err)
	}
	if ts.controlPlane, err = controlplane.ControlPlaneCertsSecret(vc, a, leaves); err != nil {
		t.Fatalf("ControlPlaneCertsSecret: %v", err)
	}
	if ts.kubecfg, err = controlplane.KubeconfigSecret(vc, a, leaves, endpoint); err != nil {
		t.Fatalf("KubeconfigSecret: %v", err)
	}
	return ts
}

func TestSecretsNeverHoldCAKeys(t *testing.T) {
	ts := newTenantSecrets(t, newVC())
	caKeys := [][]byte{
		ts.ca.Data[controlplane.KeyCAKey], ts.ca.Data[controlplane.KeyFrontProxyCAKey], ts.ca.Data[controlplane.KeyEtcdCAKey],
	}
	for _, s := range []*corev1.Secret{ts.etcd, ts.controlPlane, ts.kubecfg} {
		t.Run(s.Name, func(t *testing.T) {
			for _, k := range []string{controlplane.KeyCAKey, controlplane.KeyFrontProxyCAKey, controlplane.KeyEtcdCAKey} {
				if _, ok := s.Data[k]; ok {
					t.Errorf("Secret %s holds %s", s.Name, k)
				}
			}
			for k, v := range s.Data {
				for _, caKey := range caKeys {
					if bytes.Contains(v, caKey) {
						t.Errorf("Secret %s key %s contains a CA private key", s.Name, k)
					}
				}
			}
		})
	}
}

func TestEtcdCertsSecret(t *testing.T) {
	ts := newTenantSecrets(t, newVC())
	want := []string{"ca.crt", "etcd-server.crt", "etcd-server.key", "etcd-peer.crt", "etcd-peer.key"}
	if got := slices.Sorted(maps.Keys(ts.etcd.Data)); !sameSet(got, want) {
		t.Errorf("etcd Secret keys = %q, want %q", got, want)
	}
	if !bytes.Equal(ts.etcd.Data[controlplane.KeyCACert], ts.authorities.EtcdCA.CertPEM()) {
		t.Error("etcd Secret's ca.crt is not the etcd CA")
	}
	if ts.etcd.Name != naming.For(vcName).EtcdCertsSecret() {
		t.Errorf("name %q", ts.etcd.Name)
	}
	if _, err := controlplane.EtcdCertsSecret(newVC(), ts.authorities, controlplane.Leaves{}); err == nil {
		t.Error("EtcdCertsSecret without leaves succeeded")
	}
}

func TestControlPlaneCertsSecret(t *testing.T) {
	vc := newVC()
	ts := newTenantSecrets(t, vc)
	d := ts.controlPlane.Data
	want := []string{
		"ca.crt", "client-ca.crt", "etcd-ca.crt", "front-proxy-ca.crt", "sa.key", "sa.pub",
		"apiserver.crt", "apiserver.key", "apiserver-kubelet-client.crt", "apiserver-kubelet-client.key",
		"apiserver-etcd-client.crt", "apiserver-etcd-client.key", "front-proxy-client.crt", "front-proxy-client.key",
		"controller-manager.crt", "controller-manager.key", "scheduler.crt", "scheduler.key",
		controlplane.KeyControllerManagerKubeconfig, controlplane.KeySchedulerKubeconfig,
		"dns.crt", "dns.key", controlplane.KeyDNSKubeconfig, controlplane.KeyCorefile,
	}
	if got := slices.Sorted(maps.Keys(d)); !sameSet(got, want) {
		t.Errorf("control-plane Secret keys = %q, want %q", got, want)
	}
	for key, ca := range map[string]*pki.KeyPair{
		controlplane.KeyCACert: ts.authorities.CA, controlplane.KeyEtcdCACert: ts.authorities.EtcdCA,
		controlplane.KeyFrontProxyCACert: ts.authorities.FrontProxyCA,
	} {
		if !bytes.Equal(d[key], ca.CertPEM()) {
			t.Errorf("%s is not the right CA certificate", key)
		}
	}
	// The service-account key pair is the authorities' one.
	if !bytes.Equal(d[controlplane.KeySAKey], ts.ca.Data[controlplane.KeySAKey]) || !bytes.Equal(d[controlplane.KeySAPub], ts.ca.Data[controlplane.KeySAPub]) {
		t.Error("service-account key pair differs from the CA Secret's")
	}

	tests := []struct {
		key  string
		user string
		leaf controlplane.Leaf
	}{
		{controlplane.KeyControllerManagerKubeconfig, controlplane.ControllerManagerUser, controlplane.LeafControllerManager},
		{controlplane.KeySchedulerKubeconfig, controlplane.SchedulerUser, controlplane.LeafScheduler},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			kc, err := kubeconfig.Parse(d[tt.key])
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if kc.Server != "https://127.0.0.1:6443" {
				t.Errorf("server = %q, want https://127.0.0.1:6443", kc.Server)
			}
			if kc.User != tt.user {
				t.Errorf("user = %q, want %q", kc.User, tt.user)
			}
			if kc.ClusterName != vc.Name {
				t.Errorf("cluster = %q, want %q", kc.ClusterName, vc.Name)
			}
			if !bytes.Equal(kc.CAPEM, ts.authorities.CA.CertPEM()) {
				t.Error("kubeconfig does not trust the tenant CA")
			}
			kp, err := pki.ParseKeyPair(kc.ClientCertPEM, kc.ClientKeyPEM)
			if err != nil {
				t.Fatalf("client certificate: %v", err)
			}
			if kp.Cert.Subject.CommonName != tt.user {
				t.Errorf("client certificate CN = %q, want %q", kp.Cert.Subject.CommonName, tt.user)
			}
			if !kp.Cert.Equal(ts.leaves[tt.leaf].Cert) {
				t.Errorf("client certificate is not the %s leaf", tt.leaf)
			}
		})
	}
}

func TestKubeconfigSecret(t *testing.T) {
	vc := newVC()
	ts := newTenantSecrets(t, vc)
	if got := slices.Sorted(maps.Keys(ts.kubecfg.Data)); !sameSet(got, []string{"value", "in-cluster"}) {
		t.Errorf("kubeconfig Secret keys = %q, want value and in-cluster", got)
	}
	tests := []struct {
		key    string
		server string
	}{
		{controlplane.KeyKubeconfig, endpoint},
		{controlplane.KeyInClusterKubeconfig, "https://tenant-apiserver.kubenest-cp-tenants.svc:6443"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			kc, err := kubeconfig.Parse(ts.kubecfg.Data[tt.key])
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if kc.Server != tt.server {
				t.Errorf("server = %q, want %q", kc.Server, tt.server)
			}
			if kc.User != controlplane.AdminUser {
				t.Errorf("user = %q, want %q", kc.User, controlplane.AdminUser)
			}
			kp, err := pki.ParseKeyPair(kc.ClientCertPEM, kc.ClientKeyPEM)
			if err != nil {
				t.Fatalf("client certificate: %v", err)
			}
			if !slices.Equal(kp.Cert.Subject.Organization, []string{controlplane.MastersGroup}) {
				t.Errorf("admin groups = %q, want %s", kp.Cert.Subject.Organization, controlplane.MastersGroup)
			}
		})
	}
	if got := controlplane.InClusterEndpoint(vc); got != "https://tenant-apiserver.kubenest-cp-tenants.svc:6443" {
		t.Errorf("InClusterEndpoint = %q", got)
	}
	if got := controlplane.InClusterEndpoint(newVC(legacy)); got != "https://tenant-apiserver.tenants.svc:6443" {
		t.Errorf("InClusterEndpoint of an earlier release's tenant = %q", got)
	}
	admin, ok := controlplane.AdminFromKubeconfig(ts.kubecfg.Data)
	if !ok {
		t.Fatal("AdminFromKubeconfig found nothing")
	}
	if !bytes.Equal(admin.Cert, ts.leaves[controlplane.LeafAdmin].CertPEM()) {
		t.Error("AdminFromKubeconfig did not return the admin certificate")
	}
	for name, data := range map[string]map[string][]byte{
		"nil":     nil,
		"garbage": {controlplane.KeyInClusterKubeconfig: []byte("garbage")},
	} {
		if _, ok := controlplane.AdminFromKubeconfig(data); ok {
			t.Errorf("AdminFromKubeconfig(%s) found a certificate", name)
		}
	}
	if _, err := controlplane.KubeconfigSecret(vc, ts.authorities, ts.leaves, ""); err == nil {
		t.Error("KubeconfigSecret without an endpoint succeeded")
	}
}

func TestContentHash(t *testing.T) {
	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	base := secret("certs", map[string]string{"a": "1", "b": "2", "c": "3"})
	h := controlplane.ContentHash(base)
	if h == "" || len(h) > 63 {
		t.Errorf("ContentHash = %q, want a short non-empty value", h)
	}
	for range 20 {
		if again := controlplane.ContentHash(base.DeepCopy()); again != h {
			t.Fatalf("ContentHash not stable: %q then %q", h, again)
		}
	}
	tests := []struct {
		name    string
		secrets []*corev1.Secret
	}{
		{"value changed", []*corev1.Secret{secret("certs", map[string]string{"a": "1", "b": "2", "c": "4"})}},
		{"key added", []*corev1.Secret{secret("certs", map[string]string{"a": "1", "b": "2", "c": "3", "d": ""})}},
		{"key removed", []*corev1.Secret{secret("certs", map[string]string{"a": "1", "b": "2"})}},
		{"key renamed", []*corev1.Secret{secret("certs", map[string]string{"a": "1", "b": "2", "d": "3"})}},
		{"bytes moved between keys", []*corev1.Secret{secret("certs", map[string]string{"a": "12", "b": "", "c": "3"})}},
		{"other Secret name", []*corev1.Secret{secret("other", map[string]string{"a": "1", "b": "2", "c": "3"})}},
		{"another Secret too", []*corev1.Secret{base, secret("more", map[string]string{"x": "y"})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := controlplane.ContentHash(tt.secrets...); got == h {
				t.Errorf("ContentHash = %q, the same as before the change", got)
			}
		})
	}
}

// ownedObject is what TestOwnership checks: a host object of the tenant, kind set.
type ownedObject interface {
	metav1.Object
	runtime.Object
}

// tenantObjects are every host object the operator makes for vc (but its snapshots'), built
// as the operator builds them: its admin kubeconfig Secret and its control plane.
func tenantObjects(t *testing.T, vc *v1alpha1.VirtualCluster) (kubeconfig ownedObject, cp []ownedObject) {
	t.Helper()
	ts := newTenantSecrets(t, vc)
	s := controlplane.DefaultSettings()
	deploy, err := controlplane.ControlPlaneDeployment(vc, s, "hash")
	if err != nil {
		t.Fatalf("ControlPlaneDeployment: %v", err)
	}
	signer, err := controlplane.KubeletSignerSecret(vc, ts.authorities)
	if err != nil {
		t.Fatalf("KubeletSignerSecret: %v", err)
	}
	ha := vc.DeepCopy()
	ha.Spec.Etcd.Replicas, ha.Spec.ControlPlane.Replicas = 3, ptr.To[int32](2)
	budgets, _ := controlplane.DisruptionBudgets(ha)
	if len(budgets) != 2 {
		t.Fatalf("DisruptionBudgets of an HA tenant: %d, want 2", len(budgets))
	}
	withPKI := vc.DeepCopy()
	withPKI.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform", Kind: "ClusterIssuer", Group: "cert-manager.io"}}
	cert, err := controlplane.CACertificate(withPKI, nil)
	if err != nil {
		t.Fatalf("CACertificate: %v", err)
	}
	cp = []ownedObject{
		ts.ca, ts.etcd, ts.controlPlane, signer,
		controlplane.EtcdPeerService(vc), controlplane.EtcdClientService(vc), controlplane.APIServerService(vc),
		controlplane.WakeEndpointSlice(vc, "10.0.0.9", 9443),
		controlplane.EtcdStatefulSet(vc, s, "hash"), deploy, budgets[0], budgets[1], cert,
	}
	return ts.kubecfg, cp
}

// TestOwnership checks that every object a tenant gets is labelled as its VirtualCluster's,
// so that the operator's watches find it, and where it is: a new tenant's control plane in
// its control-plane namespace, labelled with the tenant's namespace and owned by nobody (an
// owner in another namespace counts as absent: the garbage collector would delete it); its
// admin kubeconfig in its own namespace, controlled by the VirtualCluster, so that the host's
// garbage collector removes it with it; and everything of an earlier release's tenant in its
// own namespace, controlled by the VirtualCluster.
func TestOwnership(t *testing.T) {
	for _, tt := range []struct {
		name   string
		vc     *v1alpha1.VirtualCluster
		cpNS   string
		legacy bool
	}{
		{"new", newVC(), cpNS, false},
		{"an earlier release's", newVC(legacy), vcNS, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vc := tt.vc
			kubeconfig, cp := tenantObjects(t, vc)
			for _, obj := range append([]ownedObject{kubeconfig}, cp...) {
				owned := tt.legacy || obj == kubeconfig
				wantNS := tt.cpNS
				if obj == kubeconfig {
					wantNS = vc.Namespace
				}
				t.Run(obj.GetObjectKind().GroupVersionKind().Kind+"/"+obj.GetName(), func(t *testing.T) {
					if obj.GetNamespace() != wantNS {
						t.Errorf("namespace %q, want %q", obj.GetNamespace(), wantNS)
					}
					if !strings.HasPrefix(obj.GetName(), vc.Name+"-") {
						t.Errorf("name %q does not start with the VirtualCluster's", obj.GetName())
					}
					if obj.GetObjectKind().GroupVersionKind().Kind == "" {
						t.Error("no kind set, which server-side apply needs")
					}
					if got := obj.GetLabels()[naming.LabelVirtualCluster]; got != vc.Name {
						t.Errorf("label %s = %q, want %q", naming.LabelVirtualCluster, got, vc.Name)
					}
					if !owned {
						if got, ok := obj.GetLabels()[naming.LabelVirtualClusterNamespace]; !ok || got != vc.Namespace {
							t.Errorf("label %s = %q, want %q", naming.LabelVirtualClusterNamespace, got, vc.Namespace)
						}
						if refs := obj.GetOwnerReferences(); len(refs) != 0 {
							t.Errorf("owner references %+v in the control-plane namespace, want none", refs)
						}
						return
					}
					owner := metav1.GetControllerOf(obj)
					if owner == nil {
						t.Fatal("no controller owner reference")
					}
					if owner.Kind != "VirtualCluster" || owner.APIVersion != v1alpha1.GroupVersion.String() ||
						owner.Name != vc.Name || owner.UID != vc.UID {
						t.Errorf("controller owner = %+v, want the VirtualCluster", *owner)
					}
					if owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
						t.Error("owner reference does not block owner deletion")
					}
					if n := len(obj.GetOwnerReferences()); n != 1 {
						t.Errorf("%d owner references, want 1", n)
					}
				})
			}
		})
	}
}
