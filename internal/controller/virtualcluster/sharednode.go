package virtualcluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
	"github.com/kubenest-io/kubenest/pkg/version"
)

// SharedNodes configures the virtual nodes the operator runs for tenants with spec.nodes.shared.
type SharedNodes struct {
	Manager *clustertree.Manager
	// Host reaches the host cluster as the operator.
	Host *rest.Config
	// Address is the IP the tenants' apiservers reach the virtual nodes' kubelet API at: the
	// operator pod's IP.
	Address string
	// NodeName is the virtual node's name in every tenant.
	NodeName string
	// Quota is each tenant's share of the shared nodes (clustertree.Config.Quota); nil: all of
	// them.
	Quota corev1.ResourceList
	// CopyBytes bounds each tenant's host copies of its ConfigMaps and Secrets
	// (clustertree.Config.CopyBytes); 0: no bound.
	CopyBytes int64
	// FinishedPods is how many of each tenant's ended pods keep their host pods
	// (clustertree.Config.FinishedPods); 0: all.
	FinishedPods int
}

// podSecurityLevel is the Pod Security level every VirtualCluster's namespace enforces: no host
// namespaces, ports, paths or privileges for the shared node's host pods, nor for whatever a
// host user of the namespace runs there. The tenant's own pods meet restricted.
const podSecurityLevel = "baseline"

// The shared node copies tenant Services and their EndpointSlices into the host.
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=create

// reconcileSharedNode runs the tenant's virtual node when it asks for one and its apiserver
// answers, and stops it (removing what it ran in the host) when it no longer asks. retryIn is
// when to look again: a virtual node that stopped is started again then (no event says it
// stopped).
func (r *Reconciler) reconcileSharedNode(ctx context.Context, vc *v1alpha1.VirtualCluster, p *tenantPKI, exp controlplane.Exposure, conds conditions) (retryIn time.Duration, err error) {
	if r.SharedNodes == nil {
		return 0, nil
	}
	key := vc.Namespace + "/" + vc.Name
	if !vc.Spec.Nodes.Shared {
		r.SharedNodes.Manager.Stop(key)
		if _, err := r.removeSharedPods(ctx, vc); err != nil {
			return 0, err
		}
		// The condition says the tenant had the node: its Node goes too, once its apiserver
		// answers (not while it sleeps, when this is not called), and then the condition.
		if meta.FindStatusCondition(*conds.List, v1alpha1.ConditionSharedNodeReady) == nil {
			return 0, nil
		}
		if !conds.IsTrue(v1alpha1.ConditionAPIServerReady) {
			conds.Set(v1alpha1.ConditionSharedNodeReady, false, ReasonWaitingForAPIServer, "the virtual node's Node is removed from the tenant once its apiserver answers")
			return 0, nil
		}
		if err := r.removeSharedNode(ctx, vc, p); err != nil {
			return 0, err
		}
		conds.Remove(v1alpha1.ConditionSharedNodeReady)
		return 0, nil
	}
	if !conds.IsTrue(v1alpha1.ConditionAPIServerReady) {
		conds.Set(v1alpha1.ConditionSharedNodeReady, false, ReasonWaitingForAPIServer, "the virtual node starts once the tenant's apiserver answers")
		return 0, nil
	}
	tenantCfg, err := r.tenantConfig(vc, p)
	if err != nil {
		return 0, err
	}
	// A new share or placement restarts the node, which then admits pods against it and
	// carries its taint or not (nothing of the tenant's is lost in a restart).
	quota := r.sharedQuota(vc)
	fingerprint := fingerprintOf(p.authorities.CABundle(), p.rotationRequest, tenantCfg.Host, exp.ClusterIP, r.SharedNodes.Address, string(vc.UID), vc.Status.ServiceCIDR,
		clustertree.FormatQuota(quota), vc.Spec.Nodes.SharedOptIn())
	err = r.SharedNodes.Manager.Ensure(key, fingerprint, func() (clustertree.Config, time.Time, error) {
		return r.sharedNodeConfig(vc, p, exp, tenantCfg, quota)
	})
	if err != nil {
		return 0, err
	}
	if running, err := r.SharedNodes.Manager.Status(key); !running {
		msg := "the virtual node is starting"
		if err != nil {
			msg = fmt.Sprintf("the virtual node stopped and is restarted in %s: %v", sharedNodeRetryInterval, err)
		}
		conds.Set(v1alpha1.ConditionSharedNodeReady, false, ReasonNotReady, msg)
		return sharedNodeRetryInterval, nil
	}
	conds.Set(v1alpha1.ConditionSharedNodeReady, true, ReasonReady,
		fmt.Sprintf("virtual node %s runs the tenant's pods on the host's shared nodes", r.SharedNodes.NodeName))
	return 0, nil
}

