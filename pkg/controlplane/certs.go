package controlplane

import (
	"crypto"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// Keys of the CA Secret. It holds the private keys of the tenant's certificate authorities and
// the service-account signing key, and is mounted by no pod.
const (
	KeyCACert            = "ca.crt"
	KeyCAKey             = "ca.key"
	KeyFrontProxyCACert  = "front-proxy-ca.crt"
	KeyFrontProxyCAKey   = "front-proxy-ca.key"
	KeyEtcdCACert        = "etcd-ca.crt"
	KeyEtcdCAKey         = "etcd-ca.key"
	KeySAKey             = "sa.key"
	KeySAPub             = "sa.pub"
	KeyKubeletSignerCert = "kubelet-signer.crt"
	KeyKubeletSignerKey  = "kubelet-signer.key"
	// During a CA rotation: the new CA, trusted but not yet signing ...
	KeyCANextCert = "ca-next.crt"
	KeyCANextKey  = "ca-next.key"
	// ... and, once it signs, the old CA's certificate, still trusted.
	KeyCAPreviousCert = "ca-previous.crt"
	// KeyClientCABundle is what the apiserver trusts for client certificates: the cluster CA
	// and the kubelet signer.
	KeyClientCABundle = "client-ca.crt"
)

// Authorities are a tenant's certificate authorities and its service-account signing key.
type Authorities struct {
	// CA signs the apiserver's serving certificate and every client of the apiserver.
	CA *pki.KeyPair
	// FrontProxyCA signs the client certificate the apiserver uses towards aggregated APIs.
	FrontProxyCA *pki.KeyPair
	// EtcdCA signs etcd's serving and peer certificates and the apiserver's etcd client.
	EtcdCA *pki.KeyPair
	// KubeletSigner signs, in the tenant's controller-manager, the client certificates of the
	// kubelets of host nodes lent to the tenant (TLS bootstrap). It signs nothing else: the
	// controller-manager holds its key, never the cluster CA's.
	KubeletSigner *pki.KeyPair
	// ServiceAccountKey signs service-account tokens.
	ServiceAccountKey crypto.Signer

	// NextCA, during a CA rotation's first step, is the new cluster CA: trusted everywhere
	// next to CA, signing nothing yet.
	NextCA *pki.KeyPair
	// PreviousCA, during a CA rotation's second step, is the old cluster CA: still trusted,
	// signing nothing any more.
	PreviousCA *x509.Certificate
}

// CABundle is what clients of the tenant's apiserver and the apiserver itself trust: the
// cluster CA and, during a rotation, the other one.
func (a *Authorities) CABundle() []byte {
	out := slices.Clone(a.CA.CertPEM())
	if a.NextCA != nil {
		out = append(out, a.NextCA.CertPEM()...)
	}
	if a.PreviousCA != nil {
		out = append(out, pki.EncodeCert(a.PreviousCA)...)
	}
	return out
}

// ClientCABundle is what the apiserver trusts for client certificates (its --client-ca-file):
// the CA bundle and the kubelet signer, whose certificates the kubelets of lent nodes use.
func (a *Authorities) ClientCABundle() []byte {
	return append(a.CABundle(), a.KubeletSigner.CertPEM()...)
}

// CARotation is the step of a cluster CA rotation the authorities are at.
func (a *Authorities) CARotation() v1alpha1.CARotationPhase {
	switch {
	case a.NextCA != nil:
		return v1alpha1.CARotationTrusting
	case a.PreviousCA != nil:
		return v1alpha1.CARotationSwitched
	}
	return ""
}

// Steps of a CA rotation, as the kubenest.io/ca-rotation annotation names them.
const (
	CARotationStart  = "start"
	CARotationSwitch = "switch"
	CARotationFinish = "finish"
)

// StepCARotation takes the cluster CA rotation to step (see v1alpha1.AnnotationCARotation)
// and says whether anything changed. A step already taken changes nothing; a step out of
// order is an error that says which step comes first.
func (a *Authorities) StepCARotation(step, vcName string, now time.Time) (bool, error) {
	at := a.CARotation()
	switch step {
	case "":
		return false, nil
	case CARotationStart:
		switch at {
		case v1alpha1.CARotationTrusting:
			return false, nil
		case v1alpha1.CARotationSwitched:
			return false, fmt.Errorf("%s=%s: the last rotation is not finished; set it to %s first", v1alpha1.AnnotationCARotation, step, CARotationFinish)
		}
		next, err := pki.NewCA(fmt.Sprintf("%s-ca-%d", vcName, now.Unix()), now)
		if err != nil {
			return false, err
		}
		a.NextCA = next
		return true, nil
	case CARotationSwitch:
		switch at {
		case v1alpha1.CARotationSwitched:
			return false, nil
		case "":
			return false, fmt.Errorf("%s=%s: no rotation is under way; set it to %s first", v1alpha1.AnnotationCARotation, step, CARotationStart)
		}
		a.PreviousCA, a.CA, a.NextCA = a.CA.Cert, a.NextCA, nil
		return true, nil
	case CARotationFinish:
		switch at {
		case "":
			return false, nil
		case v1alpha1.CARotationTrusting:
			return false, fmt.Errorf("%s=%s: the new CA does not sign yet; set it to %s first", v1alpha1.AnnotationCARotation, step, CARotationSwitch)
		}
		a.PreviousCA = nil
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: must be %s, %s or %s", v1alpha1.AnnotationCARotation, step, CARotationStart, CARotationSwitch, CARotationFinish)
}

// NewAuthorities creates the certificate authorities and signing key of a new tenant.
func NewAuthorities(vcName string, now time.Time) (*Authorities, error) {
	ca, err := pki.NewCA(vcName+"-ca", now)
	if err != nil {
		return nil, err
	}
	fp, err := pki.NewCA(vcName+"-front-proxy-ca", now)
	if err != nil {
		return nil, err
	}
	etcd, err := pki.NewCA(vcName+"-etcd-ca", now)
	if err != nil {
		return nil, err
	}
	sa, err := pki.NewSigningKey()
	if err != nil {
		return nil, err
	}
	a := &Authorities{CA: ca, FrontProxyCA: fp, EtcdCA: etcd, ServiceAccountKey: sa}
	if _, err := a.Complete(vcName, now); err != nil {
		return nil, err
	}
	return a, nil
}

// Complete creates the authorities a tenant made by an earlier version lacks (the kubelet
// signer), and says whether it did. Existing authorities are never replaced.
func (a *Authorities) Complete(vcName string, now time.Time) (bool, error) {
	if a.KubeletSigner != nil {
		return false, nil
	}
	signer, err := pki.NewCA(vcName+"-kubelet-signer", now)
	if err != nil {
		return false, err
	}
	a.KubeletSigner = signer
	return true, nil
}

// LoadAuthorities reads the authorities from the data of the CA Secret and checks they are
// usable at now.
func LoadAuthorities(data map[string][]byte, now time.Time) (*Authorities, error) {
	load := func(certKey, keyKey string) (*pki.KeyPair, error) {
		cert, err := pki.ParseCert(data[certKey])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certKey, err)
		}
		key, err := pki.ParseKey(data[keyKey])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyKey, err)
		}
		kp := &pki.KeyPair{Cert: cert, Key: key}
		if err := kp.CheckCA(now); err != nil {
			return nil, fmt.Errorf("%s: %w", certKey, err)
		}
		return kp, nil
	}
	var a Authorities
	var err error
	if a.CA, err = load(KeyCACert, KeyCAKey); err != nil {
		return nil, err
	}
	if a.FrontProxyCA, err = load(KeyFrontProxyCACert, KeyFrontProxyCAKey); err != nil {
		return nil, err
	}
	if a.EtcdCA, err = load(KeyEtcdCACert, KeyEtcdCAKey); err != nil {
		return nil, err
	}
	if a.ServiceAccountKey, err = pki.ParseKey(data[KeySAKey]); err != nil {
		return nil, fmt.Errorf("%s: %w", KeySAKey, err)
	}
	if _, ok := data[KeyCANextCert]; ok {
		if a.NextCA, err = load(KeyCANextCert, KeyCANextKey); err != nil {
			return nil, err
		}
	}
	if pemData, ok := data[KeyCAPreviousCert]; ok {
		if a.PreviousCA, err = pki.ParseCert(pemData); err != nil {
			return nil, fmt.Errorf("%s: %w", KeyCAPreviousCert, err)
		}
	}
	// Tenants made before the kubelet signer existed lack it: Complete adds it.
	if _, ok := data[KeyKubeletSignerCert]; ok {
		if a.KubeletSigner, err = load(KeyKubeletSignerCert, KeyKubeletSignerKey); err != nil {
			return nil, err
		}
	}
	return &a, nil
}

