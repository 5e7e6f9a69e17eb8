// Package tenantclient reaches a tenant's apiserver as its admin, from the in-cluster
// kubeconfig the operator wrote into the tenant's kubeconfig Secret.
package tenantclient

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Timeout bounds each request to a tenant, so that one that does not answer never holds up a
// reconcile for long.
const Timeout = 5 * time.Second

// Source makes clients of tenants.
type Source struct {
	// Reader reads the tenants' kubeconfig Secrets in the host.
	Reader client.Reader
	// Dial dials tenant apiservers; nil dials directly (tests route Service names).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Config is the admin client configuration of vc's tenant, for its in-cluster endpoint.
func (s Source) Config(ctx context.Context, vc *v1alpha1.VirtualCluster) (*rest.Config, error) {
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: vc.Namespace, Name: naming.For(vc.Name).KubeconfigSecret()}
	if err := s.Reader.Get(ctx, key, secret); err != nil {
		return nil, fmt.Errorf("reading the tenant's kubeconfig Secret: %w", err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(secret.Data[controlplane.KeyInClusterKubeconfig])
	if err != nil {
		return nil, fmt.Errorf("reading the tenant's in-cluster kubeconfig: %w", err)
	}
	cfg.Timeout = Timeout
	cfg.Dial = s.Dial
	return cfg, nil
}

// Clientset is an admin clientset of vc's tenant.
func (s Source) Clientset(ctx context.Context, vc *v1alpha1.VirtualCluster) (kubernetes.Interface, error) {
	cfg, err := s.Config(ctx, vc)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
