package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// hostPKI writes the host cluster's certificates and kubeconfigs into the PKI directory, with
// KubeNest's own pki package: a CA, the apiserver's serving certificate, a client certificate
// per component and per kubelet, and the service-account key.
func (c config) hostPKI(nodes []node) error {
	dir := c.pkiDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	now := time.Now()
	ca, err := pki.NewCA("kubenest-local-ca", now)
	if err != nil {
		return err
	}
	if err := writePair(dir, "ca", ca); err != nil {
		return err
	}
	sa, err := pki.NewSigningKey()
	if err != nil {
		return err
	}
	saKey, err := pki.EncodeKey(sa)
	if err != nil {
		return err
	}
	saPub, err := pki.EncodePublicKey(sa)
	if err != nil {
		return err
	}
	if err := writeFiles(dir, map[string][]byte{"sa.key": saKey, "sa.pub": saPub}); err != nil {
		return err
	}

	serving := pki.CertSpec{
		CommonName: "kube-apiserver",
		DNSNames:   []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + clusterDomain},
		IPs:        []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(bridgeIP), net.ParseIP(apiServiceIP)},
		Usage:      pki.UsageServer,
	}
	if err := issue(dir, ca, "apiserver", serving, now); err != nil {
		return err
	}
	client := func(cn string, orgs ...string) pki.CertSpec {
		return pki.CertSpec{CommonName: cn, Organization: orgs, Usage: pki.UsageClient}
	}
	if err := issue(dir, ca, "apiserver-kubelet-client", client("kube-apiserver-kubelet-client", "system:masters"), now); err != nil {
		return err
	}
	server := fmt.Sprintf("https://%s:%d", bridgeIP, apiPort)
	kubeconfigs := map[string]pki.CertSpec{
		"admin":              client("kubernetes-admin", "system:masters"),
		"controller-manager": client("system:kube-controller-manager"),
		"scheduler":          client("system:kube-scheduler"),
	}
	for _, n := range nodes {
		kubeconfigs["kubelet-"+n.name] = client("system:node:"+n.name, "system:nodes")
	}
	for name, spec := range kubeconfigs {
		kp, err := ca.Issue(spec, now)
		if err != nil {
			return err
		}
		key, err := kp.KeyPEM()
		if err != nil {
			return err
		}
		kc, err := kubeconfig.Build(kubeconfig.Config{
			ClusterName: "kubenest-local", Server: server, CAPEM: ca.CertPEM(),
			User: spec.CommonName, ClientCertPEM: kp.CertPEM(), ClientKeyPEM: key,
		})
		if err != nil {
			return err
		}
		if err := writeFiles(dir, map[string][]byte{name + ".kubeconfig": kc}); err != nil {
			return err
		}
	}
	admin, err := os.ReadFile(filepath.Join(dir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(c.hostKubeconfig(), admin, 0o600)
}

func issue(dir string, ca *pki.KeyPair, name string, spec pki.CertSpec, now time.Time) error {
	kp, err := ca.Issue(spec, now)
	if err != nil {
		return err
	}
	return writePair(dir, name, kp)
}

func writePair(dir, name string, kp *pki.KeyPair) error {
	key, err := kp.KeyPEM()
	if err != nil {
		return err
	}
	return writeFiles(dir, map[string][]byte{name + ".crt": kp.CertPEM(), name + ".key": key})
}

func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
