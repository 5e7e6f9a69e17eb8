package virtualcluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// tenantPKI is a tenant's certificate material after a pass: authorities, leaves, and the
// Secrets the pods mount.
type tenantPKI struct {
	authorities        *controlplane.Authorities
	leaves             controlplane.Leaves
	etcdSecret         *corev1.Secret
	controlPlaneSecret *corev1.Secret
	kubeletSigner      *corev1.Secret
	// leafValidity is how long this tenant's leaf certificates are valid (zero: the default).
	leafValidity time.Duration
	// rotationRequest is the forced rotation the leaves were issued for, if any.
	rotationRequest string
}

// reconcilePKI loads or creates the tenant's certificate authorities, reuses every leaf
// certificate that still serves and issues the others, and applies the Secrets the pods mount.
// It returns nil, nil when the CA Secret is unusable: that is reported, never repaired.
func (r *Reconciler) reconcilePKI(ctx context.Context, vc *v1alpha1.VirtualCluster, exp controlplane.Exposure, conds conditions) (*tenantPKI, error) {
	log := ctrl.LoggerFrom(ctx)

	settings, err := r.settingsFor(vc)
	if err != nil {
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "InvalidAnnotation", "Reconcile", "%v; using the default validity", err)
	}
	specs, err := controlplane.LeafSpecs(vc, settings, exp)
	if err != nil {
		return nil, err
	}
	auth, caProblem, err := r.authorities(ctx, vc, specs, conds)
	if err != nil || auth == nil {
		return nil, err
	}
	status := vc.Status.Certificates
	if status == nil {
		status = &v1alpha1.CertificatesStatus{}
	}

	// The leaves are read from the cache. When that read asks for a renewal, the Secrets are
	// read again live, and a newer live Secret decides: a stale cache would reissue
	// certificates that exist and roll the tenant's pods for nothing. A pass that renews
	// nothing reads no leaf Secret live.
	// A rotation request keeps no existing leaf, and reads none.
	rotation := vc.Annotations[v1alpha1.AnnotationRotateCertificates]
	rotate := rotation != "" && rotation != status.RotationRequest
	var existing map[controlplane.Leaf]controlplane.PEMPair
	var version string
	if rotate {
		log.Info("rotating every leaf certificate on request", "annotation", v1alpha1.AnnotationRotateCertificates, "value", rotation)
	} else if existing, version, err = r.existingLeaves(ctx, vc, r.Client); err != nil {
		return nil, err
	}
	leaves, renewed, err := controlplane.EnsureLeaves(auth, specs, existing, conds.Now)
	if err != nil {
		return nil, err
	}
	if len(renewed) > 0 && !rotate {
		live, liveVersion, err := r.existingLeaves(ctx, vc, r.APIReader)
		if err != nil {
			return nil, err
		}
		if liveVersion != version {
			if leaves, renewed, err = controlplane.EnsureLeaves(auth, specs, live, conds.Now); err != nil {
				return nil, err
			}
		}
	}
	if len(renewed) > 0 {
		var why []string
		for _, leaf := range slices.Sorted(maps.Keys(renewed)) {
			why = append(why, fmt.Sprintf("%s (%s)", leaf, renewed[leaf]))
		}
		log.Info("issued certificates", "certificates", strings.Join(why, ", "))
		if len(renewed) < len(specs) {
			r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "CertificatesRenewed", "Reconcile", "renewed: %s", strings.Join(why, ", "))
		}
	}

	p := &tenantPKI{authorities: auth, leaves: leaves, leafValidity: settings.LeafValidity}
	if p.etcdSecret, err = controlplane.EtcdCertsSecret(vc, auth, leaves); err != nil {
		return nil, err
	}
	if p.controlPlaneSecret, err = controlplane.ControlPlaneCertsSecret(vc, auth, leaves); err != nil {
		return nil, err
	}
	if p.kubeletSigner, err = controlplane.KubeletSignerSecret(vc, auth); err != nil {
		return nil, err
	}
	for _, s := range []*corev1.Secret{p.etcdSecret, p.controlPlaneSecret, p.kubeletSigner} {
		if err := r.apply(ctx, vc, s); err != nil {
			conds.applyFailed(v1alpha1.ConditionCertificatesReady, "Secret "+s.Name)
			return nil, err
		}
	}
	status.RotationRequest = rotation
	status.CARotation = auth.CARotation()
	status.Items = certificateItems(auth, leaves)
	vc.Status.Certificates = status
	p.rotationRequest = rotation
	recordCertificates(vc, status.Items)
	conds.certificatesIssued(leaves, caProblem)
	return p, nil
}

