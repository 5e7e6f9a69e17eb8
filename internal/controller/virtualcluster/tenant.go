package virtualcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// checkTenant reaches the tenant's apiserver through its Service with the admin credentials:
// /readyz must answer ok. It returns the version the tenant reports and a client for it.
func (r *Reconciler) checkTenant(ctx context.Context, vc *v1alpha1.VirtualCluster, p *tenantPKI) (string, kubernetes.Interface, error) {
	cfg, err := r.tenantConfig(vc, p)
	if err != nil {
		return "", nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", nil, err
	}
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("GET /readyz: %w", err)
	}
	if string(body) != "ok" {
		return "", nil, fmt.Errorf("GET /readyz answered %q", body)
	}
	info, err := client.Discovery().ServerVersion()
	if err != nil {
		return "", nil, fmt.Errorf("GET /version: %w", err)
	}
	return info.GitVersion, client, nil
}

// endpointNotServingError says that the tenant answers through its Service, but the endpoint
// its kubeconfig names does not serve it yet: it refuses connections, or serves a certificate
// that the tenant's CA did not issue for that address.
type endpointNotServingError struct {
	endpoint string
	why      string // "still refuses connections", "serves ..."
}

func (e *endpointNotServingError) Error() string {
	return fmt.Sprintf("the tenant's endpoint %s %s", e.endpoint, e.why)
}

// endpointCheckTimeout bounds the operator's connection and TLS handshake with a tenant's
// published endpoint.
const endpointCheckTimeout = 2 * time.Second

// checkEndpoint makes sure that the endpoint a tenant's kubeconfig names (a node port or a load
// balancer's address; a ClusterIP endpoint is the Service checkTenant reached) serves the
// tenant: a TLS handshake there verifies against the tenant's CA bundle, caPEM, for the
// endpoint's host, as the kubeconfig's client will. Every host node's kube-proxy routes a new
// Service on its own, up to a second apart (its minimum sync period) and more on a busy host,
// so the tenant can answer through its Service on the operator's node while the node its
// kubeconfig names still refuses. And an address that becomes known only once the apiserver
// runs (a load balancer that publishes its address when a node answers behind it) is in the
// certificate only after the reissue has rolled the control-plane pods; until then the pods
// serve a certificate without it. Either way: Ready, and the user's first kubectl call fails.
// Refused and a certificate that does not verify are the answers that say "not yet"; an
// address the operator cannot reach from inside the host at all (a firewall, an outside name)
// says nothing about the tenant and is not held against it.
func (r *Reconciler) checkEndpoint(ctx context.Context, exp controlplane.Exposure, caPEM []byte) error {
	if exp.Address == "" {
		return nil
	}
	u, err := url.Parse(exp.Endpoint)
	if err != nil {
		return fmt.Errorf("parsing the tenant's endpoint %q: %w", exp.Endpoint, err)
	}
	dial := (&net.Dialer{}).DialContext
	if r.Tenants != nil && r.Tenants.Dial != nil {
		dial = r.Tenants.Dial
	}
	ctx, cancel := context.WithTimeout(ctx, endpointCheckTimeout)
	defer cancel()
	log := ctrl.LoggerFrom(ctx).V(1)
	conn, err := dial(ctx, "tcp", u.Host)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return &endpointNotServingError{endpoint: exp.Endpoint, why: "still refuses connections: the host has not routed it on that node yet"}
	}
	if err != nil {
		log.Info("cannot check the tenant's endpoint from the operator; not waiting for it", "endpoint", exp.Endpoint, "err", err)
		return nil
	}
	defer conn.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("the tenant's CA bundle holds no certificate")
	}
	tlsConn := tls.Client(conn, &tls.Config{ServerName: u.Hostname(), RootCAs: roots, MinVersion: tls.VersionTLS12})
	err = tlsConn.HandshakeContext(ctx)
	var invalid *tls.CertificateVerificationError
	switch {
	case errors.As(err, &invalid):
		return &endpointNotServingError{endpoint: exp.Endpoint, why: "serves a certificate not valid for it yet (" +
			certificateProblem(invalid.Err) + "): the control-plane pods have not all taken the certificate reissued for it, or something else answers there"}
	case err != nil:
		log.Info("no TLS handshake with the tenant's endpoint; not waiting for it", "endpoint", exp.Endpoint, "err", err)
	}
	return nil
}

// certificateProblem says why a served certificate did not verify, in words of its own: the
// verifier's message repeats what the certificate says (its names, its issuer's name), which
// whoever answers at the endpoint chooses, and the reason goes into the VirtualCluster's status.
func certificateProblem(err error) string {
	var host x509.HostnameError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	switch {
	case errors.As(err, &host):
		return "not issued for " + host.Host
	case errors.As(err, &unknown):
		return "not issued by the tenant's CA"
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return "expired or not yet valid"
	}
	return "does not verify against the tenant's CA"
}

