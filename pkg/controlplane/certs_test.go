package controlplane_test

import (
	"bytes"
	"maps"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// now is the fixed "now" every test starts from.
var now = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

const (
	vcName = "tenant"
	vcNS   = "tenants"
	// cpNS is the control-plane namespace of a new VirtualCluster of vcNS.
	cpNS = "kubenest-cp-tenants"
)

// newVC is a VirtualCluster as the API server would return it, defaults applied, changed by
// modify.
func newVC(modify ...func(*v1alpha1.VirtualCluster)) *v1alpha1.VirtualCluster {
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: vcName, Namespace: vcNS, UID: types.UID("5f0c3d2e-uid")},
	}
	for _, m := range modify {
		m(vc)
	}
	return vc
}

// legacy makes vc one an earlier release made, whose control plane stays in its own namespace.
func legacy(vc *v1alpha1.VirtualCluster) { vc.Status.ControlPlaneNamespace = vc.Namespace }

func newAuthorities(t *testing.T) *controlplane.Authorities {
	t.Helper()
	a, err := controlplane.NewAuthorities(vcName, now)
	if err != nil {
		t.Fatalf("NewAuthorities: %v", err)
	}
	return a
}

func leafSpecs(t *testing.T, vc *v1alpha1.VirtualCluster, s controlplane.Settings, exp controlplane.Exposure) map[controlplane.Leaf]controlplane.LeafSpec {
	t.Helper()
	specs, err := controlplane.LeafSpecs(vc, s, exp)
	if err != nil {
		t.Fatalf("LeafSpecs: %v", err)
	}
	return specs
}

func ensure(t *testing.T, a *controlplane.Authorities, specs map[controlplane.Leaf]controlplane.LeafSpec, existing map[controlplane.Leaf]controlplane.PEMPair, at time.Time) (controlplane.Leaves, map[controlplane.Leaf]string) {
	t.Helper()
	leaves, renewed, err := controlplane.EnsureLeaves(a, specs, existing, at)
	if err != nil {
		t.Fatalf("EnsureLeaves: %v", err)
	}
	return leaves, renewed
}

var allLeaves = []controlplane.Leaf{
	controlplane.LeafAPIServer, controlplane.LeafAPIServerKubeletClient, controlplane.LeafAPIServerEtcdClient,
	controlplane.LeafFrontProxyClient, controlplane.LeafControllerManager, controlplane.LeafScheduler,
	controlplane.LeafAdmin, controlplane.LeafEtcdServer, controlplane.LeafEtcdPeer, controlplane.LeafDNS,
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		out = append(out, ip.String())
	}
	return out
}

