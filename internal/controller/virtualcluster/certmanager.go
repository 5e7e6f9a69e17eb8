package virtualcluster

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;create;update;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;clusterissuers,verbs=get

// issuedCA asks the cert-manager issuer in spec.pki for the tenant's cluster CA and returns it
// once issued. Until then it returns nil and says why in the CertificatesReady condition: an
// issuer the platform does not allow tenants, no cert-manager in the host, an issuer that does
// not exist or is not ready, or an issuance still under way. None of these is an error: the
// next pass looks again. The CA is constrained to the names of specs, the tenant's leaves.
func (r *Reconciler) issuedCA(ctx context.Context, vc *v1alpha1.VirtualCluster, specs map[controlplane.Leaf]controlplane.LeafSpec, conds conditions) (*pki.KeyPair, error) {
	ref := vc.Spec.PKI.IssuerRef
	if !r.AllowedIssuers.Allows(ref) {
		conds.caNotIssued(ReasonIssuerNotAllowed, fmt.Sprintf(
			"spec.pki.issuerRef: %s is not an issuer the platform lets tenants use (the operator's --cert-manager-issuers: %s); ask the platform team, or create the VirtualCluster without spec.pki",
			IssuerPattern{Kind: ref.Kind, Group: ref.Group, Name: ref.Name}, r.AllowedIssuers))
		return nil, nil
	}
	if san := r.SANDomains.Outside(vc, vc.Spec.ControlPlane.Exposure.ExtraSANs); san != "" {
		conds.caNotIssued(ReasonExtraSANNotAllowed, fmt.Sprintf(
			"spec.controlPlane.exposure.extraSANs: %s is not within the DNS domains the platform lets tenants of its issuers name (the operator's --cert-manager-san-domains: %s): a CA the platform's issuer signs may sign for every name in it; remove it, or ask the platform team",
			san, r.SANDomains))
		return nil, nil
	}
	if reason, problem, err := r.checkIssuer(ctx, controlplane.Namespace(vc), ref); err != nil || problem != "" {
		if problem != "" {
			conds.caNotIssued(reason, problem)
		}
		return nil, err
	}
	var more []string
	if r.SharedNodes != nil {
		more = append(more, r.SharedNodes.NodeName)
	}
	cert, err := controlplane.CACertificate(vc, controlplane.CANameConstraints(specs, more...))
	if err != nil {
		return nil, err
	}
	if err := ssa.Apply(ctx, r.Client, cert, FieldOwner); err != nil {
		if meta.IsNoMatchError(err) {
			conds.caNotIssued(ReasonCertManagerMissing, certManagerMissing)
			return nil, nil
		}
		conds.applyFailed(v1alpha1.ConditionCertificatesReady, "cert-manager Certificate "+cert.Name)
		return nil, err
	}
	ready := certificateCondition(cert, cmapi.CertificateConditionReady)
	if ready == nil || ready.Status != cmmeta.ConditionTrue {
		msg := fmt.Sprintf("waiting for cert-manager to issue the CA (Certificate %s)", cert.Name)
		if ready != nil && ready.Message != "" {
			msg += ": " + ready.Message
		}
		conds.caNotIssued(ReasonCAPending, msg)
		return nil, nil
	}
	s, err := secret(ctx, r.APIReader, controlplane.Namespace(vc), cert.Spec.SecretName)
	if err != nil {
		return nil, err
	}
	ca, err := controlplane.IssuedCA(s.Data, conds.Now)
	if err != nil {
		ctrl.LoggerFrom(ctx).Info("cert-manager's Secret does not hold a usable CA yet", "secret", cert.Spec.SecretName, "problem", err.Error())
		conds.caNotIssued(ReasonCAPending, fmt.Sprintf("cert-manager's Secret %s does not hold a usable CA: %v", cert.Spec.SecretName, err))
		return nil, nil
	}
	return ca, nil
}

const certManagerMissing = "spec.pki.issuerRef names a cert-manager issuer, but cert-manager is not installed in the host cluster (no cert-manager.io/v1 Certificate kind); install cert-manager"

// checkIssuer says what is wrong with a cert-manager.io issuer reference, as a condition
// reason and message: cert-manager missing, the issuer missing or not ready. External issuers
// (other groups) are not checked; their Certificate's status tells.
func (r *Reconciler) checkIssuer(ctx context.Context, ns string, ref v1alpha1.IssuerReference) (reason, problem string, err error) {
	if ref.Group != cmapi.SchemeGroupVersion.Group {
		return "", "", nil
	}
	var status *cmapi.IssuerStatus
	key := types.NamespacedName{Name: ref.Name}
	var obj client.Object
	switch ref.Kind {
	case cmapi.ClusterIssuerKind:
		ci := &cmapi.ClusterIssuer{}
		obj, status = ci, &ci.Status
	default:
		is := &cmapi.Issuer{}
		key.Namespace = ns
		obj, status = is, &is.Status
	}
	err = r.APIReader.Get(ctx, key, obj)
	switch {
	case meta.IsNoMatchError(err):
		return ReasonCertManagerMissing, certManagerMissing, nil
	case apierrors.IsNotFound(err):
		where := ""
		if key.Namespace != "" {
			where = " in namespace " + key.Namespace
		}
		return ReasonIssuerNotReady, fmt.Sprintf("spec.pki.issuerRef: %s %q not found%s", ref.Kind, ref.Name, where), nil
	case err != nil:
		return "", "", fmt.Errorf("reading %s %s: %w", ref.Kind, ref.Name, err)
	}
	for _, c := range status.Conditions {
		if c.Type == cmapi.IssuerConditionReady {
			if c.Status == cmmeta.ConditionTrue {
				return "", "", nil
			}
			return ReasonIssuerNotReady, fmt.Sprintf("spec.pki.issuerRef: %s %q is not ready: %s", ref.Kind, ref.Name, c.Message), nil
		}
	}
	return ReasonIssuerNotReady, fmt.Sprintf("spec.pki.issuerRef: %s %q is not ready yet", ref.Kind, ref.Name), nil
}