// SecretData is the content of the CA Secret.
func (a *Authorities) SecretData() (map[string][]byte, error) {
	data := map[string][]byte{}
	for _, e := range []struct {
		kp              *pki.KeyPair
		certKey, keyKey string
	}{
		{a.CA, KeyCACert, KeyCAKey},
		{a.FrontProxyCA, KeyFrontProxyCACert, KeyFrontProxyCAKey},
		{a.EtcdCA, KeyEtcdCACert, KeyEtcdCAKey},
		{a.KubeletSigner, KeyKubeletSignerCert, KeyKubeletSignerKey},
		{a.NextCA, KeyCANextCert, KeyCANextKey},
	} {
		if e.kp == nil {
			continue
		}
		key, err := e.kp.KeyPEM()
		if err != nil {
			return nil, err
		}
		data[e.certKey], data[e.keyKey] = e.kp.CertPEM(), key
	}
	saKey, err := pki.EncodeKey(a.ServiceAccountKey)
	if err != nil {
		return nil, err
	}
	saPub, err := pki.EncodePublicKey(a.ServiceAccountKey)
	if err != nil {
		return nil, err
	}
	data[KeySAKey], data[KeySAPub] = saKey, saPub
	if a.PreviousCA != nil {
		data[KeyCAPreviousCert] = pki.EncodeCert(a.PreviousCA)
	}
	return data, nil
}