func TestLeafSpecsAPIServerSANs(t *testing.T) {
	tests := []struct {
		name      string
		vc        *v1alpha1.VirtualCluster
		settings  func(*controlplane.Settings)
		exposure  controlplane.Exposure
		wantDNS   []string
		wantIPs   []string
		unwantDNS []string
	}{
		{
			name:     "defaults",
			vc:       newVC(),
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantDNS: []string{
				"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local",
				"tenant-apiserver", "tenant-apiserver.kubenest-cp-tenants",
				"tenant-apiserver.kubenest-cp-tenants.svc", "tenant-apiserver.kubenest-cp-tenants.svc.cluster.local",
			},
			wantIPs: []string{"127.0.0.1", "10.254.0.1", "10.96.0.20"},
			// A Service of that name in the tenant's own namespace is not the apiserver.
			unwantDNS: []string{"tenant-apiserver.tenants", "tenant-apiserver.tenants.svc", "tenant-apiserver.tenants.svc.cluster.local"},
		},
		{
			name:     "an earlier release's tenant: its own namespace",
			vc:       newVC(legacy),
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantDNS: []string{
				"tenant-apiserver", "tenant-apiserver.tenants",
				"tenant-apiserver.tenants.svc", "tenant-apiserver.tenants.svc.cluster.local",
			},
			wantIPs:   []string{"127.0.0.1", "10.254.0.1", "10.96.0.20"},
			unwantDNS: []string{"tenant-apiserver.kubenest-cp-tenants", "tenant-apiserver.kubenest-cp-tenants.svc", "tenant-apiserver.kubenest-cp-tenants.svc.cluster.local"},
		},
		{
			name: "other host domain and service range",
			vc:   newVC(),
			settings: func(s *controlplane.Settings) {
				s.HostClusterDomain = "corp.example"
				s.ServiceCIDR = "10.100.8.0/22"
			},
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20"},
			wantDNS: []string{
				"kubernetes.default.svc.cluster.local",
				"tenant-apiserver.kubenest-cp-tenants.svc", "tenant-apiserver.kubenest-cp-tenants.svc.corp.example",
			},
			wantIPs:   []string{"127.0.0.1", "10.100.8.1", "10.96.0.20"},
			unwantDNS: []string{"tenant-apiserver.kubenest-cp-tenants.svc.cluster.local"},
		},
		{
			name:     "IPv6 service range",
			vc:       newVC(),
			settings: func(s *controlplane.Settings) { s.ServiceCIDR = "fd00:10:254::/108" },
			exposure: controlplane.Exposure{ClusterIP: "fd00:10:96::20"},
			wantIPs:  []string{"127.0.0.1", "fd00:10:254::1", "fd00:10:96::20"},
		},
		{
			name:     "node address",
			vc:       newVC(),
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "192.0.2.10", Endpoint: "https://192.0.2.10:31443"},
			wantIPs:  []string{"127.0.0.1", "10.254.0.1", "10.96.0.20", "192.0.2.10"},
		},
		{
			name:     "load balancer host name",
			vc:       newVC(),
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "lb-1.elb.example.com", Endpoint: "https://lb-1.elb.example.com:6443"},
			wantDNS:  []string{"lb-1.elb.example.com", "tenant-apiserver.kubenest-cp-tenants.svc"},
			wantIPs:  []string{"127.0.0.1", "10.254.0.1", "10.96.0.20"},
		},
		{
			name:     "headless or unknown ClusterIP",
			vc:       newVC(),
			exposure: controlplane.Exposure{ClusterIP: "None"},
			wantIPs:  []string{"127.0.0.1", "10.254.0.1"},
		},
		{
			name: "extra SANs, some duplicates",
			vc: newVC(func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.Exposure.ExtraSANs = []string{
					"api.example.com", "*.apps.example.com", "203.0.113.5", "fd00::5",
					"localhost", "10.254.0.1", "192.0.2.10",
				}
			}),
			exposure: controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "192.0.2.10"},
			wantDNS:  []string{"api.example.com", "*.apps.example.com", "localhost", "tenant-apiserver.kubenest-cp-tenants.svc.cluster.local"},
			wantIPs:  []string{"127.0.0.1", "10.254.0.1", "10.96.0.20", "203.0.113.5", "fd00::5", "192.0.2.10"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := controlplane.DefaultSettings()
			if tt.settings != nil {
				tt.settings(&s)
			}
			spec := leafSpecs(t, tt.vc, s, tt.exposure)[controlplane.LeafAPIServer]
			for _, want := range tt.wantDNS {
				if !slices.Contains(spec.DNSNames, want) {
					t.Errorf("apiserver DNS names %q lack %q", spec.DNSNames, want)
				}
			}
			for _, unwant := range tt.unwantDNS {
				if slices.Contains(spec.DNSNames, unwant) {
					t.Errorf("apiserver DNS names %q contain %q", spec.DNSNames, unwant)
				}
			}
			ips := ipStrings(spec.IPs)
			if !sameSet(ips, tt.wantIPs) {
				t.Errorf("apiserver IPs = %q, want %q", ips, tt.wantIPs)
			}
			for _, dns := range spec.DNSNames {
				if net.ParseIP(dns) != nil {
					t.Errorf("IP address %q among the DNS names", dns)
				}
			}
			if spec.CommonName != "kube-apiserver" || spec.Usage != pki.UsageServer || spec.Issuer != controlplane.IssuerCA {
				t.Errorf("apiserver spec CN %q usage %v issuer %v", spec.CommonName, spec.Usage, spec.Issuer)
			}
		})
	}
}