// sharedNodeRetryInterval: how soon a virtual node that stopped is started again.
const sharedNodeRetryInterval = 10 * time.Second

// sharedNodeConfig issues the virtual node's certificates from the tenant's CA: a client
// certificate for clustertree in the tenant, and the kubelet API's serving certificate.
func (r *Reconciler) sharedNodeConfig(vc *v1alpha1.VirtualCluster, p *tenantPKI, exp controlplane.Exposure, admin *rest.Config, quota corev1.ResourceList) (clustertree.Config, time.Time, error) {
	now := r.Clock.Now()
	ca := p.authorities.CA
	client, err := ca.Issue(pki.CertSpec{CommonName: controlplane.ClusterTreeUser, Usage: pki.UsageClient, Validity: p.leafValidity}, now)
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	// The node's kubelet API answers at the operator's address, and at the node's own
	// address (clustertree.SharedNodeAddress) through the host's Service of it.
	ips := []net.IP{net.ParseIP(r.SharedNodes.Address)}
	if cidr, err := netip.ParsePrefix(vc.Status.ServiceCIDR); err == nil {
		ips = append(ips, clustertree.SharedNodeAddress(cidr).AsSlice())
	}
	serving, err := ca.Issue(pki.CertSpec{
		CommonName: "system:node:" + r.SharedNodes.NodeName, Organization: []string{"system:nodes"},
		DNSNames: []string{r.SharedNodes.NodeName}, IPs: ips,
		Usage: pki.UsageServer, Validity: p.leafValidity,
	}, now)
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	clientKey, err := client.KeyPEM()
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	servingKey, err := serving.KeyPEM()
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	servingPair, err := tls.X509KeyPair(append(serving.CertPEM(), ca.CertPEM()...), servingKey)
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	tenant := rest.CopyConfig(admin)
	tenant.CertData, tenant.KeyData = client.CertPEM(), clientKey
	tenant.Timeout = 0
	tenant.QPS, tenant.Burst = 50, 100
	renewAt := pki.RenewAt(client.Cert)
	if r := pki.RenewAt(serving.Cert); r.Before(renewAt) {
		renewAt = r
	}
	dns, err := controlplane.DNSServiceIP(vc.Status.ServiceCIDR)
	if err != nil {
		return clustertree.Config{}, time.Time{}, err
	}
	return clustertree.Config{
		VirtualCluster:        vc.Name,
		VirtualClusterUID:     vc.UID,
		HostNamespace:         vc.Namespace,
		ControlPlaneNamespace: controlplane.Namespace(vc),
		NodeName:              r.SharedNodes.NodeName,
		Host:                  r.SharedNodes.Host,
		Tenant:                tenant,
		ServingCert:           servingPair,
		ClientCA:              p.authorities.CABundle(),
		NodeAddress:           r.SharedNodes.Address,
		ListenAddress:         ":0",
		APIServerHost:         exp.ClusterIP,
		APIServerPort:         controlplane.APIServerPort,
		ClusterDNS:            dns.String(),
		ServiceCIDR:           vc.Status.ServiceCIDR,
		WokeAt:                wokeAt(vc),
		TenantAddresses:       func(ctx context.Context) ([]netip.Prefix, error) { return r.tenantAddresses(ctx, vc) },
		Capacity:              r.sharedCapacity,
		Quota:                 quota,
		OptIn:                 vc.Spec.Nodes.SharedOptIn(),
		CopyBytes:             r.SharedNodes.CopyBytes,
		FinishedPods:          r.SharedNodes.FinishedPods,
		HostsImage:            r.Settings.Image,
		HostsImagePullPolicy:  r.Settings.ImagePullPolicy,
		KubeletVersion:        version.KubernetesVersion(),
	}, renewAt, nil
}

// sharedQuota is vc's share of the shared nodes: the platform's for every tenant, each resource
// spec.nodes.sharedQuota names (which only the platform may set) in its place.
func (r *Reconciler) sharedQuota(vc *v1alpha1.VirtualCluster) corev1.ResourceList {
	if len(vc.Spec.Nodes.SharedQuota) == 0 {
		return r.SharedNodes.Quota
	}
	out := r.SharedNodes.Quota.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	maps.Copy(out, vc.Spec.Nodes.SharedQuota)
	return out
}

