package clustertree

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/kubenest-io/kubenest/pkg/naming"
)

const (
	fieldManager = "kubenest-clustertree"
	// annotationRefreshAfter on a token Secret says when its tokens are renewed: at four fifths
	// of their life, as the kubelet does.
	annotationRefreshAfter = "kubenest.io/refresh-after"
	// defaultTokenSeconds is a projected token's life when the pod does not say.
	defaultTokenSeconds = 3600
)

// syncRefs copies into the host what a tenant pod refers to: its ConfigMaps and Secrets, and a
// Secret with tenant service-account tokens requested for it. One the tenant does not have
// (yet) is skipped: the host pod is made all the same, and the host's kubelet waits for it as a
// kubelet does (CreateContainerConfigError, a volume not mounted), until the tenant makes it
// and its copy follows (copies.go). They are read from the tenant: the caches of the tenant's
// ConfigMaps and Secrets hold their metadata only (statusOnlyClient).
func (p *provider) syncRefs(ctx context.Context, pod *corev1.Pod, hostPod string, refs Refs) error {
	for _, name := range refs.ConfigMaps {
		cm, err := p.tenant.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("tenant ConfigMap %s/%s: %w", pod.Namespace, name, err)
		}
		if err := p.upsertConfigMap(ctx, cm); err != nil {
			return err
		}
	}
	for _, name := range refs.Secrets {
		s, err := p.tenant.CoreV1().Secrets(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("tenant Secret %s/%s: %w", pod.Namespace, name, err)
		}
		if err := p.upsertSecret(ctx, p.copyMeta(s.ObjectMeta), s.Type, s.Data); err != nil {
			return err
		}
	}
	if len(refs.TokenSources) > 0 {
		return p.refreshTokens(ctx, pod, TokenSecretName(hostPod), refs.TokenSources)
	}
	return nil
}

// copyMeta is the metadata of the host copy of a tenant ConfigMap or Secret.
func (p *provider) copyMeta(tenant metav1.ObjectMeta) metav1.ObjectMeta {
	m := p.tr.Object(tenant)
	m.Annotations[AnnotationTenantResourceVersion] = tenant.ResourceVersion
	return m
}

func (p *provider) upsertConfigMap(ctx context.Context, tenant *corev1.ConfigMap) error {
	want := &corev1.ConfigMap{ObjectMeta: p.copyMeta(tenant.ObjectMeta), Data: tenant.Data, BinaryData: tenant.BinaryData}
	want.OwnerReferences = []metav1.OwnerReference{p.owner}
	size := dataBytes(want.Data) + dataBytes(want.BinaryData)
	want.Annotations[annotationCopyBytes] = strconv.FormatInt(size, 10)
	client := p.host.CoreV1().ConfigMaps(p.tr.HostNamespace)
	current, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		undo, err := p.copies.reserveCopy(kindConfigMap, &want.ObjectMeta, size)
		if err != nil {
			return err
		}
		_, err = client.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			undo()
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := sameOrigin(&current.ObjectMeta, &want.ObjectMeta); err != nil {
		return err
	}
	if maps.Equal(current.Data, want.Data) && mapsEqualBytes(current.BinaryData, want.BinaryData) && maps.Equal(current.Annotations, want.Annotations) {
		return nil
	}
	undo, err := p.copies.reserveCopy(kindConfigMap, &want.ObjectMeta, size)
	if err != nil {
		return err
	}
	current.Data, current.BinaryData, current.Annotations = want.Data, want.BinaryData, want.Annotations
	if _, err = client.Update(ctx, current, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		undo()
	}
	return err
}

func (p *provider) upsertSecret(ctx context.Context, meta metav1.ObjectMeta, typ corev1.SecretType, data map[string][]byte) error {
	meta.OwnerReferences = []metav1.OwnerReference{p.owner}
	want := &corev1.Secret{ObjectMeta: meta, Type: typ, Data: data}
	if typ == corev1.SecretTypeServiceAccountToken {
		// The host would fill it with a host token: the copy is opaque.
		want.Type = corev1.SecretTypeOpaque
	}
	size := dataBytes(want.Data)
	want.Annotations[annotationCopyBytes] = strconv.FormatInt(size, 10)
	client := p.host.CoreV1().Secrets(p.tr.HostNamespace)
	current, err := client.Get(ctx, want.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		undo, err := p.copies.reserveCopy(kindSecret, &want.ObjectMeta, size)
		if err != nil {
			return err
		}
		_, err = client.Create(ctx, want, metav1.CreateOptions{FieldManager: fieldManager})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		if err != nil {
			undo()
		}
		return err
	}
	if err != nil {
		return err
	}
	if err := sameOrigin(&current.ObjectMeta, &want.ObjectMeta); err != nil {
		return err
	}
	if mapsEqualBytes(current.Data, want.Data) && maps.Equal(current.Annotations, want.Annotations) {
		return nil
	}
	undo, err := p.copies.reserveCopy(kindSecret, &want.ObjectMeta, size)
	if err != nil {
		return err
	}
	current.Data, current.Annotations = want.Data, want.Annotations
	if _, err = client.Update(ctx, current, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		undo()
	}
	return err
}