func TestLeafSpecsEtcdSANs(t *testing.T) {
	tests := []struct {
		name        string
		domain      string
		modify      func(*v1alpha1.VirtualCluster)
		wantServer  []string
		wantPeer    []string
		wantService []string
		unwant      []string
	}{
		{
			name:   "default host domain",
			domain: "cluster.local",
			wantPeer: []string{
				"*.tenant-etcd-peer.kubenest-cp-tenants.svc", "*.tenant-etcd-peer.kubenest-cp-tenants.svc.cluster.local",
			},
			wantService: []string{"localhost", "tenant-etcd", "tenant-etcd.kubenest-cp-tenants.svc", "tenant-etcd.kubenest-cp-tenants.svc.cluster.local"},
			unwant:      []string{"*.tenant-etcd-peer.tenants.svc", "tenant-etcd.tenants.svc", "tenant-etcd.tenants.svc.cluster.local"},
		},
		{
			name:   "an earlier release's tenant: its own namespace",
			domain: "cluster.local",
			modify: legacy,
			wantPeer: []string{
				"*.tenant-etcd-peer.tenants.svc", "*.tenant-etcd-peer.tenants.svc.cluster.local",
			},
			wantService: []string{"localhost", "tenant-etcd", "tenant-etcd.tenants.svc", "tenant-etcd.tenants.svc.cluster.local"},
			unwant:      []string{"*.tenant-etcd-peer.kubenest-cp-tenants.svc", "tenant-etcd.kubenest-cp-tenants.svc"},
		},
		{
			name:   "other host domain",
			domain: "corp.example",
			wantPeer: []string{
				"*.tenant-etcd-peer.kubenest-cp-tenants.svc", "*.tenant-etcd-peer.kubenest-cp-tenants.svc.corp.example",
			},
			wantService: []string{"tenant-etcd.kubenest-cp-tenants.svc", "tenant-etcd.kubenest-cp-tenants.svc.corp.example"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := controlplane.DefaultSettings()
			s.HostClusterDomain = tt.domain
			vc := newVC()
			if tt.modify != nil {
				tt.modify(vc)
			}
			specs := leafSpecs(t, vc, s, controlplane.Exposure{})
			server, peer := specs[controlplane.LeafEtcdServer], specs[controlplane.LeafEtcdPeer]
			for _, unwant := range tt.unwant {
				if slices.Contains(server.DNSNames, unwant) || slices.Contains(peer.DNSNames, unwant) {
					t.Errorf("etcd DNS names %q, %q contain %q", server.DNSNames, peer.DNSNames, unwant)
				}
			}
			for _, want := range append(slices.Clone(tt.wantPeer), tt.wantService...) {
				if !slices.Contains(server.DNSNames, want) {
					t.Errorf("etcd server DNS names %q lack %q", server.DNSNames, want)
				}
			}
			for _, want := range tt.wantPeer {
				if !slices.Contains(peer.DNSNames, want) {
					t.Errorf("etcd peer DNS names %q lack %q", peer.DNSNames, want)
				}
			}
			if got := ipStrings(server.IPs); !sameSet(got, []string{"127.0.0.1"}) {
				t.Errorf("etcd server IPs = %q, want 127.0.0.1", got)
			}
			for _, l := range []controlplane.LeafSpec{server, peer} {
				if l.Issuer != controlplane.IssuerEtcdCA || l.Usage != pki.UsageServer|pki.UsageClient {
					t.Errorf("etcd %s: issuer %v usage %v, want the etcd CA, server and client", l.CommonName, l.Issuer, l.Usage)
				}
			}
		})
	}
}

