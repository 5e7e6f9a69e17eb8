package controlplane

import (
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// NodeEndpoint is where a lent node reaches its tenant's apiserver: the published endpoint
// when it is outside the host's Service DNS (a node resolves no cluster names), else the
// apiserver Service's ClusterIP (clusterIP) on the apiserver port.
func NodeEndpoint(endpoint, clusterIP string) (string, error) {
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" && !strings.HasSuffix(u.Hostname(), ".svc") {
		return endpoint, nil
	}
	if clusterIP == "" || clusterIP == corev1.ClusterIPNone {
		return "", fmt.Errorf("the tenant's apiserver Service has no ClusterIP yet, and its endpoint %q is not reachable from nodes", endpoint)
	}
	return httpsURL(clusterIP, APIServerPort), nil
}