// Leaf names a leaf certificate of a tenant. Its certificate and key are stored under
// "<leaf>.crt" and "<leaf>.key".
type Leaf string

// The leaf certificates of a tenant.
const (
	LeafAPIServer              Leaf = "apiserver"
	LeafAPIServerKubeletClient Leaf = "apiserver-kubelet-client"
	LeafAPIServerEtcdClient    Leaf = "apiserver-etcd-client"
	LeafFrontProxyClient       Leaf = "front-proxy-client"
	LeafControllerManager      Leaf = "controller-manager"
	LeafScheduler              Leaf = "scheduler"
	LeafAdmin                  Leaf = "admin"
	LeafEtcdServer             Leaf = "etcd-server"
	LeafEtcdPeer               Leaf = "etcd-peer"
	LeafDNS                    Leaf = "dns"
)

// CertFile and KeyFile are the Secret keys (and file names) of a leaf.
func (l Leaf) CertFile() string { return string(l) + ".crt" }
func (l Leaf) KeyFile() string  { return string(l) + ".key" }

// Issuer names which authority signs a leaf.
type Issuer int

const (
	IssuerCA Issuer = iota
	IssuerFrontProxyCA
	IssuerEtcdCA
)

func (a *Authorities) issuer(i Issuer) *pki.KeyPair {
	switch i {
	case IssuerFrontProxyCA:
		return a.FrontProxyCA
	case IssuerEtcdCA:
		return a.EtcdCA
	default:
		return a.CA
	}
}

// LeafSpec is a leaf certificate with the authority that signs it.
type LeafSpec struct {
	Issuer Issuer
	pki.CertSpec
}

// Users and groups the tenant's apiserver sees in client certificates.
const (
	AdminUser              = "kubenest-admin"
	MastersGroup           = "system:masters"
	ControllerManagerUser  = "system:kube-controller-manager"
	SchedulerUser          = "system:kube-scheduler"
	APIServerKubeletClient = "kube-apiserver-kubelet-client"
	FrontProxyClientUser   = "front-proxy-client"
	// ClusterTreeUser is the identity the operator's virtual node uses in the tenant.
	ClusterTreeUser = "kubenest-clustertree"
	// DNSUser is the identity of the tenant's CoreDNS.
	DNSUser = "kubenest-dns"
)