func TestLeafSpecsIdentities(t *testing.T) {
	s := controlplane.DefaultSettings()
	s.LeafValidity = 90 * 24 * time.Hour
	specs := leafSpecs(t, newVC(), s, controlplane.Exposure{ClusterIP: "10.96.0.20"})
	if got := slices.Sorted(maps.Keys(specs)); !sameSet(leafNames(got), leafNames(allLeaves)) {
		t.Errorf("leaves = %q, want %q", got, allLeaves)
	}
	tests := []struct {
		leaf   controlplane.Leaf
		issuer controlplane.Issuer
		cn     string
		orgs   []string
		usage  pki.Usage
	}{
		{controlplane.LeafAPIServerKubeletClient, controlplane.IssuerCA, controlplane.APIServerKubeletClient, nil, pki.UsageClient},
		// Also the certificates they serve their ports with, for localhost.
		{controlplane.LeafControllerManager, controlplane.IssuerCA, controlplane.ControllerManagerUser, nil, pki.UsageClient | pki.UsageServer},
		{controlplane.LeafScheduler, controlplane.IssuerCA, controlplane.SchedulerUser, nil, pki.UsageClient | pki.UsageServer},
		{controlplane.LeafDNS, controlplane.IssuerCA, controlplane.DNSUser, nil, pki.UsageClient},
		{controlplane.LeafAdmin, controlplane.IssuerCA, controlplane.AdminUser, []string{controlplane.MastersGroup}, pki.UsageClient},
		{controlplane.LeafFrontProxyClient, controlplane.IssuerFrontProxyCA, controlplane.FrontProxyClientUser, nil, pki.UsageClient},
		{controlplane.LeafAPIServerEtcdClient, controlplane.IssuerEtcdCA, "kube-apiserver-etcd-client", nil, pki.UsageClient},
	}
	for _, tt := range tests {
		t.Run(string(tt.leaf), func(t *testing.T) {
			spec := specs[tt.leaf]
			if spec.Issuer != tt.issuer || spec.CommonName != tt.cn || !slices.Equal(spec.Organization, tt.orgs) || spec.Usage != tt.usage {
				t.Errorf("%s = issuer %v CN %q O %q usage %v; want issuer %v CN %q O %q usage %v", tt.leaf,
					spec.Issuer, spec.CommonName, spec.Organization, spec.Usage, tt.issuer, tt.cn, tt.orgs, tt.usage)
			}
			if tt.usage&pki.UsageServer != 0 {
				if !slices.Equal(spec.DNSNames, []string{"localhost"}) || len(spec.IPs) != 1 || !spec.IPs[0].Equal(net.ParseIP("127.0.0.1")) {
					t.Errorf("serving certificate %s has SANs %q %v, want localhost and 127.0.0.1", tt.leaf, spec.DNSNames, spec.IPs)
				}
			} else if len(spec.DNSNames) != 0 || len(spec.IPs) != 0 {
				t.Errorf("client certificate %s has SANs %q %v", tt.leaf, spec.DNSNames, spec.IPs)
			}
		})
	}
	for name, spec := range specs {
		if spec.Validity != s.LeafValidity {
			t.Errorf("%s validity %s, want the settings' %s", name, spec.Validity, s.LeafValidity)
		}
	}
}

func TestLeafSpecsNoDuplicates(t *testing.T) {
	vc := newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.ControlPlane.Exposure.ExtraSANs = []string{"localhost", "127.0.0.1", "10.96.0.20", "tenant-apiserver.kubenest-cp-tenants.svc", "api.example.com"}
	})
	specs := leafSpecs(t, vc, controlplane.DefaultSettings(), controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "api.example.com"})
	for name, spec := range specs {
		if d := duplicates(spec.DNSNames); len(d) > 0 {
			t.Errorf("%s: duplicate DNS names %q in %q", name, d, spec.DNSNames)
		}
		if d := duplicates(ipStrings(spec.IPs)); len(d) > 0 {
			t.Errorf("%s: duplicate IPs %q in %v", name, d, spec.IPs)
		}
	}
}

func TestLeafSpecsInvalidServiceCIDR(t *testing.T) {
	for _, cidr := range []string{"", "10.254.0.0", "not-a-cidr"} {
		s := controlplane.DefaultSettings()
		s.ServiceCIDR = cidr
		if _, err := controlplane.LeafSpecs(newVC(), s, controlplane.Exposure{}); err == nil {
			t.Errorf("LeafSpecs with service CIDR %q succeeded, want an error", cidr)
		}
		if err := s.Validate(); err == nil {
			t.Errorf("Settings.Validate with service CIDR %q = nil, want an error", cidr)
		}
	}
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*controlplane.Settings)
		wantErr bool
	}{
		{"defaults", func(*controlplane.Settings) {}, false},
		{"no image", func(s *controlplane.Settings) { s.Image = "" }, true},
		{"no host domain", func(s *controlplane.Settings) { s.HostClusterDomain = "" }, true},
		{"negative validity", func(s *controlplane.Settings) { s.LeafValidity = -time.Hour }, true},
		{"positive validity", func(s *controlplane.Settings) { s.LeafValidity = time.Hour }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := controlplane.DefaultSettings()
			tt.modify(&s)
			if err := s.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tt.wantErr)
			}
		})
	}
}