// sameOrigin refuses to overwrite a host object that is not clustertree's copy of the same
// tenant object, of the same VirtualCluster.
func sameOrigin(current, want *metav1.ObjectMeta) error {
	if current.Labels[LabelOrigin] != OriginClusterTree || current.Labels[naming.LabelVirtualCluster] != want.Labels[naming.LabelVirtualCluster] ||
		current.Annotations[AnnotationTenantName] != want.Annotations[AnnotationTenantName] ||
		current.Annotations[AnnotationTenantNamespace] != want.Annotations[AnnotationTenantNamespace] {
		return fmt.Errorf("host object %s/%s exists and is not the copy of tenant object %s/%s; not overwriting it",
			current.Namespace, current.Name, want.Annotations[AnnotationTenantNamespace], want.Annotations[AnnotationTenantName])
	}
	return nil
}

// refreshTokens requests from the tenant a token per projected service-account token source,
// bound to the tenant pod, and stores them in the host pod's token Secret, secretName (the name
// its host pod refers to: TokenSecretName, or an earlier release's for a pod it made).
func (p *provider) refreshTokens(ctx context.Context, pod *corev1.Pod, secretName string, sources []corev1.ServiceAccountTokenProjection) error {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	data := map[string][]byte{}
	var refreshAfter time.Time
	now := time.Now()
	for i, src := range sources {
		seconds := int64(defaultTokenSeconds)
		if src.ExpirationSeconds != nil {
			seconds = *src.ExpirationSeconds
		}
		req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &seconds,
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}
		if src.Audience != "" {
			req.Spec.Audiences = []string{src.Audience}
		}
		tr, err := p.tenant.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("requesting a token for service account %s/%s: %w", pod.Namespace, sa, err)
		}
		data[TokenKey(i)] = []byte(tr.Status.Token)
		life := tr.Status.ExpirationTimestamp.Sub(now)
		if at := now.Add(life * 4 / 5); refreshAfter.IsZero() || at.Before(refreshAfter) {
			refreshAfter = at
		}
	}
	meta := metav1.ObjectMeta{
		Name:      secretName,
		Namespace: p.tr.HostNamespace,
		Labels:    HostSelector(p.tr.VirtualCluster),
		Annotations: map[string]string{
			AnnotationTenantName:      pod.Name,
			AnnotationTenantNamespace: pod.Namespace,
			AnnotationTenantUID:       string(pod.UID),
			annotationRefreshAfter:    refreshAfter.UTC().Format(time.RFC3339),
		},
	}
	return p.upsertSecret(ctx, meta, corev1.SecretTypeOpaque, data)
}

