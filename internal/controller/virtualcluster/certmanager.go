package virtualcluster

import (
	"context"
	"fmt"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
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
// once issued. Until then it returns nil and says why in the CertificatesReady condition: no
// cert-manager in the host, an issuer that does not exist or is not ready, or an issuance
// still under way. None of these is an error: the next pass looks again.
func (r *Reconciler) issuedCA(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions) (*pki.KeyPair, error) {
	ref := vc.Spec.PKI.IssuerRef
	if reason, problem, err := r.checkIssuer(ctx, vc.Namespace, ref); err != nil || problem != "" {
		if problem != "" {
			conds.caNotIssued(reason, problem)
		}
		return nil, err
	}
	cert, err := controlplane.CACertificate(vc)
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
	s, err := r.secret(ctx, vc.Namespace, cert.Spec.SecretName)
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
	cert.Namespace, cert.Name = vc.Namespace, naming.For(vc.Name).CACertificate()
	err := r.Client.Delete(ctx, cert)
	if err == nil || apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		return nil
	}
	return fmt.Errorf("deleting cert-manager Certificate %s: %w", cert.Name, err)
}