// certificateItems lists when each authority and leaf expires, and when leaves are renewed.
func certificateItems(a *controlplane.Authorities, leaves controlplane.Leaves) []v1alpha1.CertificateExpiry {
	var items []v1alpha1.CertificateExpiry
	for name, c := range map[string]*x509.Certificate{
		"ca": a.CA.Cert, "front-proxy-ca": a.FrontProxyCA.Cert, "etcd-ca": a.EtcdCA.Cert, "kubelet-signer": a.KubeletSigner.Cert,
	} {
		items = append(items, v1alpha1.CertificateExpiry{Name: name, NotAfter: metav1.NewTime(c.NotAfter)})
	}
	if a.NextCA != nil {
		items = append(items, v1alpha1.CertificateExpiry{Name: "ca-next", NotAfter: metav1.NewTime(a.NextCA.Cert.NotAfter)})
	}
	for name, kp := range leaves {
		renew := metav1.NewTime(pki.RenewAt(kp.Cert))
		items = append(items, v1alpha1.CertificateExpiry{Name: string(name), NotAfter: metav1.NewTime(kp.Cert.NotAfter), RenewAfter: &renew})
	}
	slices.SortFunc(items, func(x, y v1alpha1.CertificateExpiry) int { return strings.Compare(x.Name, y.Name) })
	return items
}

// settingsFor is the operator's settings for this tenant (its Service range) with what its
// annotations may change: only the test-only leaf validity, and only when the operator allows
// test annotations.
func (r *Reconciler) settingsFor(vc *v1alpha1.VirtualCluster) (controlplane.Settings, error) {
	s := r.Settings.ForTenant(vc.Status.ServiceCIDR)
	v, ok := vc.Annotations[v1alpha1.AnnotationTestLeafValidity]
	if !ok || !r.AllowTestAnnotations {
		return s, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Minute {
		return s, fmt.Errorf("annotation %s=%q: want a duration of at least 1m, such as 2m", v1alpha1.AnnotationTestLeafValidity, v)
	}
	s.LeafValidity = d
	return s, nil
}

// authorities loads the tenant's certificate authorities, creating them on first use, and
// takes the step of a CA rotation the kubenest.io/ca-rotation annotation asks for; a step
// that cannot be taken is returned as problem. An existing but unusable CA Secret is reported
// and left alone (nil): replacing a CA would cut off every client the tenant has.
//
// With a cert-manager issuer (spec.pki), the cluster CA is the one cert-manager issued: nil
// until it is there, then copied into the CA Secret, and again whenever cert-manager renews
// it. Its rotation is cert-manager's, so the CA rotation annotation is refused.
func (r *Reconciler) authorities(ctx context.Context, vc *v1alpha1.VirtualCluster, specs map[controlplane.Leaf]controlplane.LeafSpec, conds conditions) (auth *controlplane.Authorities, problem string, err error) {
	log := ctrl.LoggerFrom(ctx)
	var issued *pki.KeyPair
	if vc.Spec.PKI != nil {
		if issued, err = r.issuedCA(ctx, vc, specs, conds); err != nil || issued == nil {
			return nil, "", err
		}
	}
	name := naming.For(vc.Name).CASecret()
	s := &corev1.Secret{}
	err = r.APIReader.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace(vc), Name: name}, s)
	if apierrors.IsNotFound(err) {
		return r.createAuthorities(ctx, vc, issued, conds)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading CA Secret: %w", err)
	}
	auth, lerr := controlplane.LoadAuthorities(s.Data, conds.Now)
	if lerr != nil {
		log.Info("CA Secret is unusable; not replacing it", "secret", name, "problem", lerr.Error())
		conds.caInvalid(lerr.Error())
		return nil, "", nil
	}
	// A tenant made before the kubelet signer existed gets it, keeping everything else.
	added, err := auth.Complete(vc.Name, conds.Now)
	if err != nil {
		return nil, "", err
	}
	step := vc.Annotations[v1alpha1.AnnotationCARotation]
	var stepped, adopted bool
	var serr error
	if issued != nil {
		var newKey bool
		if adopted, newKey = auth.AdoptIssuedCA(issued); newKey {
			log.Info("cert-manager issued a CA with a new key: every certificate is issued again", "certificate", naming.For(vc.Name).CACertificate())
			r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "NewCAKey", "Reconcile",
				"cert-manager issued the tenant's CA with a new key; kubeconfigs fetched before no longer trust the apiserver")
		}
		if step != "" {
			serr = fmt.Errorf("%s: this tenant's CA comes from cert-manager (spec.pki.issuerRef) and follows its renewals; rotate it there", v1alpha1.AnnotationCARotation)
		}
	} else {
		stepped, serr = auth.StepCARotation(step, vc.Name, conds.Now)
	}
	if serr != nil {
		problem = serr.Error()
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "CARotationRefused", "Reconcile", "%s", problem)
	}
	if !added && !stepped && !adopted {
		return auth, problem, nil
	}
	data, err := auth.SecretData()
	if err != nil {
		return nil, "", err
	}
	// The update carries the Secret's resourceVersion, so it fails rather than overwrite.
	s.Data = data
	if err := r.Client.Update(ctx, s, fieldOwner); err != nil {
		return nil, "", fmt.Errorf("updating the CA Secret: %w", err)
	}
	if added {
		log.Info("added the kubelet signer to the tenant's authorities", "secret", name)
	}
	if adopted {
		log.Info("took the CA cert-manager issued", "notAfter", issued.Cert.NotAfter)
	}
	if stepped {
		log.Info("CA rotation step taken", "step", step, "now", auth.CARotation())
		r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "CARotation", "Reconcile", "CA rotation: %s done", step)
	}
	return auth, problem, nil
}

