package virtualcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// tenantPKI is a tenant's certificate material after a pass: authorities, leaves, and the
// Secrets the pods mount.
type tenantPKI struct {
	authorities        *controlplane.Authorities
	leaves             controlplane.Leaves
	etcdSecret         *corev1.Secret
	controlPlaneSecret *corev1.Secret
	kubeletSigner      *corev1.Secret
}

// reconcilePKI loads or creates the tenant's certificate authorities, reuses every leaf
// certificate that still serves and issues the others, and applies the Secrets the pods mount.
// It returns nil, nil when the CA Secret is unusable: that is reported, never repaired.
func (r *Reconciler) reconcilePKI(ctx context.Context, vc *v1alpha1.VirtualCluster, exp controlplane.Exposure, conds conditions) (*tenantPKI, error) {
	log := ctrl.LoggerFrom(ctx)
	names := naming.For(vc.Name)

	auth, err := r.authorities(ctx, vc, conds)
	if err != nil || auth == nil {
		return nil, err
	}

	// Secrets are read live, not from the cache: a stale read would reissue certificates that
	// exist and roll the tenant's pods for nothing.
	existing := map[controlplane.Leaf]controlplane.PEMPair{}
	for _, name := range []string{names.EtcdCertsSecret(), names.ControlPlaneCertsSecret()} {
		s, err := r.secret(ctx, vc.Namespace, name)
		if err != nil {
			return nil, err
		}
		maps.Copy(existing, controlplane.ExistingLeaves(s.Data))
	}
	kc, err := r.secret(ctx, vc.Namespace, names.KubeconfigSecret())
	if err != nil {
		return nil, err
	}
	if admin, ok := controlplane.AdminFromKubeconfig(kc.Data); ok {
		existing[controlplane.LeafAdmin] = admin
	}

	specs, err := controlplane.LeafSpecs(vc, r.Settings, exp)
	if err != nil {
		return nil, err
	}
	leaves, renewed, err := controlplane.EnsureLeaves(auth, specs, existing, conds.now)
	if err != nil {
		return nil, err
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

	p := &tenantPKI{authorities: auth, leaves: leaves}
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
		if err := ssa.Apply(ctx, r.Client, s, FieldOwner); err != nil {
			conds.applyFailed(v1alpha1.ConditionCertificatesReady, "Secret "+s.Name)
			return nil, err
		}
	}
	conds.certificatesIssued(leaves)
	return p, nil
}

// authorities loads the tenant's certificate authorities, creating them on first use. An
// existing but unusable CA Secret is reported and left alone (nil, nil): replacing a CA would
// cut off every client the tenant has.
func (r *Reconciler) authorities(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions) (*controlplane.Authorities, error) {
	name := naming.For(vc.Name).CASecret()
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: vc.Namespace, Name: name}, s)
	if err == nil {
		auth, lerr := controlplane.LoadAuthorities(s.Data, conds.now)
		if lerr != nil {
			ctrl.LoggerFrom(ctx).Info("CA Secret is unusable; not replacing it", "secret", name, "problem", lerr.Error())
			conds.caInvalid(lerr.Error())
			return nil, nil
		}
		added, err := auth.Complete(vc.Name, conds.now)
		if err != nil || !added {
			return auth, err
		}
		// A tenant made before the kubelet signer existed: add it, keeping everything else.
		// The update carries the Secret's resourceVersion, so it fails rather than overwrite.
		data, err := auth.SecretData()
		if err != nil {
			return nil, err
		}
		s.Data = data
		if err := r.Client.Update(ctx, s, fieldOwner); err != nil {
			return nil, fmt.Errorf("adding the kubelet signer to the CA Secret: %w", err)
		}
		ctrl.LoggerFrom(ctx).Info("added the kubelet signer to the tenant's authorities", "secret", name)
		return auth, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading CA Secret: %w", err)
	}
	auth, err := controlplane.NewAuthorities(vc.Name, conds.now)
	if err != nil {
		return nil, err
	}
	secret, err := controlplane.CASecret(vc, auth)
	if err != nil {
		return nil, err
	}
	// Create, not apply: if another pass created it meanwhile, this fails instead of
	// overwriting a CA that may already be in use.
	if err := r.Client.Create(ctx, secret, fieldOwner); err != nil {
		conds.applyFailed(v1alpha1.ConditionCertificatesReady, "CA Secret")
		return nil, fmt.Errorf("creating CA Secret: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("created the tenant's certificate authorities", "secret", name)
	return auth, nil
}

// secret reads a Secret live; a missing one reads as empty.
func (r *Reconciler) secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, s)
	if apierrors.IsNotFound(err) {
		return &corev1.Secret{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", name, err)
	}
	return s, nil
}