// tenantAddresses are the addresses of vc's pods that the host knows, beside those of its pods
// on the shared node: its control-plane pods' (its cluster DNS answers there), and those of the
// nodes lent to it: each such Node's spec.podCIDRs and its own addresses (for pods on the host
// network, where the platform grants them). A node whose pod range the host does not record
// contributes only its addresses.
func (r *Reconciler) tenantAddresses(ctx context.Context, vc *v1alpha1.VirtualCluster) ([]netip.Prefix, error) {
	var out []netip.Prefix
	pods, err := r.componentPods(ctx, vc, naming.ComponentControlPlane)
	if err != nil {
		return nil, err
	}
	for _, p := range pods {
		for _, ip := range p.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil {
				out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			}
		}
	}
	pools := &v1alpha1.PoolNodeList{}
	if err := r.Client.List(ctx, pools); err != nil {
		return nil, err
	}
	uid := vc.UID
	for _, pn := range pools.Items {
		if (pn.Spec.Tenant == nil || pn.Spec.Tenant.UID != uid) && pn.Status.Agent.TenantUID != uid {
			continue
		}
		node := &corev1.Node{}
		if err := r.Client.Get(ctx, client.ObjectKey{Name: pn.Name}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return nil, err
		}
		for _, c := range node.Spec.PodCIDRs {
			if p, err := netip.ParsePrefix(c); err == nil {
				out = append(out, p.Masked())
			}
		}
		for _, a := range node.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out, nil
}

// sharedCapacity is what the host's shared nodes can give: the allocatable resources of every
// Ready, schedulable node.
func (r *Reconciler) sharedCapacity(ctx context.Context) (corev1.ResourceList, error) {
	nodes := &corev1.NodeList{}
	if err := r.Client.List(ctx, nodes); err != nil {
		return nil, err
	}
	total := corev1.ResourceList{}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable || !nodeReady(&n) {
			continue
		}
		total = quotav1.Add(total, n.Status.Allocatable)
	}
	if _, ok := total[corev1.ResourcePods]; !ok {
		total[corev1.ResourcePods] = resource.MustParse("0")
	}
	return total, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// labelForPodSecurity makes the host namespace enforce Pod Security's baseline level (or keeps
// restricted): the host's own guard beside clustertree's checks, and what keeps a host user
// with edit on the tenant's namespace from running privileged pods there.
func (r *Reconciler) labelForPodSecurity(ctx context.Context, namespace string) error {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return fmt.Errorf("reading namespace %s: %w", namespace, err)
	}
	const label = "pod-security.kubernetes.io/enforce"
	if ns.Labels[label] == podSecurityLevel || ns.Labels[label] == "restricted" {
		return nil
	}
	patch := client.MergeFrom(ns.DeepCopy())
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[label] = podSecurityLevel
	if err := r.Client.Patch(ctx, ns, patch); err != nil {
		return fmt.Errorf("labelling namespace %s for Pod Security: %w", namespace, err)
	}
	ctrl.LoggerFrom(ctx).Info("namespace now enforces Pod Security", "namespace", namespace, "level", podSecurityLevel)
	return nil
}

// removeSharedPods deletes what the virtual node ran in the host, for a tenant that no longer
// asks for it or sleeps (the virtual node stopped), and says how many host pods were still
// there (being deleted, they are gone only once their containers stopped).
func (r *Reconciler) removeSharedPods(ctx context.Context, vc *v1alpha1.VirtualCluster) (int, error) {
	sel := client.MatchingLabels(clustertree.HostSelector(vc.Name))
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(vc.Namespace), sel); err != nil {
		return 0, err
	}
	if len(pods.Items) == 0 {
		return 0, nil
	}
	ctrl.LoggerFrom(ctx).Info("removing the shared node's host pods of the tenant", "pods", len(pods.Items), "asleep", vc.Spec.Sleep.Asleep)
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}, &corev1.Secret{}} {
		if err := r.Client.DeleteAllOf(ctx, obj, client.InNamespace(vc.Namespace), sel); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("removing the shared node's host objects: %w", err)
		}
	}
	return len(pods.Items), nil
}

// removeSharedNode deletes the virtual node's Node from a tenant that no longer has the shared
// node, as a lent node's is deleted when it returns: otherwise it stays, NotReady, for good. Its
// pods are then those of a node that is gone: the tenant's pod garbage collector deletes them,
// and their controllers make new ones for the nodes the tenant has. A Node of that name that
// is not the virtual node (no kubenest.io/virtual-node label) is left alone.
func (r *Reconciler) removeSharedNode(ctx context.Context, vc *v1alpha1.VirtualCluster, p *tenantPKI) error {
	cfg, err := r.tenantConfig(vc, p)
	if err != nil {
		return err
	}
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n, err := tenant.CoreV1().Nodes().Get(ctx, r.SharedNodes.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && !sharednode.IsSharedNode(n) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the tenant's Node %s: %w", r.SharedNodes.NodeName, err)
	}
	err = tenant.CoreV1().Nodes().Delete(ctx, n.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &n.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("removing the tenant's Node %s: %w", n.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("removed the shared node's Node from the tenant", "node", n.Name)
	return nil
}

func fingerprintOf(parts ...any) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%v\x00", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
