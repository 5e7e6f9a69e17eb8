package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Keys of the Secrets the control-plane pods mount, and of the kubeconfig Secret.
const (
	KeyControllerManagerKubeconfig = "controller-manager.kubeconfig"
	KeySchedulerKubeconfig         = "scheduler.kubeconfig"
	KeyDNSKubeconfig               = "dns.kubeconfig"
	// KeyCorefile is the tenant CoreDNS's configuration.
	KeyCorefile = "Corefile"

	// KeyKubeconfig holds the admin kubeconfig for the published endpoint (Cluster API's key).
	KeyKubeconfig = "value"
	// KeyInClusterKubeconfig holds the admin kubeconfig for clients inside the host cluster.
	KeyInClusterKubeconfig = "in-cluster"
)

// CASecret holds the tenant's certificate authorities and service-account key.
func CASecret(vc *v1alpha1.VirtualCluster, a *Authorities) (*corev1.Secret, error) {
	data, err := a.SecretData()
	if err != nil {
		return nil, err
	}
	return secret(vc, naming.For(vc.Name).CASecret(), data), nil
}

// EtcdCertsSecret is what each etcd member mounts: the etcd CA certificate and the server and
// peer certificates.
func EtcdCertsSecret(vc *v1alpha1.VirtualCluster, a *Authorities, l Leaves) (*corev1.Secret, error) {
	data := map[string][]byte{KeyCACert: a.EtcdCA.CertPEM()}
	if err := l.put(data, LeafEtcdServer, LeafEtcdPeer); err != nil {
		return nil, err
	}
	return secret(vc, naming.For(vc.Name).EtcdCertsSecret(), data), nil
}

// ControlPlaneCertsSecret is what each control-plane pod mounts: CA certificates (never their
// keys), the components' certificates, the service-account key pair and the kubeconfigs the
// controller-manager and scheduler use to reach the apiserver in the same pod.
func ControlPlaneCertsSecret(vc *v1alpha1.VirtualCluster, a *Authorities, l Leaves) (*corev1.Secret, error) {
	saData, err := a.SecretData()
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{
		KeyCACert:           a.CABundle(),
		KeyClientCABundle:   a.ClientCABundle(),
		KeyEtcdCACert:       a.EtcdCA.CertPEM(),
		KeyFrontProxyCACert: a.FrontProxyCA.CertPEM(),
		KeySAKey:            saData[KeySAKey],
		KeySAPub:            saData[KeySAPub],
	}
	if err := l.put(data, LeafAPIServer, LeafAPIServerKubeletClient, LeafAPIServerEtcdClient,
		LeafFrontProxyClient, LeafControllerManager, LeafScheduler, LeafDNS); err != nil {
		return nil, err
	}
	data[LeafAPIServer.CertFile()] = append(data[LeafAPIServer.CertFile()], a.caChain()...)
	local := fmt.Sprintf("https://127.0.0.1:%d", APIServerPort)
	for key, leaf := range map[string]Leaf{
		KeyControllerManagerKubeconfig: LeafControllerManager,
		KeySchedulerKubeconfig:         LeafScheduler,
		KeyDNSKubeconfig:               LeafDNS,
	} {
		kc, err := kubeconfigFor(vc, a, l, leaf, local)
		if err != nil {
			return nil, err
		}
		data[key] = kc
	}
	data[KeyCorefile] = []byte(corefile())
	return secret(vc, naming.For(vc.Name).ControlPlaneCertsSecret(), data), nil
}

// KubeletSignerSecret is what only the controller-manager container mounts: the kubelet
// signer's certificate and key, to sign the client certificates of kubelets joining the tenant.
func KubeletSignerSecret(vc *v1alpha1.VirtualCluster, a *Authorities) (*corev1.Secret, error) {
	key, err := a.KubeletSigner.KeyPEM()
	if err != nil {
		return nil, err
	}
	return secret(vc, naming.For(vc.Name).KubeletSignerSecret(), map[string][]byte{
		KeyKubeletSignerCert: a.KubeletSigner.CertPEM(),
		KeyKubeletSignerKey:  key,
	}), nil
}

// KubeconfigSecret holds the tenant's admin kubeconfig: under "value" for the published
// endpoint, under "in-cluster" for the apiserver Service's DNS name inside the host.
func KubeconfigSecret(vc *v1alpha1.VirtualCluster, a *Authorities, l Leaves, endpoint string) (*corev1.Secret, error) {
	external, err := kubeconfigFor(vc, a, l, LeafAdmin, endpoint)
	if err != nil {
		return nil, err
	}
	internal, err := kubeconfigFor(vc, a, l, LeafAdmin, InClusterEndpoint(vc))
	if err != nil {
		return nil, err
	}
	// The one Secret in the VirtualCluster's own namespace: the tenant's to download.
	kubeconfig := secret(vc, naming.For(vc.Name).KubeconfigSecret(), map[string][]byte{
		KeyKubeconfig:          external,
		KeyInClusterKubeconfig: internal,
	})
	kubeconfig.ObjectMeta = tenantObjectMeta(vc, kubeconfig.Name, "")
	return kubeconfig, nil
}

// AdminFromKubeconfig reads the admin certificate back out of a kubeconfig Secret's data, so
// that it is reused rather than issued anew on every pass.
func AdminFromKubeconfig(data map[string][]byte) (PEMPair, bool) {
	kc, err := kubeconfig.Parse(data[KeyInClusterKubeconfig])
	if err != nil {
		return PEMPair{}, false
	}
	return PEMPair{Cert: kc.ClientCertPEM, Key: kc.ClientKeyPEM}, true
}

// InClusterEndpoint is the apiserver's URL inside the host cluster.
func InClusterEndpoint(vc *v1alpha1.VirtualCluster) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", naming.For(vc.Name).APIServerService(), Namespace(vc), APIServerPort)
}

// ContentHash is a short, stable hash of Secret data, put on pod templates so that the pods
// roll when what they mount changes.
func ContentHash(secrets ...*corev1.Secret) string {
	h := sha256.New()
	for _, s := range secrets {
		hashData(h, s.Name, s.Data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// ConfigMapHash is ContentHash for what a ConfigMap holds.
func ConfigMapHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	hashData(h, cm.Name, cm.Data)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hashData writes the object name's data to h, key by key in order, each with its length so
// that no two contents write the same bytes.
func hashData[V ~string | ~[]byte](h hash.Hash, name string, data map[string]V) {
	for _, k := range slices.Sorted(maps.Keys(data)) {
		fmt.Fprintf(h, "%s/%s=%d:", name, k, len(data[k]))
		h.Write([]byte(data[k]))
	}
}

func kubeconfigFor(vc *v1alpha1.VirtualCluster, a *Authorities, l Leaves, leaf Leaf, server string) ([]byte, error) {
	kp, ok := l[leaf]
	if !ok {
		return nil, fmt.Errorf("no %s certificate", leaf)
	}
	key, err := kp.KeyPEM()
	if err != nil {
		return nil, err
	}
	return kubeconfig.Build(kubeconfig.Config{
		ClusterName:   vc.Name,
		Server:        server,
		CAPEM:         a.CABundle(),
		User:          kp.Cert.Subject.CommonName,
		ClientCertPEM: kp.CertPEM(),
		ClientKeyPEM:  key,
	})
}

func secret(vc *v1alpha1.VirtualCluster, name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta:   typeMeta("v1", "Secret"),
		ObjectMeta: objectMeta(vc, name, ""),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}
}
