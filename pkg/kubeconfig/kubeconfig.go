// Package kubeconfig builds and reads the kubeconfig files KubeNest hands out: the tenant's
// admin kubeconfig and the ones its controller-manager and scheduler use. It is pure.
package kubeconfig

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Config is what goes into a kubeconfig with one cluster, one user and one context.
type Config struct {
	// ClusterName names the cluster, user and context entries.
	ClusterName string
	// Server is the apiserver URL, https://host:port.
	Server string
	// CAPEM is the PEM bundle the client trusts for the server's certificate.
	CAPEM []byte
	// User names the user entry.
	User string
	// ClientCertPEM and ClientKeyPEM authenticate the user; or Token does; or the token in
	// the file TokenFile (a pod's service-account token, which the kubelet renews) does.
	ClientCertPEM []byte
	ClientKeyPEM  []byte
	Token         string
	TokenFile     string
}

// Build returns the kubeconfig for c as YAML. The same Config gives the same bytes.
func Build(c Config) ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	ctx := c.User + "@" + c.ClusterName
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			c.ClusterName: {Server: c.Server, CertificateAuthorityData: c.CAPEM},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			c.User: {ClientCertificateData: c.ClientCertPEM, ClientKeyData: c.ClientKeyPEM, Token: c.Token, TokenFile: c.TokenFile},
		},
		Contexts: map[string]*clientcmdapi.Context{
			ctx: {Cluster: c.ClusterName, AuthInfo: c.User},
		},
		CurrentContext: ctx,
	}
	out, err := clientcmd.Write(cfg)
	if err != nil {
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	return out, nil
}

// Parse reads a kubeconfig built by Build back into a Config.
func Parse(data []byte) (Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return Config{}, fmt.Errorf("reading kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return Config{}, fmt.Errorf("kubeconfig has no current context %q", cfg.CurrentContext)
	}
	cluster, ok := cfg.Clusters[ctx.Cluster]
	if !ok {
		return Config{}, fmt.Errorf("kubeconfig has no cluster %q", ctx.Cluster)
	}
	user, ok := cfg.AuthInfos[ctx.AuthInfo]
	if !ok {
		return Config{}, fmt.Errorf("kubeconfig has no user %q", ctx.AuthInfo)
	}
	return Config{
		ClusterName:   ctx.Cluster,
		Server:        cluster.Server,
		CAPEM:         cluster.CertificateAuthorityData,
		User:          ctx.AuthInfo,
		ClientCertPEM: user.ClientCertificateData,
		ClientKeyPEM:  user.ClientKeyData,
		Token:         user.Token,
		TokenFile:     user.TokenFile,
	}, nil
}

func (c Config) validate() error {
	switch {
	case c.ClusterName == "":
		return errors.New("kubeconfig needs a cluster name")
	case c.User == "":
		return errors.New("kubeconfig needs a user name")
	case len(c.CAPEM) == 0:
		return errors.New("kubeconfig needs the CA certificate")
	}
	credentials := 0
	for _, set := range []bool{len(c.ClientCertPEM) != 0 || len(c.ClientKeyPEM) != 0, c.Token != "", c.TokenFile != ""} {
		if set {
			credentials++
		}
	}
	switch {
	case credentials == 0:
		return errors.New("kubeconfig needs a client certificate and key, a token or a token file")
	case credentials > 1:
		return errors.New("kubeconfig takes one of a client certificate, a token and a token file")
	case (len(c.ClientCertPEM) == 0) != (len(c.ClientKeyPEM) == 0):
		return errors.New("kubeconfig needs both a client certificate and its key")
	}
	u, err := url.Parse(c.Server)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("kubeconfig server %q is not an https URL", c.Server)
	}
	return nil
}

// Clean checks a kubeconfig read from somewhere others may write (a tenant's kubeconfig
// Secret, which any editor of the tenant's host namespace can change) and returns it rebuilt
// from its current context's parts: the server, the inline CA, and an inline client
// certificate and key or token. It refuses one that would run a command (exec, auth
// provider), read local files, skip TLS verification, go through a proxy, impersonate, or
// point anywhere but server (when server is not empty). Nothing else of the input survives.
func Clean(data []byte, server string) ([]byte, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no current context %q", cfg.CurrentContext)
	}
	cluster, user := cfg.Clusters[ctx.Cluster], cfg.AuthInfos[ctx.AuthInfo]
	if cluster == nil || user == nil {
		return nil, fmt.Errorf("kubeconfig context %q names a cluster or user it does not have", cfg.CurrentContext)
	}
	var bad []string
	for what, set := range map[string]bool{
		"an exec credential plugin (a command to run)": user.Exec != nil,
		"an auth provider":                 user.AuthProvider != nil,
		"a token file":                     user.TokenFile != "",
		"a client certificate or key file": user.ClientCertificate != "" || user.ClientKey != "",
		"a user name and password":         user.Username != "" || user.Password != "",
		"impersonation":                    user.Impersonate != "" || user.ImpersonateUID != "" || len(user.ImpersonateGroups) > 0 || len(user.ImpersonateUserExtra) > 0,
		"a CA file":                        cluster.CertificateAuthority != "",
		"insecure-skip-tls-verify":         cluster.InsecureSkipTLSVerify,
		"a proxy":                          cluster.ProxyURL != "",
		"a TLS server name":                cluster.TLSServerName != "",
	} {
		if set {
			bad = append(bad, what)
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return nil, fmt.Errorf("kubeconfig has %s: KubeNest never writes that", strings.Join(bad, ", "))
	}
	if server != "" && cluster.Server != server {
		return nil, fmt.Errorf("kubeconfig's server %q is not the virtual cluster's endpoint %q", cluster.Server, server)
	}
	return Build(Config{
		ClusterName: ctx.Cluster, Server: cluster.Server, CAPEM: cluster.CertificateAuthorityData, User: ctx.AuthInfo,
		ClientCertPEM: user.ClientCertificateData, ClientKeyPEM: user.ClientKeyData, Token: user.Token,
	})
}