// createAuthorities makes a new tenant's authorities, with the cluster CA cert-manager issued
// when there is one.
func (r *Reconciler) createAuthorities(ctx context.Context, vc *v1alpha1.VirtualCluster, issued *pki.KeyPair, conds conditions) (*controlplane.Authorities, string, error) {
	auth, err := controlplane.NewAuthorities(vc.Name, conds.Now)
	if err != nil {
		return nil, "", err
	}
	if issued != nil {
		auth.AdoptIssuedCA(issued)
	}
	secret, err := controlplane.CASecret(vc, auth)
	if err != nil {
		return nil, "", err
	}
	// Create, not apply: if another pass created it meanwhile, this fails instead of
	// overwriting a CA that may already be in use.
	if err := r.Client.Create(ctx, secret, fieldOwner); err != nil {
		conds.applyFailed(v1alpha1.ConditionCertificatesReady, "CA Secret")
		return nil, "", fmt.Errorf("creating CA Secret: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("created the tenant's certificate authorities", "secret", secret.Name)
	return auth, "", nil
}

// existingLeaves are the tenant's leaf certificates as its Secrets hold them, read by reader,
// and the Secrets' resource versions.
func (r *Reconciler) existingLeaves(ctx context.Context, vc *v1alpha1.VirtualCluster, reader client.Reader) (map[controlplane.Leaf]controlplane.PEMPair, string, error) {
	names := naming.For(vc.Name)
	existing := map[controlplane.Leaf]controlplane.PEMPair{}
	var version string
	for _, name := range []string{names.EtcdCertsSecret(), names.ControlPlaneCertsSecret(), names.KubeconfigSecret()} {
		ns := controlplane.Namespace(vc)
		if name == names.KubeconfigSecret() {
			ns = vc.Namespace
		}
		s, err := secret(ctx, reader, ns, name)
		if err != nil {
			return nil, "", err
		}
		version += "/" + s.ResourceVersion
		if name != names.KubeconfigSecret() {
			maps.Copy(existing, controlplane.ExistingLeaves(s.Data))
		} else if admin, ok := controlplane.AdminFromKubeconfig(s.Data); ok {
			existing[controlplane.LeafAdmin] = admin
		}
	}
	return existing, version, nil
}

// secret reads a Secret with reader; a missing one reads as empty.
func secret(ctx context.Context, reader client.Reader, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return s, nil
}