// maintain keeps the host copies right, every period until ctx ends: ConfigMaps and Secrets
// follow the tenant's changes (as they happen too: copies.go), tokens are renewed, and copies
// no host pod refers to go.
func (p *provider) maintain(ctx context.Context, period time.Duration, hostConfigMaps, hostSecrets func() ([]metav1.Object, error)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if err := p.maintainOnce(ctx, hostConfigMaps, hostSecrets); err != nil && ctx.Err() == nil {
			p.log.Error(err, "keeping host copies of tenant objects in sync")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *provider) maintainOnce(ctx context.Context, hostConfigMaps, hostSecrets func() ([]metav1.Object, error)) error {
	pods, err := p.hostPods.Pods(p.tr.HostNamespace).List(labels.SelectorFromSet(HostSelector(p.tr.VirtualCluster)))
	if err != nil {
		return err
	}
	usedCM, usedSecret := map[string]bool{}, map[string]bool{}
	for _, pod := range pods {
		referencedBy(pod, usedCM, usedSecret)
	}
	var errs []error
	cms, err := hostConfigMaps()
	if err != nil {
		return err
	}
	for _, o := range cms {
		errs = append(errs, p.maintainConfigMap(ctx, o, usedCM[o.GetName()]))
	}
	secrets, err := hostSecrets()
	if err != nil {
		return err
	}
	for _, o := range secrets {
		errs = append(errs, p.maintainSecret(ctx, o, usedSecret[o.GetName()]))
	}
	return errors.Join(errs...)
}

func (p *provider) maintainConfigMap(ctx context.Context, o metav1.Object, used bool) error {
	if !used {
		return p.collect(ctx, o, "ConfigMap", func() error {
			return p.host.CoreV1().ConfigMaps(p.tr.HostNamespace).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		})
	}
	ann := o.GetAnnotations()
	ns, name := ann[AnnotationTenantNamespace], ann[AnnotationTenantName]
	m, err := p.tenantConfigMaps.ConfigMaps(ns).Get(name)
	if err == nil && m.ResourceVersion == ann[AnnotationTenantResourceVersion] {
		return nil // the copy is of the tenant's object as it is
	}
	if err == nil {
		var cm *corev1.ConfigMap
		if cm, err = p.tenant.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			return p.upsertConfigMap(ctx, cm)
		}
	}
	if apierrors.IsNotFound(err) {
		// Gone in the tenant: gone in the host, where the kubelet does what it does with a
		// deleted ConfigMap (copies.go).
		return p.deleteCopy(ctx, tenantRef{kind: kindConfigMap, namespace: ns, name: name}, o.GetName())
	}
	return err
}

func (p *provider) maintainSecret(ctx context.Context, o metav1.Object, used bool) error {
	if !used {
		return p.collect(ctx, o, "Secret", func() error {
			return p.host.CoreV1().Secrets(p.tr.HostNamespace).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		})
	}
	ann := o.GetAnnotations()
	ns, name := ann[AnnotationTenantNamespace], ann[AnnotationTenantName]
	if refresh, ok := ann[annotationRefreshAfter]; ok {
		at, err := time.Parse(time.RFC3339, refresh)
		if err == nil && time.Now().Before(at) {
			return nil
		}
		pod, err := p.tenantPods.Pods(ns).Get(name)
		if err != nil || string(pod.UID) != ann[AnnotationTenantUID] {
			return nil
		}
		_, refs, err := p.tr.Pod(pod, nil)
		if err != nil {
			return nil
		}
		p.log.V(1).Info("renewing service-account tokens", "pod", klog.KObj(pod))
		return p.refreshTokens(ctx, pod, o.GetName(), refs.TokenSources)
	}
	m, err := p.tenantSecrets.Secrets(ns).Get(name)
	if err == nil && m.ResourceVersion == ann[AnnotationTenantResourceVersion] {
		return nil
	}
	if err == nil {
		var s *corev1.Secret
		if s, err = p.tenant.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			return p.upsertSecret(ctx, p.copyMeta(s.ObjectMeta), s.Type, s.Data)
		}
	}
	if apierrors.IsNotFound(err) {
		return p.deleteCopy(ctx, tenantRef{kind: kindSecret, namespace: ns, name: name}, o.GetName())
	}
	return err
}

// collect deletes a host copy no host pod refers to, once it is old enough not to belong to a
// pod being created.
func (p *provider) collect(ctx context.Context, o metav1.Object, kind string, del func() error) error {
	if time.Since(o.GetCreationTimestamp().Time) < p.unreferencedGrace {
		return nil
	}
	if err := del(); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting unused host %s %s: %w", kind, o.GetName(), err)
	}
	p.copies.release(kind, o.GetName())
	p.log.V(1).Info("deleted a host copy no pod uses", "kind", kind, "name", o.GetName())
	return nil
}

// referencedBy records the ConfigMaps and Secrets a host pod refers to.
func referencedBy(pod *corev1.Pod, cms, secrets map[string]bool) {
	for _, v := range pod.Spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			cms[v.ConfigMap.Name] = true
		case v.Secret != nil:
			secrets[v.Secret.SecretName] = true
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				if s.ConfigMap != nil {
					cms[s.ConfigMap.Name] = true
				}
				if s.Secret != nil {
					secrets[s.Secret.Name] = true
				}
			}
		}
	}
	for _, s := range pod.Spec.ImagePullSecrets {
		secrets[s.Name] = true
	}
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				cms[e.ValueFrom.ConfigMapKeyRef.Name] = true
			}
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				secrets[e.ValueFrom.SecretKeyRef.Name] = true
			}
		}
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				cms[e.ConfigMapRef.Name] = true
			}
			if e.SecretRef != nil {
				secrets[e.SecretRef.Name] = true
			}
		}
	}
}

func mapsEqualBytes(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
