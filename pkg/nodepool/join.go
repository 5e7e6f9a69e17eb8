package nodepool

import (
	"time"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Keys of a join Secret: what a node agent needs to move its kubelet into a tenant. It lives
// in the operator's namespace, and only the node it is for may read it.
const (
	// JoinKeyBootstrapKubeconfig is the kubelet's bootstrap kubeconfig: the tenant apiserver's
	// address and CA, and a short-lived bootstrap token.
	JoinKeyBootstrapKubeconfig = "bootstrap-kubeconfig"
	// JoinKeyCA is the tenant's CA certificate: the kubelet trusts the tenant apiserver's
	// client certificate with it.
	JoinKeyCA = "ca.crt"
	// JoinKeyClusterDNS and JoinKeyClusterDomain are the tenant's cluster DNS settings for
	// the kubelet.
	JoinKeyClusterDNS    = "cluster-dns"
	JoinKeyClusterDomain = "cluster-domain"
	// JoinKeyTenant is the VirtualCluster, <namespace>/<name>; JoinKeyTenantUID its UID.
	JoinKeyTenant    = "tenant"
	JoinKeyTenantUID = "tenant-uid"
)

// BootstrapGroup is the group a lent node's bootstrap token authenticates as in the tenant;
// the operator lets that group ask for, and have approved, a node client certificate.
const BootstrapGroup = "system:bootstrappers:kubenest"

// BootstrapTokenTTL is how long a lent node's bootstrap token is valid; the operator makes a
// new one when the node has not joined before it is half gone.
const BootstrapTokenTTL = time.Hour

// JoinSecretName is the name of a node's join Secret.
func JoinSecretName(node string) string { return naming.Shorten("kubenest-join-"+node, 253) }

// TenantKey names a tenant the way a node agent reports it: <namespace>/<name>.
func TenantKey(t *v1alpha1.TenantReference) string { return t.Namespace + "/" + t.Name }

// InTenant says whether the node agent reports the kubelet serving tenant t, done switching.
func InTenant(pn *v1alpha1.PoolNode, t *v1alpha1.TenantReference) bool {
	a := pn.Status.Agent
	return t != nil && a.Cluster == TenantKey(t) && a.TenantUID == t.UID && a.Step == ""
}

// InHost says whether the kubelet serves the host, done switching: the agent says so, or no
// agent ever reported (a kubelet starts in the host).
func InHost(pn *v1alpha1.PoolNode) bool {
	a := pn.Status.Agent
	return (a.Cluster == v1alpha1.ClusterHost || a.Cluster == "") && a.Step == ""
}

// OutOfService says whether the kubelet serves no cluster, done switching: a quarantined node's.
func OutOfService(pn *v1alpha1.PoolNode) bool {
	a := pn.Status.Agent
	return a.Cluster == v1alpha1.ClusterNone && a.Step == ""
}

// Quarantined says whether a node the host has back must stay out of service: it was lent to a
// tenant that could be root on it, and the platform has not marked it clean.
func Quarantined(pn *v1alpha1.PoolNode) bool {
	return pn.Status.Quarantine != nil && pn.Spec.Tenant == nil
}

// Reporting says whether the node agent reported within timeout of now.
func Reporting(pn *v1alpha1.PoolNode, now time.Time, timeout time.Duration) bool {
	hb := pn.Status.Agent.HeartbeatTime
	return !hb.IsZero() && now.Sub(hb.Time) < timeout
}

// Phase summarises where a node is, from the operator's intent (spec), the agent's report and
// whether the host's pods are drained.
func Phase(pn *v1alpha1.PoolNode, drained bool, now time.Time, timeout time.Duration) v1alpha1.PoolNodePhase {
	t := pn.Spec.Tenant
	switch {
	case !pn.Status.Agent.HeartbeatTime.IsZero() && !Reporting(pn, now, timeout):
		return v1alpha1.PoolNodeUnreachable
	case t != nil && InTenant(pn, t):
		return v1alpha1.PoolNodeInTenant
	case t != nil && (pn.Spec.JoinSecretName == "" || !drained):
		return v1alpha1.PoolNodeDraining
	case t != nil:
		return v1alpha1.PoolNodeJoiningTenant
	case Quarantined(pn) && OutOfService(pn):
		return v1alpha1.PoolNodeQuarantined
	case InHost(pn) && !Quarantined(pn):
		return v1alpha1.PoolNodeInHost
	default:
		return v1alpha1.PoolNodeReturning
	}
}