// stored is what a pass leaves in the host: the three Secrets the existing leaves are read
// back from, as the reconciler does.
func stored(t *testing.T, vc *v1alpha1.VirtualCluster, a *controlplane.Authorities, l controlplane.Leaves) map[controlplane.Leaf]controlplane.PEMPair {
	t.Helper()
	etcd, err := controlplane.EtcdCertsSecret(vc, a, l)
	if err != nil {
		t.Fatalf("EtcdCertsSecret: %v", err)
	}
	cp, err := controlplane.ControlPlaneCertsSecret(vc, a, l)
	if err != nil {
		t.Fatalf("ControlPlaneCertsSecret: %v", err)
	}
	kc, err := controlplane.KubeconfigSecret(vc, a, l, "https://192.0.2.10:31443")
	if err != nil {
		t.Fatalf("KubeconfigSecret: %v", err)
	}
	existing := map[controlplane.Leaf]controlplane.PEMPair{}
	maps.Copy(existing, controlplane.ExistingLeaves(etcd.Data))
	maps.Copy(existing, controlplane.ExistingLeaves(cp.Data))
	admin, ok := controlplane.AdminFromKubeconfig(kc.Data)
	if !ok {
		t.Fatal("AdminFromKubeconfig found no admin certificate")
	}
	existing[controlplane.LeafAdmin] = admin
	return existing
}

