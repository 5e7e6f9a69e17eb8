// Package naming derives the names of every host object KubeNest creates, and holds the labels,
// annotations and finalizers it uses. All of them live under kubenest.io/.
package naming

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLength is the longest name a derived object gets: a DNS label.
const MaxLength = 63

// hashLength is how many hex characters of a SHA-256 replace the tail of a name that is too long.
const hashLength = 10

// Labels, annotations and finalizers.
const (
	// LabelVirtualCluster is set on every host object made for a VirtualCluster; its value is
	// the VirtualCluster's name.
	LabelVirtualCluster = "kubenest.io/virtualcluster"
	// LabelVirtualClusterNamespace is set, next to LabelVirtualCluster, on host objects made
	// for a VirtualCluster outside its namespace: cluster-scoped ones (its ServiceCIDR), and
	// those of its control-plane namespace (ControlPlaneNamespace), the namespace included.
	LabelVirtualClusterNamespace = "kubenest.io/virtualcluster-namespace"
	// LabelComponent tells the tenant's components apart: etcd, controlplane.
	LabelComponent = "kubenest.io/component"
	// LabelManagedBy marks what KubeNest created, for people and for selectors.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is the value of LabelManagedBy.
	ManagedByValue = "kubenest"

	// AnnotationConfigHash on a pod template changes when the certificates or kubeconfigs the
	// pods mount change, so that they roll.
	AnnotationConfigHash = "kubenest.io/config-hash"

	// FinalizerVirtualCluster holds a VirtualCluster until what owner references cannot
	// cover is cleaned up.
	FinalizerVirtualCluster = "kubenest.io/virtualcluster"
)

// Component names, the values of LabelComponent.
const (
	ComponentEtcd         = "etcd"
	ComponentControlPlane = "controlplane"
)

// Join joins parts with "-" and keeps the result at most MaxLength characters: a name that
// would be longer is cut and ends with a hash of the whole, so distinct inputs stay distinct.
func Join(parts ...string) string {
	name := ""
	for i, p := range parts {
		if i > 0 {
			name += "-"
		}
		name += p
	}
	return Shorten(name, MaxLength)
}

// Shorten returns name when it fits in max characters, else a prefix of it followed by "-" and
// a hash of the full name, max characters in all.
func Shorten(name string, max int) string {
	if len(name) <= max {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	suffix := hex.EncodeToString(sum[:])[:hashLength]
	prefix := name[:max-hashLength-1]
	// A name must not end in '-' or '.' before the suffix's own '-'.
	for len(prefix) > 0 && (prefix[len(prefix)-1] == '-' || prefix[len(prefix)-1] == '.') {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix + "-" + suffix
}

// ControlPlaneNamespacePrefix starts the name of every control-plane namespace. The chart's
// admission policy lets only the operator create namespaces so named.
const ControlPlaneNamespacePrefix = "kubenest-cp-"

// ControlPlaneNamespace names the host namespace holding the control planes of the
// VirtualClusters of namespace ns (and their snapshots): kubenest-cp-<ns>, shortened with a
// hash when longer than a namespace name may be.
func ControlPlaneNamespace(ns string) string {
	return Shorten(ControlPlaneNamespacePrefix+ns, MaxLength)
}

// Names are the names of the host objects of one VirtualCluster.
type Names struct {
	vc string
}

// For returns the names of the host objects of the VirtualCluster called vc.
func For(vc string) Names { return Names{vc: vc} }

// EtcdStatefulSet is the etcd StatefulSet; its pods are <name>-0, -1, -2.
func (n Names) EtcdStatefulSet() string { return Join(n.vc, "etcd") }

// EtcdPeerService is the headless Service that gives each etcd member a stable DNS name.
func (n Names) EtcdPeerService() string { return Join(n.vc, "etcd", "peer") }

// EtcdClientService is the Service the apiserver reaches etcd through.
func (n Names) EtcdClientService() string { return Join(n.vc, "etcd") }

// ControlPlaneDeployment runs apiserver, controller-manager and scheduler.
func (n Names) ControlPlaneDeployment() string { return Join(n.vc, "controlplane") }

// APIServerService publishes the tenant's apiserver.
func (n Names) APIServerService() string { return Join(n.vc, "apiserver") }

// CASecret holds the private keys of the tenant's certificate authorities and its
// service-account signing key. Only the operator reads it.
func (n Names) CASecret() string { return Join(n.vc, "ca") }

// CACertificate is the cert-manager Certificate that asks a tenant's issuer (spec.pki) for its
// cluster CA.
func (n Names) CACertificate() string { return Join(n.vc, "ca") }

// IssuedCASecret is where cert-manager writes the cluster CA it issued; the operator copies it
// into the CA Secret.
func (n Names) IssuedCASecret() string { return Join(n.vc, "ca-issued") }

// EtcdCertsSecret holds the etcd members' serving and peer certificates.
func (n Names) EtcdCertsSecret() string { return Join(n.vc, "etcd-certs") }

// ControlPlaneCertsSecret holds the certificates and keys the control-plane pod mounts.
func (n Names) ControlPlaneCertsSecret() string { return Join(n.vc, "controlplane-certs") }

// KubeletSignerSecret holds the key the tenant's controller-manager signs kubelet client
// certificates with; only that container mounts it.
func (n Names) KubeletSignerSecret() string { return Join(n.vc, "kubelet-signer") }

// KubeconfigSecret holds the tenant's admin kubeconfig (key "value", the Cluster API
// convention) and its in-cluster variant.
func (n Names) KubeconfigSecret() string { return Join(n.vc, "kubeconfig") }

// ServiceCIDR names the host ServiceCIDR that holds the tenant Service range cidr (for
// example 10.254.3.0/24 gives kubenest-10-254-3-0-24). Named by the range, so creating it
// claims the range: two tenants can never get the same one.
func ServiceCIDR(cidr string) string {
	return "kubenest-" + strings.NewReplacer(".", "-", "/", "-", ":", "-").Replace(cidr)
}

// Labels are the labels every host object of the VirtualCluster carries.
func (n Names) Labels(component string) map[string]string {
	l := map[string]string{
		LabelVirtualCluster: n.vc,
		LabelManagedBy:      ManagedByValue,
	}
	if component != "" {
		l[LabelComponent] = component
	}
	return l
}