// ReservedUsers are the user names, besides the system: ones, that the tenant's RBAC and guard
// give rights to by name: only KubeNest's own components present them, with certificates of
// the cluster CA it signs for them. Anything else that signs with that CA (the portal's
// personal kubeconfigs) must never put one of them in a certificate.
var ReservedUsers = []string{AdminUser, APIServerKubeletClient, FrontProxyClientUser, ClusterTreeUser, DNSUser}

// Exposure is how the tenant's apiserver Service was published: its address inside the host and
// the endpoint users reach it at.
type Exposure struct {
	// ClusterIP of the apiserver Service in the host.
	ClusterIP string
	// Endpoint is the https URL users reach the apiserver at; empty while it is not known yet
	// (a LoadBalancer without an address, a NodePort without a node).
	Endpoint string
	// Address is the host part of Endpoint when it is an IP or name outside the host's
	// Service DNS: a node address or a load balancer's address.
	Address string
	// Waiting says why Endpoint is empty.
	Waiting string
}

// LeafSpecs returns every leaf certificate a tenant needs, given how its apiserver is exposed.
func LeafSpecs(vc *v1alpha1.VirtualCluster, s Settings, exp Exposure) (map[Leaf]LeafSpec, error) {
	kubeSvcIP, err := s.kubernetesServiceIP()
	if err != nil {
		return nil, err
	}
	names := naming.For(vc.Name)
	ns := Namespace(vc)

	apiDNS := []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
		"kubernetes.default.svc." + TenantClusterDomain}
	apiDNS = append(apiDNS, serviceDNSNames(names.APIServerService(), ns, s.HostClusterDomain)...)
	apiIPs := []net.IP{net.ParseIP("127.0.0.1"), kubeSvcIP}
	if ip := net.ParseIP(exp.ClusterIP); ip != nil {
		apiIPs = append(apiIPs, ip)
	}
	sans := append([]string{}, vc.Spec.ControlPlane.Exposure.ExtraSANs...)
	if exp.Address != "" {
		sans = append(sans, exp.Address)
	}
	for _, san := range sans {
		if ip := net.ParseIP(san); ip != nil {
			apiIPs = append(apiIPs, ip)
		} else {
			apiDNS = append(apiDNS, san)
		}
	}

	peer := names.EtcdPeerService()
	etcdDNS := append([]string{"localhost"}, serviceDNSNames(names.EtcdClientService(), ns, s.HostClusterDomain)...)
	peerDNS := []string{
		"*." + peer + "." + ns + ".svc",
		"*." + peer + "." + ns + ".svc." + s.HostClusterDomain,
	}
	etcdDNS = append(etcdDNS, peerDNS...)
	loopback := []net.IP{net.ParseIP("127.0.0.1")}

	leaf := func(issuer Issuer, cn string, orgs []string, usage pki.Usage, dns []string, ips []net.IP) LeafSpec {
		return LeafSpec{Issuer: issuer, CertSpec: pki.CertSpec{
			CommonName: cn, Organization: orgs, DNSNames: dedupe(dns), IPs: dedupeIPs(ips),
			Usage: usage, Validity: s.LeafValidity,
		}}
	}
	return map[Leaf]LeafSpec{
		LeafAPIServer:              leaf(IssuerCA, "kube-apiserver", nil, pki.UsageServer, apiDNS, apiIPs),
		LeafAPIServerKubeletClient: leaf(IssuerCA, APIServerKubeletClient, nil, pki.UsageClient, nil, nil),
		// The controller-manager's and the scheduler's certificates are also what they serve
		// their ports with (the liveness probe, metrics): without one, each generates a
		// self-signed RSA CA and certificate every time it starts, four RSA keys per start
		// of the controllers process, most of its start's CPU.
		LeafControllerManager:   leaf(IssuerCA, ControllerManagerUser, nil, pki.UsageClient|pki.UsageServer, []string{"localhost"}, loopback),
		LeafScheduler:           leaf(IssuerCA, SchedulerUser, nil, pki.UsageClient|pki.UsageServer, []string{"localhost"}, loopback),
		LeafDNS:                 leaf(IssuerCA, DNSUser, nil, pki.UsageClient, nil, nil),
		LeafAdmin:               leaf(IssuerCA, AdminUser, []string{MastersGroup}, pki.UsageClient, nil, nil),
		LeafFrontProxyClient:    leaf(IssuerFrontProxyCA, FrontProxyClientUser, nil, pki.UsageClient, nil, nil),
		LeafAPIServerEtcdClient: leaf(IssuerEtcdCA, "kube-apiserver-etcd-client", nil, pki.UsageClient, nil, nil),
		LeafEtcdServer:          leaf(IssuerEtcdCA, "etcd-server", nil, pki.UsageServer|pki.UsageClient, etcdDNS, loopback),
		LeafEtcdPeer:            leaf(IssuerEtcdCA, "etcd-peer", nil, pki.UsageServer|pki.UsageClient, peerDNS, nil),
	}, nil
}