func TestEnsureLeaves(t *testing.T) {
	vc := newVC()
	s := controlplane.DefaultSettings()
	exp := controlplane.Exposure{ClusterIP: "10.96.0.20", Endpoint: controlplane.InClusterEndpoint(vc)}
	a := newAuthorities(t)
	specs := leafSpecs(t, vc, s, exp)

	first, renewed := ensure(t, a, specs, nil, now)
	t.Run("none exist", func(t *testing.T) {
		if len(first) != len(specs) {
			t.Errorf("issued %d leaves, want %d", len(first), len(specs))
		}
		for _, name := range allLeaves {
			if renewed[name] != "missing" {
				t.Errorf("renewed[%s] = %q, want missing", name, renewed[name])
			}
			kp := first[name]
			if kp == nil {
				t.Fatalf("no %s certificate", name)
			}
			spec := specs[name]
			issuer := map[controlplane.Issuer]*pki.KeyPair{
				controlplane.IssuerCA: a.CA, controlplane.IssuerFrontProxyCA: a.FrontProxyCA, controlplane.IssuerEtcdCA: a.EtcdCA,
			}[spec.Issuer]
			if err := kp.Check(spec.CertSpec, issuer.Cert, now); err != nil {
				t.Errorf("%s does not serve its spec: %v", name, err)
			}
		}
	})

	existing := stored(t, vc, a, first)
	t.Run("stored leaves are found again", func(t *testing.T) {
		if got := slices.Sorted(maps.Keys(existing)); !sameSet(leafNames(got), leafNames(allLeaves)) {
			t.Errorf("existing leaves = %q, want %q", got, allLeaves)
		}
	})

	t.Run("second pass reuses all", func(t *testing.T) {
		later := now.Add(24 * time.Hour)
		leaves, renewed := ensure(t, a, specs, existing, later)
		if len(renewed) != 0 {
			t.Errorf("renewed = %v, want nothing", renewed)
		}
		for _, name := range allLeaves {
			if !leaves[name].Cert.Equal(first[name].Cert) {
				t.Errorf("%s was reissued", name)
			}
		}
	})

	t.Run("new SAN reissues only the apiserver", func(t *testing.T) {
		nodePort := controlplane.Exposure{ClusterIP: "10.96.0.20", Address: "192.0.2.10", Endpoint: "https://192.0.2.10:31443"}
		leaves, renewed := ensure(t, a, leafSpecs(t, vc, s, nodePort), existing, now.Add(time.Hour))
		if got := slices.Collect(maps.Keys(renewed)); !slices.Equal(got, []controlplane.Leaf{controlplane.LeafAPIServer}) {
			t.Errorf("renewed = %v, want only %s", renewed, controlplane.LeafAPIServer)
		}
		if !strings.Contains(renewed[controlplane.LeafAPIServer], "192.0.2.10") {
			t.Errorf("reason %q does not name the new address", renewed[controlplane.LeafAPIServer])
		}
		if !slices.ContainsFunc(leaves[controlplane.LeafAPIServer].Cert.IPAddresses, net.ParseIP("192.0.2.10").Equal) {
			t.Errorf("new apiserver certificate lacks 192.0.2.10: %v", leaves[controlplane.LeafAPIServer].Cert.IPAddresses)
		}
		for _, name := range allLeaves {
			if name != controlplane.LeafAPIServer && !leaves[name].Cert.Equal(first[name].Cert) {
				t.Errorf("%s was reissued", name)
			}
		}
	})

	t.Run("after the renewal point everything is reissued", func(t *testing.T) {
		later := pki.RenewAt(first[controlplane.LeafAPIServer].Cert).Add(time.Hour)
		leaves, renewed := ensure(t, a, specs, existing, later)
		for _, name := range allLeaves {
			if !strings.Contains(renewed[name], "due for renewal") {
				t.Errorf("renewed[%s] = %q, want due for renewal", name, renewed[name])
			}
			if leaves[name].Cert.Equal(first[name].Cert) {
				t.Errorf("%s was not reissued", name)
			}
			if !leaves[name].Cert.NotBefore.After(first[name].Cert.NotBefore) {
				t.Errorf("%s: new NotBefore %s not after the old %s", name, leaves[name].Cert.NotBefore, first[name].Cert.NotBefore)
			}
		}
	})

	t.Run("new authorities reissue everything", func(t *testing.T) {
		other := newAuthorities(t)
		leaves, renewed := ensure(t, other, specs, existing, now.Add(time.Hour))
		for _, name := range allLeaves {
			if !strings.Contains(renewed[name], "not signed by the current CA") {
				t.Errorf("renewed[%s] = %q, want not signed by the current CA", name, renewed[name])
			}
			if leaves[name].Cert.Equal(first[name].Cert) {
				t.Errorf("%s was not reissued", name)
			}
		}
	})

	t.Run("one new authority reissues what it signs", func(t *testing.T) {
		other := newAuthorities(t)
		mixed := *a
		mixed.EtcdCA = other.EtcdCA
		_, renewed := ensure(t, &mixed, specs, existing, now.Add(time.Hour))
		want := []string{string(controlplane.LeafAPIServerEtcdClient), string(controlplane.LeafEtcdServer), string(controlplane.LeafEtcdPeer)}
		if got := leafNames(slices.Collect(maps.Keys(renewed))); !sameSet(got, want) {
			t.Errorf("renewed %q, want %q", got, want)
		}
	})

	t.Run("garbage is reissued", func(t *testing.T) {
		broken := maps.Clone(existing)
		broken[controlplane.LeafScheduler] = controlplane.PEMPair{Cert: []byte("junk"), Key: []byte("junk")}
		leaves, renewed := ensure(t, a, specs, broken, now.Add(time.Hour))
		if got := slices.Collect(maps.Keys(renewed)); !slices.Equal(got, []controlplane.Leaf{controlplane.LeafScheduler}) {
			t.Errorf("renewed = %v, want only the scheduler", renewed)
		}
		if leaves[controlplane.LeafScheduler] == nil || leaves[controlplane.LeafScheduler].Cert.Subject.CommonName != controlplane.SchedulerUser {
			t.Errorf("scheduler certificate not reissued properly")
		}
	})
}

