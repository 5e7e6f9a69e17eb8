// Package controlplane turns a VirtualCluster into the host objects that run its control plane:
// certificates and the Secrets holding them, the etcd StatefulSet and its Services, the
// control-plane Deployment (kube-apiserver, kube-controller-manager, kube-scheduler) and the
// apiserver Service. Every function here is pure: typed objects in, typed objects out, no
// client and no clock of its own.
package controlplane

import (
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	netutils "k8s.io/utils/net"
)

// Settings are the operator-wide choices every tenant shares, set by the operator's flags.
type Settings struct {
	// Image runs every tenant component (the nest-controlplane binary).
	Image string
	// ImagePullPolicy of the tenant pods.
	ImagePullPolicy corev1.PullPolicy
	// HostClusterDomain is the host cluster's DNS domain, for the Service names in certificates.
	HostClusterDomain string
	// ServiceCIDR is the range the tenant's Services get their ClusterIPs from.
	ServiceCIDR string
	// LeafValidity is how long leaf certificates are valid; zero means a year.
	LeafValidity time.Duration
}

// DefaultSettings are the settings the operator starts with.
func DefaultSettings() Settings {
	return Settings{
		Image:             "kubenest.io/kubenest:dev",
		ImagePullPolicy:   corev1.PullIfNotPresent,
		HostClusterDomain: "cluster.local",
		ServiceCIDR:       "10.254.0.0/16",
	}
}

// Validate says which setting is unusable.
func (s Settings) Validate() error {
	if s.Image == "" {
		return fmt.Errorf("controlplane image must be set")
	}
	if s.HostClusterDomain == "" {
		return fmt.Errorf("host cluster domain must be set")
	}
	if _, err := s.kubernetesServiceIP(); err != nil {
		return err
	}
	if s.LeafValidity < 0 {
		return fmt.Errorf("leaf certificate validity must not be negative")
	}
	return nil
}

// DNSServiceIP is the ClusterIP of the tenant's cluster DNS Service: the tenth address of the
// service range, as kubeadm does.
func (s Settings) DNSServiceIP() (net.IP, error) {
	_, cidr, err := netutils.ParseCIDRSloppy(s.ServiceCIDR)
	if err != nil {
		return nil, fmt.Errorf("tenant service CIDR %q: %w", s.ServiceCIDR, err)
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
)

// TenantClusterDomain is the DNS domain inside every tenant.
const TenantClusterDomain = "cluster.local"
