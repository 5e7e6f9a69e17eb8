// Package controlplane turns a VirtualCluster into the host objects that run its control plane:
// certificates and the Secrets holding them, the etcd StatefulSet and its Services, the
// control-plane Deployment (kube-apiserver, kube-controller-manager, kube-scheduler) and the
// apiserver Service. Every function here is pure: typed objects in, typed objects out, no
// client and no clock of its own.
package controlplane

import (
	"fmt"
	"math/big"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	netutils "k8s.io/utils/net"
)

// Settings are the operator-wide choices every tenant shares, set by the operator's flags.
type Settings struct {
	// Image runs every tenant component (the nest-controlplane binary).
	Image string
	// DNSImage runs each tenant's CoreDNS.
	DNSImage string
	// ImagePullPolicy of the tenant pods.
	ImagePullPolicy corev1.PullPolicy
	// HostClusterDomain is the host cluster's DNS domain, for the Service names in certificates.
	HostClusterDomain string
	// ServiceCIDR is the range the tenant's Services get their ClusterIPs from: for one
	// tenant, its slice of ServiceCIDRPool (see ForTenant).
	ServiceCIDR string
	// ServiceCIDRPool is the range the operator gives tenants slices of, each a
	// ServiceCIDRPrefix long: never overlapping each other, the host's Services or pods.
	ServiceCIDRPool   string
	ServiceCIDRPrefix int
	// LeafValidity is how long leaf certificates are valid; zero means a year.
	LeafValidity time.Duration
	// ControlPlanesOnLendableNodes lets tenant etcd and control-plane pods run on nodes
	// labelled lendable, after the others: a node that runs one is never lent (lending drains
	// it). Off, they run only on the other nodes.
	ControlPlanesOnLendableNodes bool
}

// DefaultSettings are the settings the operator starts with.
func DefaultSettings() Settings {
	return Settings{
		Image:             "kubenest.io/kubenest:dev",
		DNSImage:          "kubenest.io/coredns:v1.15.0-2",
		ImagePullPolicy:   corev1.PullIfNotPresent,
		HostClusterDomain: "cluster.local",
		ServiceCIDR:       "10.254.0.0/16",
		ServiceCIDRPool:   "10.254.0.0/16",
		ServiceCIDRPrefix: 24,
	}
}

// Validate says which setting is unusable.
func (s Settings) Validate() error {
	if s.Image == "" {
		return fmt.Errorf("controlplane image must be set")
	}
	if s.DNSImage == "" {
		return fmt.Errorf("tenant DNS image must be set")
	}
	if s.HostClusterDomain == "" {
		return fmt.Errorf("host cluster domain must be set")
	}
	if _, err := s.kubernetesServiceIP(); err != nil {
		return err
	}
	if _, err := NextServiceCIDR(s.ServiceCIDRPool, s.ServiceCIDRPrefix, nil); err != nil {
		return err
	}
	if s.LeafValidity < 0 {
		return fmt.Errorf("leaf certificate validity must not be negative")
	}
	return nil
}

// ForTenant is s for one tenant, whose Services take their ClusterIPs from serviceCIDR.
func (s Settings) ForTenant(serviceCIDR string) Settings {
	if serviceCIDR != "" {
		s.ServiceCIDR = serviceCIDR
	}
	return s
}

// NextServiceCIDR is the first slice of pool, prefix bits long, that is not in used: the
// Service range of a new tenant.
func NextServiceCIDR(pool string, prefix int, used map[string]bool) (string, error) {
	_, p, err := netutils.ParseCIDRSloppy(pool)
	if err != nil {
		return "", fmt.Errorf("tenant service CIDR pool %q: %w", pool, err)
	}
	ones, bits := p.Mask.Size()
	// At most 4096 addresses: the host holds each free one as an object (package iphold).
	if prefix < max(ones, bits-12) || prefix > bits-4 {
		return "", fmt.Errorf("tenant service CIDR prefix /%d: must be between /%d and /%d, for 16 to 4096 addresses (and no shorter than the pool's /%d)",
			prefix, max(ones, bits-12), bits-4, ones)
	}
	if prefix-ones > 16 {
		return "", fmt.Errorf("tenant service CIDR prefix /%d: at most 65536 slices of the pool %s", prefix, pool)
	}
	size := big.NewInt(1)
	size.Lsh(size, uint(bits-prefix))
	base := new(big.Int).SetBytes(p.IP)
	for i := int64(0); i < int64(1)<<(prefix-ones); i++ {
		ip := new(big.Int).Add(base, new(big.Int).Mul(size, big.NewInt(i))).FillBytes(make([]byte, len(p.IP)))
		cidr := (&net.IPNet{IP: ip, Mask: net.CIDRMask(prefix, bits)}).String()
		if !used[cidr] {
			return cidr, nil
		}
	}
	return "", fmt.Errorf("tenant service CIDR pool %s is exhausted: all %d slices of /%d are in use", pool, int64(1)<<(prefix-ones), prefix)
}

// DNSServiceIP is the ClusterIP of the tenant's cluster DNS Service: the tenth address of the
// service range, as kubeadm does.
func (s Settings) DNSServiceIP() (net.IP, error) { return DNSServiceIP(s.ServiceCIDR) }

// DNSServiceIP is the tenth address of a tenant's Service range, its cluster DNS Service's.
func DNSServiceIP(serviceCIDR string) (net.IP, error) {
	_, cidr, err := netutils.ParseCIDRSloppy(serviceCIDR)
	if err != nil {
		return nil, fmt.Errorf("tenant service CIDR %q: %w", serviceCIDR, err)
	}
	return netutils.GetIndexedIP(cidr, 10)
}

// kubernetesServiceIP is the ClusterIP of the tenant's "kubernetes" Service: the first address
// of the service range.
func (s Settings) kubernetesServiceIP() (net.IP, error) {
	_, cidr, err := netutils.ParseCIDRSloppy(s.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("tenant service CIDR %q: %w", s.ServiceCIDR, err)
	}
	ip, err := netutils.GetIndexedIP(cidr, 1)
	if err != nil {
		return nil, fmt.Errorf("tenant service CIDR %q: %w", s.ServiceCIDR, err)
	}
	return ip, nil
}

// Ports of the tenant components.
const (
	APIServerPort         = 6443
	EtcdClientPort        = 2379
	EtcdPeerPort          = 2380
	EtcdMetricsPort       = 2381
	ControllerManagerPort = 10257
	SchedulerPort         = 10259
	// EtcdClientHTTPPort serves etcd's HTTP endpoints for clients (/health, /version, the
	// gRPC gateway), on the pod's loopback only: see EtcdStatefulSet.
	EtcdClientHTTPPort = 2382
)

// TenantClusterDomain is the DNS domain inside every tenant.
const TenantClusterDomain = "cluster.local"
