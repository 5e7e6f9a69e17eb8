package poolnode

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"
	bootstraputil "k8s.io/cluster-bootstrap/token/util"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
)

// annotationTokenExpires on a join Secret says when its bootstrap token expires.
const annotationTokenExpires = "kubenest.io/token-expires"

// ensureJoinSecret makes sure the node's join Secret holds a bootstrap token of vc's tenant
// that is valid for at least half its life, making a new token in the tenant when not, and
// returns the Secret's name.
func (r *Reconciler) ensureJoinSecret(ctx context.Context, pn *v1alpha1.PoolNode, vc *v1alpha1.VirtualCluster) (string, error) {
	name := nodepool.JoinSecretName(pn.Name)
	now := r.Clock.Now()
	current := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, current)
	if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	if err == nil && string(current.Data[nodepool.JoinKeyTenantUID]) == string(vc.UID) {
		expires, perr := time.Parse(time.RFC3339, current.Annotations[annotationTokenExpires])
		if perr == nil && expires.Sub(now) > nodepool.BootstrapTokenTTL/2 {
			return name, nil
		}
	}

	cfg, err := r.Tenants.Config(vc)
	if err != nil {
		return "", err
	}
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	token, err := bootstraputil.GenerateBootstrapToken()
	if err != nil {
		return "", err
	}
	id, secret, _ := strings.Cut(token, ".")
	expires := now.Add(nodepool.BootstrapTokenTTL)
	_, err = tenant.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: bootstraputil.BootstrapTokenSecretName(id), Namespace: metav1.NamespaceSystem},
		Type:       bootstrapapi.SecretTypeBootstrapToken,
		StringData: map[string]string{
			bootstrapapi.BootstrapTokenIDKey:               id,
			bootstrapapi.BootstrapTokenSecretKey:           secret,
			bootstrapapi.BootstrapTokenExpirationKey:       expires.UTC().Format(time.RFC3339),
			bootstrapapi.BootstrapTokenUsageAuthentication: "true",
			bootstrapapi.BootstrapTokenExtraGroupsKey:      nodepool.BootstrapGroup,
			bootstrapapi.BootstrapTokenDescriptionKey:      "KubeNest: host node " + pn.Name + " joining",
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("creating a bootstrap token in the tenant: %w", err)
	}
	server, err := r.nodeEndpoint(ctx, vc)
	if err != nil {
		return "", err
	}
	dns, err := controlplane.DNSServiceIP(vc.Status.ServiceCIDR)
	if err != nil {
		return "", fmt.Errorf("the tenant's cluster DNS address: %w", err)
	}
	kc, err := kubeconfig.Build(kubeconfig.Config{
		ClusterName: vc.Name, Server: server, CAPEM: cfg.CAData, User: "kubelet-bootstrap", Token: token,
	})
	if err != nil {
		return "", err
	}
	join := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: r.Namespace,
			Labels:          map[string]string{naming.LabelManagedBy: naming.ManagedByValue, "kubenest.io/poolnode": pn.Name},
			Annotations:     map[string]string{annotationTokenExpires: expires.UTC().Format(time.RFC3339)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "PoolNode", Name: pn.Name, UID: pn.UID}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			nodepool.JoinKeyBootstrapKubeconfig: kc,
			nodepool.JoinKeyCA:                  cfg.CAData,
			nodepool.JoinKeyClusterDNS:          []byte(dns.String()),
			nodepool.JoinKeyClusterDomain:       []byte(r.ClusterDomain),
			nodepool.JoinKeyTenant:              []byte(vc.Namespace + "/" + vc.Name),
			nodepool.JoinKeyTenantUID:           []byte(vc.UID),
		},
	}
	if err := ssa.Apply(ctx, r.Client, join, FieldOwner); err != nil {
		return "", err
	}
	ctrl.LoggerFrom(ctx).Info("wrote the node's join Secret with a new bootstrap token", "secret", name, "tokenID", id, "server", server)
	return name, nil
}

// nodeEndpoint is where a lent node's kubelet reaches the tenant's apiserver
// (controlplane.NodeEndpoint); the tenant's kube-proxy reaches it there too.
func (r *Reconciler) nodeEndpoint(ctx context.Context, vc *v1alpha1.VirtualCluster) (string, error) {
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: controlplane.Namespace(vc), Name: naming.For(vc.Name).APIServerService()}, svc); err != nil {
		return "", fmt.Errorf("reading the tenant's apiserver Service: %w", err)
	}
	return controlplane.NodeEndpoint(vc.Status.Endpoint, svc.Spec.ClusterIP)
}

// forgetTenant, once a returned node's kubelet serves the host again, removes the node from
// the tenant it served (read from its join Secret) and deletes the join Secret. A join Secret
// for the tenant keep stays.
func (r *Reconciler) forgetTenant(ctx context.Context, node string, keep types.UID) error {
	join := &corev1.Secret{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: nodepool.JoinSecretName(node)}, join)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if keep != "" && string(join.Data[nodepool.JoinKeyTenantUID]) == string(keep) {
		return nil
	}
	ns, name, _ := strings.Cut(string(join.Data[nodepool.JoinKeyTenant]), "/")
	vc := &v1alpha1.VirtualCluster{}
	err = r.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vc)
	if err == nil && string(vc.UID) == string(join.Data[nodepool.JoinKeyTenantUID]) && vc.DeletionTimestamp.IsZero() {
		tenant, err := r.Tenants.Clientset(vc)
		if err != nil {
			return err
		}
		if err := tenant.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("removing the node from the tenant: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("removed the returned node from the tenant", "tenant", ns+"/"+name)
	}
	if err := r.Client.Delete(ctx, join); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}