// setupTenant applies what every tenant needs from the start: the binding of the portal's
// users, its cluster DNS Service and the kube-proxy of the nodes lent to it (the RBAC of
// KubeNest's own users the tenant's apiserver creates itself: controlplane.TenantClusterRoles).
// readyIPs are the Ready control-plane pods, apiServerIP the host ClusterIP of the tenant's
// apiserver Service.
func (r *Reconciler) setupTenant(ctx context.Context, vc *v1alpha1.VirtualCluster, client kubernetes.Interface, readyIPs []string, apiServerIP string) error {
	if err := bootstrapPortalUsers(ctx, client); err != nil {
		return err
	}
	if err := tenantDNS(ctx, vc, client, readyIPs); err != nil {
		return err
	}
	return r.tenantKubeProxy(ctx, vc, client, apiServerIP)
}

// tenantKubeProxy keeps the tenant's kube-proxy DaemonSet, which runs on the nodes lent to
// the tenant only and reaches the tenant's apiserver where their kubelets do.
func (r *Reconciler) tenantKubeProxy(ctx context.Context, vc *v1alpha1.VirtualCluster, client kubernetes.Interface, apiServerIP string) error {
	server, err := controlplane.NodeEndpoint(vc.Status.Endpoint, apiServerIP)
	if err != nil {
		return err
	}
	objs, err := controlplane.TenantKubeProxy(r.Settings, server)
	if err != nil {
		return err
	}
	ns := controlplane.KubeProxyNamespace
	if err := applyInTenant(ctx, client.CoreV1().ServiceAccounts(ns).Patch, objs.ServiceAccount); err != nil {
		return err
	}
	if err := applyInTenant(ctx, client.RbacV1().ClusterRoleBindings().Patch, objs.ClusterRoleBinding); err != nil {
		return err
	}
	return applyInTenant(ctx, client.AppsV1().DaemonSets(ns).Patch, objs.DaemonSet)
}

// applyInTenant server-side applies obj, built by a pure builder, with patch, the Patch method
// of a tenant clientset's typed client for obj's kind.
func applyInTenant[T any](ctx context.Context, patch func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error), obj crclient.Object) error {
	body, err := ssa.Body(obj)
	if err != nil {
		return err
	}
	if _, err := patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: FieldOwner, Force: ptr.To(true)}); err != nil {
		return fmt.Errorf("applying tenant %s %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), err)
	}
	return nil
}

// tenantDNS keeps the tenant's kube-system/kube-dns Service at the tenth address of its
// Service range, with an EndpointSlice of readyIPs, the Ready control-plane pods, whose
// CoreDNS answers.
func tenantDNS(ctx context.Context, vc *v1alpha1.VirtualCluster, client kubernetes.Interface, readyIPs []string) error {
	ip, err := controlplane.DNSServiceIP(vc.Status.ServiceCIDR)
	if err != nil {
		return err
	}
	svc := controlplane.TenantDNSService(ip)
	services := client.CoreV1().Services(svc.Namespace)
	current, err := services.Get(ctx, svc.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := services.Create(ctx, svc, metav1.CreateOptions{FieldManager: FieldOwner}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the tenant's %s Service: %w", svc.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading the tenant's %s Service: %w", svc.Name, err)
	case current.Spec.ClusterIP != svc.Spec.ClusterIP:
		return fmt.Errorf("the tenant's %s/%s Service has ClusterIP %s, not %s: delete it and the operator makes it again",
			svc.Namespace, svc.Name, current.Spec.ClusterIP, svc.Spec.ClusterIP)
	}
	slice := controlplane.TenantDNSEndpointSlice(readyIPs)
	slices := client.DiscoveryV1().EndpointSlices(slice.Namespace)
	existing, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = slices.Create(ctx, slice, metav1.CreateOptions{FieldManager: FieldOwner})
	case err == nil && !equality.Semantic.DeepEqual(existing.Endpoints, slice.Endpoints):
		existing.Endpoints, existing.Ports = slice.Endpoints, slice.Ports
		_, err = slices.Update(ctx, existing, metav1.UpdateOptions{FieldManager: FieldOwner})
	}
	if err != nil {
		return fmt.Errorf("writing the tenant's %s EndpointSlice: %w", svc.Name, err)
	}
	return nil
}

// tenantConfig records the tenant's authorities in the registry every part of the operator
// reaches tenants through, and returns the operator's client configuration for the tenant's
// in-cluster endpoint.
func (r *Reconciler) tenantConfig(vc *v1alpha1.VirtualCluster, p *tenantPKI) (*rest.Config, error) {
	return r.Tenants.Update(vc, p.authorities.CA, p.authorities.CABundle(), r.Clock.Now())
}

// bootstrapPortalUsers binds the group of the portal's personal kubeconfigs to cluster-admin
// in the tenant, so that they work with kubectl. The binding is created once and never
// overwritten: the tenant's admin may narrow it (edit its subjects to revoke the group), and
// the operator leaves that alone; a deleted binding comes back.
func bootstrapPortalUsers(ctx context.Context, client kubernetes.Interface) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: controlplane.PortalUsersGroup, Labels: map[string]string{naming.LabelManagedBy: naming.ManagedByValue}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: controlplane.PortalUsersGroup}},
	}
	_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{FieldManager: FieldOwner})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating tenant ClusterRoleBinding %s: %w", crb.Name, err)
	}
	return nil
}
