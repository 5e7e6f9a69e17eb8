package virtualcluster

import (
	"context"
	"fmt"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// tenantTimeout bounds each request the operator makes to a tenant's apiserver, so a tenant
// that does not answer never holds up a reconcile for long.
const tenantTimeout = 3 * time.Second

// checkTenant reaches the tenant's apiserver through its Service with the admin credentials:
// /readyz must answer ok. Then it applies what every tenant needs from the start and returns
// the version the tenant reports.
func (r *Reconciler) checkTenant(ctx context.Context, vc *v1alpha1.VirtualCluster, p *tenantPKI) (string, error) {
	cfg, err := r.tenantConfig(vc, p)
	if err != nil {
		return "", err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("GET /readyz: %w", err)
	}
	if string(body) != "ok" {
		return "", fmt.Errorf("GET /readyz answered %q", body)
	}
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		return "", fmt.Errorf("GET /version: %w", err)
	}
	if err := bootstrapTenant(ctx, client); err != nil {
		return "", err
	}
	return info.GitVersion, nil
}

// tenantConfig is the admin client configuration for the tenant's in-cluster endpoint.
func (r *Reconciler) tenantConfig(vc *v1alpha1.VirtualCluster, p *tenantPKI) (*rest.Config, error) {
	admin := p.leaves[controlplane.LeafAdmin]
	key, err := admin.KeyPEM()
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: controlplane.InClusterEndpoint(vc),
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   p.authorities.CA.CertPEM(),
			CertData: admin.CertPEM(),
			KeyData:  key,
		},
		Timeout:   tenantTimeout,
		Dial:      r.TenantDial,
		UserAgent: FieldOwner,
	}, nil
}

// bootstrapTenant applies the tenant objects the control plane itself relies on: the apiserver
// may call kubelets (logs, exec) as kube-apiserver-kubelet-client, a user bound to the
// built-in system:kubelet-api-admin role rather than put in system:masters.
func bootstrapTenant(ctx context.Context, client kubernetes.Interface) error {
	crb := rbacv1ac.ClusterRoleBinding("kubenest:apiserver-kubelet-client").
		WithLabels(map[string]string{"app.kubernetes.io/managed-by": "kubenest"}).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup(rbacv1.GroupName).WithKind("ClusterRole").WithName("system:kubelet-api-admin")).
		WithSubjects(rbacv1ac.Subject().WithAPIGroup(rbacv1.GroupName).WithKind(rbacv1.UserKind).WithName(controlplane.APIServerKubeletClient))
	if _, err := client.RbacV1().ClusterRoleBindings().Apply(ctx, crb, metav1.ApplyOptions{FieldManager: FieldOwner, Force: true}); err != nil {
		return fmt.Errorf("applying tenant ClusterRoleBinding %s: %w", *crb.Name, err)
	}
	return nil
}