func TestLeavesEarliest(t *testing.T) {
	a := newAuthorities(t)
	s := controlplane.DefaultSettings()
	specs := leafSpecs(t, newVC(), s, controlplane.Exposure{})
	short := specs[controlplane.LeafScheduler]
	short.Validity = 30 * 24 * time.Hour
	specs[controlplane.LeafScheduler] = short
	leaves, _ := ensure(t, a, specs, nil, now)
	leaf, at := leaves.EarliestExpiry()
	if leaf != controlplane.LeafScheduler || !at.Equal(now.Add(30*24*time.Hour)) {
		t.Errorf("EarliestExpiry = %s at %s, want scheduler at %s", leaf, at, now.Add(30*24*time.Hour))
	}
	if got, want := leaves.EarliestRenewal(), pki.RenewAt(leaves[controlplane.LeafScheduler].Cert); !got.Equal(want) {
		t.Errorf("EarliestRenewal = %s, want %s", got, want)
	}
}

func TestLoadAuthorities(t *testing.T) {
	a := newAuthorities(t)
	data, err := a.SecretData()
	if err != nil {
		t.Fatalf("SecretData: %v", err)
	}
	wantKeys := []string{
		controlplane.KeyCACert, controlplane.KeyCAKey, controlplane.KeyFrontProxyCACert, controlplane.KeyFrontProxyCAKey,
		controlplane.KeyEtcdCACert, controlplane.KeyEtcdCAKey, controlplane.KeySAKey, controlplane.KeySAPub,
		controlplane.KeyKubeletSignerCert, controlplane.KeyKubeletSignerKey,
	}
	if got := slices.Sorted(maps.Keys(data)); !sameSet(got, wantKeys) {
		t.Errorf("SecretData keys = %q, want %q", got, wantKeys)
	}

	t.Run("an earlier tenant without the kubelet signer gets one added, nothing replaced", func(t *testing.T) {
		old := maps.Clone(data)
		delete(old, controlplane.KeyKubeletSignerCert)
		delete(old, controlplane.KeyKubeletSignerKey)
		got, err := controlplane.LoadAuthorities(old, now)
		if err != nil {
			t.Fatalf("LoadAuthorities: %v", err)
		}
		if got.KubeletSigner != nil {
			t.Fatal("kubelet signer loaded from data without it")
		}
		added, err := got.Complete("alpha", now)
		if err != nil || !added || got.KubeletSigner == nil {
			t.Fatalf("Complete: added %v, err %v", added, err)
		}
		if !got.CA.Cert.Equal(a.CA.Cert) || !got.EtcdCA.Cert.Equal(a.EtcdCA.Cert) {
			t.Error("Complete replaced an existing authority")
		}
		if added, _ := got.Complete("alpha", now); added {
			t.Error("Complete added a second kubelet signer")
		}
	})

	t.Run("round trip", func(t *testing.T) {
		got, err := controlplane.LoadAuthorities(data, now.Add(24*time.Hour))
		if err != nil {
			t.Fatalf("LoadAuthorities: %v", err)
		}
		for name, pair := range map[string][2]*pki.KeyPair{
			"CA": {a.CA, got.CA}, "front-proxy CA": {a.FrontProxyCA, got.FrontProxyCA}, "etcd CA": {a.EtcdCA, got.EtcdCA},
		} {
			if !pair[0].Cert.Equal(pair[1].Cert) {
				t.Errorf("%s certificate differs after the round trip", name)
			}
			if err := pair[1].CheckCA(now); err != nil {
				t.Errorf("%s after the round trip: %v", name, err)
			}
		}
		again, err := got.SecretData()
		if err != nil {
			t.Fatalf("SecretData: %v", err)
		}
		if !equalData(again, data) {
			t.Error("SecretData of the loaded authorities differs from the original")
		}
	})

	t.Run("SecretData is deterministic", func(t *testing.T) {
		again, err := a.SecretData()
		if err != nil {
			t.Fatalf("SecretData: %v", err)
		}
		if !equalData(again, data) {
			t.Error("two calls of SecretData differ")
		}
	})

	t.Run("authorities are distinct", func(t *testing.T) {
		certs := []string{string(data[controlplane.KeyCACert]), string(data[controlplane.KeyFrontProxyCACert]), string(data[controlplane.KeyEtcdCACert])}
		if len(duplicates(certs)) > 0 {
			t.Error("two authorities share a certificate")
		}
	})

	other, err := newAuthorities(t).SecretData()
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range wantKeys {
		if key == controlplane.KeySAPub {
			continue // read from sa.key, never loaded
		}
		if key == controlplane.KeyKubeletSignerCert {
			continue // a missing kubelet signer is added, not an error (see above)
		}
		for _, c := range []struct {
			name  string
			value []byte
		}{{"missing", nil}, {"garbage", []byte("garbage")}} {
			t.Run(c.name+" "+key, func(t *testing.T) {
				broken := maps.Clone(data)
				if c.value == nil {
					delete(broken, key)
				} else {
					broken[key] = c.value
				}
				_, err := controlplane.LoadAuthorities(broken, now)
				if err == nil || !strings.HasPrefix(err.Error(), key+":") {
					t.Errorf("LoadAuthorities with %s %s: %v, want an error naming %s", c.name, key, err, key)
				}
			})
		}
	}
	t.Run("key of another CA", func(t *testing.T) {
		broken := maps.Clone(data)
		broken[controlplane.KeyEtcdCAKey] = other[controlplane.KeyEtcdCAKey]
		if _, err := controlplane.LoadAuthorities(broken, now); err == nil || !strings.Contains(err.Error(), "etcd-ca") {
			t.Errorf("LoadAuthorities with a mismatched etcd CA key: %v, want an error naming etcd-ca", err)
		}
	})
	t.Run("expired", func(t *testing.T) {
		if _, err := controlplane.LoadAuthorities(data, now.Add(pki.CAValidity+time.Hour)); err == nil {
			t.Error("LoadAuthorities of expired CAs succeeded")
		}
	})
	t.Run("leaf instead of CA", func(t *testing.T) {
		leaf, err := a.CA.Issue(pki.CertSpec{CommonName: "x", Usage: pki.UsageClient}, now)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := leaf.KeyPEM()
		broken := maps.Clone(data)
		broken[controlplane.KeyFrontProxyCACert], broken[controlplane.KeyFrontProxyCAKey] = leaf.CertPEM(), key
		if _, err := controlplane.LoadAuthorities(broken, now); err == nil || !strings.Contains(err.Error(), controlplane.KeyFrontProxyCACert) {
			t.Errorf("LoadAuthorities with a leaf as front-proxy CA: %v, want an error naming %s", err, controlplane.KeyFrontProxyCACert)
		}
	})
}