func certificateCondition(c *cmapi.Certificate, typ cmapi.CertificateConditionType) *cmapi.CertificateCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// deleteCACertificate removes the tenant's cert-manager Certificate before its issued Secret
// goes, so that cert-manager does not issue it again meanwhile.
func (r *Reconciler) deleteCACertificate(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	if vc.Spec.PKI == nil {
		return nil
	}
	cert := &cmapi.Certificate{}
	cert.Namespace, cert.Name = controlplane.Namespace(vc), naming.For(vc.Name).CACertificate()
	err := r.Client.Delete(ctx, cert)
	if err == nil || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return fmt.Errorf("deleting cert-manager Certificate %s: %w", cert.Name, err)
}

// IssuerPattern names cert-manager issuers tenants may use: Kind/name for cert-manager's own
// kinds (Issuer, ClusterIssuer), Kind.group/name for an external issuer's; name "*" for any of
// that kind. An Issuer is always the one in the VirtualCluster's own namespace.
type IssuerPattern struct {
	Kind, Group, Name string
}

func (p IssuerPattern) String() string {
	kind := p.Kind
	if p.Group != cmapi.SchemeGroupVersion.Group {
		kind += "." + p.Group
	}
	return kind + "/" + p.Name
}

// IssuerAllowList are the issuers the platform lets tenants use for their cluster CA. Empty,
// the default, allows none: an issuer hands a tenant an intermediate CA, whose certificates
// the tenant's admin holds, so the platform chooses which of its issuers may do that.
type IssuerAllowList []IssuerPattern

// ParseIssuerAllowList reads a comma-separated list of patterns, such as
// "ClusterIssuer/tenants-ca,Issuer/*".
func ParseIssuerAllowList(s string) (IssuerAllowList, error) {
	var out IssuerAllowList
	for _, item := range listItems(s) {
		kind, name, ok := strings.Cut(item, "/")
		if !ok || kind == "" || name == "" {
			return nil, fmt.Errorf("issuer %q: want Kind/name (ClusterIssuer/tenants-ca, Issuer/*) or Kind.group/name for an external issuer", item)
		}
		group := cmapi.SchemeGroupVersion.Group
		if k, g, external := strings.Cut(kind, "."); external {
			kind, group = k, g
		} else if kind != cmapi.IssuerKind && kind != cmapi.ClusterIssuerKind {
			return nil, fmt.Errorf("issuer %q: cert-manager's kinds are %s and %s; name an external issuer's kind with its group (Kind.group/name)", item, cmapi.IssuerKind, cmapi.ClusterIssuerKind)
		}
		out = append(out, IssuerPattern{Kind: kind, Group: group, Name: name})
	}
	return out, nil
}

// Allows says whether ref names an allowed issuer.
func (l IssuerAllowList) Allows(ref v1alpha1.IssuerReference) bool {
	for _, p := range l {
		if p.Kind == ref.Kind && p.Group == ref.Group && (p.Name == "*" || p.Name == ref.Name) {
			return true
		}
	}
	return false
}

func (l IssuerAllowList) String() string {
	if len(l) == 0 {
		return "none"
	}
	var s []string
	for _, p := range l {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// SANDomains are the DNS domains a tenant whose cluster CA a platform issuer signs may name in
// spec.controlPlane.exposure.extraSANs, each with its subdomains. Its CA is constrained to the
// names its certificates hold, extraSANs included, and signs under the platform's root: an
// extra SAN such as "com" or "bank.example" would make it a CA for all of those names, trusted
// wherever the root is. An entry may hold {name} and {namespace}, the VirtualCluster's, so that
// each tenant gets names of its own ("{name}.{namespace}.tenants.example.com"): an entry without
// them is shared, and each tenant's CA may sign for the names of the others under it.
type SANDomains []string

// ParseSANDomains reads a comma-separated list of domains, such as
// "{name}.{namespace}.tenants.example.com,{namespace}.example.com".
func ParseSANDomains(s string) (SANDomains, error) {
	var out SANDomains
	for _, item := range listItems(s) {
		sample := strings.NewReplacer("{name}", "n", "{namespace}", "ns").Replace(item)
		if errs := validation.IsDNS1123Subdomain(sample); len(errs) > 0 || strings.Count(sample, ".") < 1 {
			return nil, fmt.Errorf("domain %q: want a lowercase DNS domain of two labels or more, {name} and {namespace} allowed in it (tenants.example.com, {name}.{namespace}.tenants.example.com)", item)
		}
		out = append(out, item)
	}
	return out, nil
}

// Outside returns the first DNS name of sans (IP addresses are not constrained) that is not
// within any of the domains for vc, or "".
func (d SANDomains) Outside(vc *v1alpha1.VirtualCluster, sans []string) string {
	for _, san := range sans {
		if net.ParseIP(san) != nil {
			continue
		}
		name := strings.TrimPrefix(san, "*.")
		if !slices.ContainsFunc(d, func(domain string) bool {
			domain = strings.NewReplacer("{name}", vc.Name, "{namespace}", vc.Namespace).Replace(domain)
			return name == domain || strings.HasSuffix(name, "."+domain)
		}) {
			return san
		}
	}
	return ""
}

func (d SANDomains) String() string {
	if len(d) == 0 {
		return "none"
	}
	return strings.Join(d, ",")
}

// listItems are the items of a comma-separated list, trimmed, without empty ones.
func listItems(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