// PEMPair is a certificate and key as stored in a Secret.
type PEMPair struct {
	Cert, Key []byte
}

// Leaves are a tenant's issued leaf certificates.
type Leaves map[Leaf]*pki.KeyPair

// EnsureLeaves returns a certificate for every spec: the existing one where it still serves
// (signed by the current authority, not due for renewal, covering every name), a newly issued
// one otherwise. renewed says, for each leaf that was issued, why.
func EnsureLeaves(a *Authorities, specs map[Leaf]LeafSpec, existing map[Leaf]PEMPair, now time.Time) (Leaves, map[Leaf]string, error) {
	leaves := Leaves{}
	renewed := map[Leaf]string{}
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		spec := specs[name]
		issuer := a.issuer(spec.Issuer)
		if old, ok := existing[name]; ok {
			kp, err := pki.ParseKeyPair(old.Cert, old.Key)
			if err == nil {
				err = kp.Check(spec.CertSpec, issuer.Cert, now)
			}
			if err == nil {
				leaves[name] = kp
				continue
			}
			renewed[name] = err.Error()
		} else {
			renewed[name] = "missing"
		}
		kp, err := issuer.Issue(spec.CertSpec, now)
		if err != nil {
			return nil, nil, fmt.Errorf("issuing %s certificate: %w", name, err)
		}
		leaves[name] = kp
	}
	return leaves, renewed, nil
}

// ExistingLeaves reads the leaf certificates stored in Secret data, keyed "<leaf>.crt" and
// "<leaf>.key".
func ExistingLeaves(data map[string][]byte) map[Leaf]PEMPair {
	out := map[Leaf]PEMPair{}
	for k, cert := range data {
		name, ok := strings.CutSuffix(k, ".crt")
		if !ok {
			continue
		}
		leaf := Leaf(name)
		if key, ok := data[leaf.KeyFile()]; ok {
			out[leaf] = PEMPair{Cert: cert, Key: key}
		}
	}
	return out
}

// EarliestExpiry returns the leaf that expires first and when.
func (l Leaves) EarliestExpiry() (Leaf, time.Time) {
	var first Leaf
	var at time.Time
	for _, name := range slices.Sorted(maps.Keys(l)) {
		if na := l[name].Cert.NotAfter; at.IsZero() || na.Before(at) {
			first, at = name, na
		}
	}
	return first, at
}

// EarliestRenewal returns when the first leaf is due for renewal.
func (l Leaves) EarliestRenewal() time.Time {
	var at time.Time
	for _, kp := range l {
		if r := pki.RenewAt(kp.Cert); at.IsZero() || r.Before(at) {
			at = r
		}
	}
	return at
}

func (l Leaves) put(data map[string][]byte, names ...Leaf) error {
	for _, name := range names {
		kp, ok := l[name]
		if !ok {
			return fmt.Errorf("no %s certificate", name)
		}
		key, err := kp.KeyPEM()
		if err != nil {
			return err
		}
		data[name.CertFile()], data[name.KeyFile()] = kp.CertPEM(), key
	}
	return nil
}

// serviceDNSNames are the names a Service is reached by inside the host cluster.
func serviceDNSNames(svc, ns, domain string) []string {
	return []string{svc, svc + "." + ns, svc + "." + ns + ".svc", svc + "." + ns + ".svc." + domain}
}

func dedupe(in []string) []string {
	out := []string{}
	for _, s := range in {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func dedupeIPs(in []net.IP) []net.IP {
	out := []net.IP{}
	for _, ip := range in {
		if !slices.ContainsFunc(out, ip.Equal) {
			out = append(out, ip)
		}
	}
	return out
}