func leafNames(l []controlplane.Leaf) []string {
	out := make([]string, len(l))
	for i, n := range l {
		out[i] = string(n)
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func duplicates(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if seen[s] {
			out = append(out, s)
		}
		seen[s] = true
	}
	return out
}

func equalData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

func TestNextServiceCIDR(t *testing.T) {
	used := map[string]bool{}
	for _, want := range []string{"10.254.0.0/24", "10.254.1.0/24", "10.254.2.0/24"} {
		got, err := controlplane.NextServiceCIDR("10.254.0.0/16", 24, used)
		if err != nil || got != want {
			t.Fatalf("got %q, %v; want %s", got, err, want)
		}
		used[got] = true
	}
	delete(used, "10.254.1.0/24")
	if got, _ := controlplane.NextServiceCIDR("10.254.0.0/16", 24, used); got != "10.254.1.0/24" {
		t.Errorf("a freed slice is reused first: got %s", got)
	}
	if got, _ := controlplane.NextServiceCIDR("fd00:10::/108", 116, nil); got != "fd00:10::/116" {
		t.Errorf("IPv6: got %s", got)
	}
	full := map[string]bool{"10.254.0.0/25": true, "10.254.0.128/25": true}
	for _, tc := range []struct {
		pool   string
		prefix int
		used   map[string]bool
		errHas string
	}{
		{"10.254.0.0/24", 25, full, "exhausted"},
		{"10.254.0.0/16", 12, nil, "must be between /20"},
		{"10.254.0.0/24", 20, nil, "no shorter than the pool's /24"},
		{"10.0.0.0/8", 16, nil, "16 to 4096 addresses"},
		{"10.254.0.0/16", 30, nil, "16 to 4096 addresses"},
		{"not-a-cidr", 24, nil, "pool"},
	} {
		if _, err := controlplane.NextServiceCIDR(tc.pool, tc.prefix, tc.used); err == nil || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s /%d: error %v, want one containing %q", tc.pool, tc.prefix, err, tc.errHas)
		}
	}
}
