package virtualcluster_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/poolnode"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/iphold"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/internal/testtenant"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

const ns = "tenants"

// cpNS is the control-plane namespace of the VirtualClusters of ns: where the operator puts
// their control planes (etcd, apiserver, their certificates and keys).
var cpNS = naming.ControlPlaneNamespace(ns)

// operator runs the VirtualCluster reconciler against env until stop is called. Tenant
// apiservers are dialled through tenants: in-cluster Service address to where the test runs it.
type operator struct {
	env     *testenv.Env
	tenants *tenantRoutes
	cancel  context.CancelFunc
	done    chan struct{}
}

type tenantRoutes struct {
	m atomic.Pointer[map[string]string]
}

func (r *tenantRoutes) set(from, to string) {
	m := map[string]string{from: to}
	if old := r.m.Load(); old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	r.m.Store(&m)
}

func (r *tenantRoutes) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if m := r.m.Load(); m != nil {
		if to, ok := (*m)[addr]; ok {
			return (&net.Dialer{}).DialContext(ctx, network, to)
		}
	}
	return nil, fmt.Errorf("no tenant runs at %s in this test", addr)
}

func startOperator(t *testing.T, env *testenv.Env, routes *tenantRoutes, configure ...func(*virtualcluster.Reconciler)) *operator {
	t.Helper()
	mgr := env.Manager(t)
	settings := controlplane.DefaultSettings()
	settings.Image = "kubenest.io/kubenest:test"
	tenants := &tenantclient.Registry{Dial: routes.dial}
	r := &virtualcluster.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Settings:  settings,
		Recorder:  mgr.GetEventRecorder("kubenest-operator"),
		Tenants:   tenants,
		// The issuer the cert-manager tests make for tenants; any other is refused.
		AllowedIssuers: virtualcluster.IssuerAllowList{{Kind: "ClusterIssuer", Group: "cert-manager.io", Name: "platform-ca"}},
	}
	for _, f := range configure {
		f(r)
	}
	if err := r.SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	if err := (&poolnode.Reconciler{
		Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Kube: kubernetes.NewForConfigOrDie(env.Config),
		Namespace: "kubenest-system", ClusterDomain: "cluster.local",
		Tenants:  tenants,
		Recorder: mgr.GetEventRecorder("kubenest-poolnode"),
	}).SetupWithManager(mgr, controller.Options{SkipNameValidation: ptr.To(true)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{env: env, tenants: routes, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(op.done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	t.Cleanup(op.stop)
	return op
}

// startEnv starts a host apiserver for one test, with the tenants' namespace and the others
// named; ctx ends after timeout or with the test.
func startEnv(t *testing.T, opts testenv.Options, timeout time.Duration, namespaces ...string) (*testenv.Env, context.Context) {
	t.Helper()
	env := testenv.Start(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	for _, name := range append([]string{ns}, namespaces...) {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	return env, ctx
}

func (o *operator) stop() {
	o.cancel()
	<-o.done
}

// TestLifecycle follows one VirtualCluster from creation to Ready (with a real tenant control
// plane run from the Secrets the operator wrote) and to deletion.
func TestLifecycle(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{Controllers: []string{"garbagecollector"}}, 4*time.Minute)
	c := env.Client
	routes := &tenantRoutes{}
	parent := t
	op := startOperator(t, env, routes)

	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "alpha", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{ExtraSANs: []string{"alpha.example.com"}}},
			Etcd:         v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
		},
	}
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	names := naming.For(vc.Name)

	t.Run("provisioning", func(t *testing.T) {
		// Without pods running, the operator gets as far as it can and says what it waits for.
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionCertificatesReady) && isTrue(v, v1alpha1.ConditionKubeconfigReady) &&
				reason(v, v1alpha1.ConditionEtcdReady) == virtualcluster.ReasonWaitingForPods
		})
		if got.Status.Phase != v1alpha1.PhaseProvisioning || isTrue(got, v1alpha1.ConditionReady) {
			t.Errorf("phase %s, Ready %v; want Provisioning, not Ready", got.Status.Phase, isTrue(got, v1alpha1.ConditionReady))
		}
		if !slices.Contains(got.Finalizers, naming.FinalizerVirtualCluster) {
			t.Errorf("finalizers %v lack %s", got.Finalizers, naming.FinalizerVirtualCluster)
		}
		if want := "https://alpha-apiserver.kubenest-cp-tenants.svc:6443"; got.Status.Endpoint != want {
			t.Errorf("endpoint %q, want %q", got.Status.Endpoint, want)
		}
		if ref := got.Status.KubeconfigSecretRef; ref == nil || ref.Name != "alpha-kubeconfig" || ref.Key != "value" {
			t.Errorf("kubeconfigSecretRef %+v", ref)
		}
	})

	t.Run("control plane in its own namespace, keys out of the tenant's", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := c.Get(ctx, key(vc.Name), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ControlPlaneNamespace != "kubenest-cp-tenants" || controlplane.Namespace(got) != cpNS {
			t.Errorf("status.controlPlaneNamespace %q, want kubenest-cp-tenants", got.Status.ControlPlaneNamespace)
		}
		cp := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, cp); err != nil {
			t.Fatalf("the control-plane namespace: %v", err)
		}
		for k, v := range map[string]string{"pod-security.kubernetes.io/enforce": "baseline",
			naming.LabelManagedBy: naming.ManagedByValue, naming.LabelVirtualClusterNamespace: ns} {
			if cp.Labels[k] != v {
				t.Errorf("namespace %s: label %s = %q, want %q (labels %v)", cpNS, k, cp.Labels[k], v, cp.Labels)
			}
		}
		// The tenant's namespace holds its admin kubeconfig and no other Secret of it: no key
		// its users could read but the admin's, which is theirs.
		secrets := &corev1.SecretList{}
		if err := c.List(ctx, secrets, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets.Items {
			if s.Name != names.KubeconfigSecret() {
				t.Errorf("Secret %s/%s (keys %v) in the tenant's namespace", s.Namespace, s.Name, slices.Sorted(maps.Keys(s.Data)))
			}
		}
		for _, l := range []client.ObjectList{&corev1.ServiceList{}, &appsv1.StatefulSetList{}, &appsv1.DeploymentList{}, &corev1.PodList{}} {
			if err := c.List(ctx, l, client.InNamespace(ns), client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}); err != nil {
				t.Fatal(err)
			}
			if n := meta.LenList(l); n != 0 {
				t.Errorf("%T: %d of the control plane in the tenant's namespace", l, n)
			}
		}
	})

	t.Run("a pod its kubelet does not start is annotated for a retry", func(t *testing.T) {
		// An etcd pod bound 10 s ago whose kubelet made no sandbox (here there is no kubelet).
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: cpNS, Name: "default"}}
		if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		// Made from the StatefulSet's template, as its controller would: an ephemeral etcd pod
		// with another config hash is one the operator replaces (deletes) instead.
		sts := &appsv1.StatefulSet{}
		if err := c.Get(ctx, cpKey(names.EtcdStatefulSet()), sts); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: cpNS, Name: names.EtcdStatefulSet() + "-0", Labels: sts.Spec.Template.Labels,
				Annotations: map[string]string{naming.AnnotationConfigHash: sts.Spec.Template.Annotations[naming.AnnotationConfigHash]}},
			Spec: corev1.PodSpec{NodeName: "host-node-1", Containers: []corev1.Container{{Name: "etcd", Image: "etcd"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Delete(ctx, pod, client.GracePeriodSeconds(0)) }()
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Now().Add(-10 * time.Second))},
			{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse},
		}
		if err := c.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
				return false, err
			}
			if got.DeletionTimestamp != nil {
				return false, fmt.Errorf("the operator deleted the pod instead")
			}
			return got.Annotations[virtualcluster.AnnotationKubeletRetry] != "", nil
		})
		if err != nil {
			t.Errorf("the pod never got annotation %s: %v", virtualcluster.AnnotationKubeletRetry, err)
		}
	})

	t.Run("owned objects", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := c.Get(ctx, key(vc.Name), got); err != nil {
			t.Fatal(err)
		}
		// The admin kubeconfig, in the tenant's namespace, is the VirtualCluster's: the host's
		// garbage collector removes it with it.
		kc := &corev1.Secret{}
		if err := c.Get(ctx, key(names.KubeconfigSecret()), kc); err != nil {
			t.Errorf("Secret %s: %v", names.KubeconfigSecret(), err)
		} else if owner := metav1.GetControllerOf(kc); owner == nil || owner.UID != got.UID || owner.Kind != "VirtualCluster" ||
			kc.Labels[naming.LabelVirtualCluster] != vc.Name {
			t.Errorf("Secret %s: controller owner %+v, labels %v; want the VirtualCluster's", kc.Name, owner, kc.Labels)
		}
		// The control plane, in the control-plane namespace, owned by nobody (an owner in
		// another namespace counts as absent) and labelled with the VirtualCluster's name and
		// namespace.
		for _, o := range []client.Object{
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names.APIServerService()}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names.EtcdClientService()}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: names.EtcdPeerService()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.CASecret()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.EtcdCertsSecret()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.ControlPlaneCertsSecret()}},
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: names.KubeletSignerSecret()}},
			&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: names.EtcdStatefulSet()}},
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: names.ControlPlaneDeployment()}},
		} {
			if err := c.Get(ctx, cpKey(o.GetName()), o); err != nil {
				t.Errorf("%T %s/%s: %v", o, cpNS, o.GetName(), err)
				continue
			}
			if refs := o.GetOwnerReferences(); len(refs) != 0 {
				t.Errorf("%T %s: owner references %+v, want none", o, o.GetName(), refs)
			}
			if l := o.GetLabels(); l[naming.LabelVirtualCluster] != vc.Name || l[naming.LabelVirtualClusterNamespace] != ns {
				t.Errorf("%T %s: labels %v", o, o.GetName(), l)
			}
		}
		// The tenant's Service range is its own: claimed by an IPAddress named after its first
		// address. Its Services are not copied into the host (no shared node), so the range is
		// none of the host's ServiceCIDRs.
		claim := &networkingv1.IPAddress{}
		if cidr, err := netip.ParsePrefix(got.Status.ServiceCIDR); err != nil {
			t.Errorf("status.serviceCIDR: %v", err)
		} else if err := c.Get(ctx, client.ObjectKey{Name: cidr.Addr().String()}, claim); err != nil {
			t.Errorf("the claim of %s: %v", cidr, err)
		} else if claim.Labels[naming.LabelVirtualCluster] != vc.Name || claim.Labels[naming.LabelVirtualClusterNamespace] != ns ||
			claim.Spec.ParentRef.Resource != "virtualclusters" || claim.Spec.ParentRef.Name != vc.Name {
			t.Errorf("the claim of %s: labels %v, parent %+v", cidr, claim.Labels, claim.Spec.ParentRef)
		}
		if err := c.Get(ctx, client.ObjectKey{Name: naming.ServiceCIDR(got.Status.ServiceCIDR)}, &networkingv1.ServiceCIDR{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host ServiceCIDR for %s: %v", got.Status.ServiceCIDR, err)
		}
	})

	t.Run("with the shared node, the range is the host's, and the host gives its own Services none of it", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := c.Get(ctx, key(vc.Name), got); err != nil {
			t.Fatal(err)
		}
		cidr, err := netip.ParsePrefix(got.Status.ServiceCIDR)
		if err != nil {
			t.Fatalf("status.serviceCIDR: %v", err)
		}
		patch := client.MergeFrom(got.DeepCopy())
		got.Spec.Nodes.Shared = true
		if err := c.Patch(ctx, got, patch); err != nil {
			t.Fatal(err)
		}
		sc := &networkingv1.ServiceCIDR{}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			return c.Get(ctx, client.ObjectKey{Name: naming.ServiceCIDR(cidr.String())}, sc) == nil, nil
		})
		if err != nil {
			t.Fatalf("no host ServiceCIDR for %s: %v", cidr, err)
		}
		if sc.Labels[naming.LabelVirtualCluster] != vc.Name || sc.Labels[naming.LabelVirtualClusterNamespace] != ns {
			t.Errorf("ServiceCIDR %s labels %v", sc.Name, sc.Labels)
		}
		holds := &networkingv1.IPAddressList{}
		if err := c.List(ctx, holds, client.MatchingLabels{iphold.LabelRange: naming.ServiceCIDR(cidr.String())}); err != nil {
			t.Fatal(err)
		}
		if want := len(iphold.Addresses(cidr)); len(holds.Items) != want {
			t.Errorf("%d addresses of %s held, want %d", len(holds.Items), cidr, want)
		}
		// The host picks one of its ServiceCIDRs at random for each Service: with the range
		// not held, about half of these would land in it.
		for i := range 24 {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("host-user-%d", i)},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
			if err := c.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = c.Delete(ctx, svc) }()
			if ip := netip.MustParseAddr(svc.Spec.ClusterIP); cidr.Contains(ip) {
				t.Errorf("host Service %s got %s, in the tenant's range %s", svc.Name, ip, cidr)
			}
		}
	})

	t.Run("secrets", func(t *testing.T) {
		ca := secret(t, ctx, c, cpNS, names.CASecret())
		cp := secret(t, ctx, c, cpNS, names.ControlPlaneCertsSecret())
		etcd := secret(t, ctx, c, cpNS, names.EtcdCertsSecret())
		kc := secret(t, ctx, c, ns, names.KubeconfigSecret())
		for _, k := range []string{"ca.key", "front-proxy-ca.key", "etcd-ca.key", "sa.key"} {
			if len(ca.Data[k]) == 0 {
				t.Errorf("CA Secret lacks %s", k)
			}
		}
		// CA keys stay in the CA Secret: nothing a pod mounts holds them.
		for _, s := range []*corev1.Secret{cp, etcd, kc} {
			for _, k := range []string{"ca.key", "front-proxy-ca.key", "etcd-ca.key"} {
				if _, ok := s.Data[k]; ok {
					t.Errorf("Secret %s holds CA key %s", s.Name, k)
				}
			}
		}
		caCert, err := pki.ParseCert(ca.Data["ca.crt"])
		if err != nil {
			t.Fatal(err)
		}
		apiCert, err := pki.ParseCert(cp.Data["apiserver.crt"])
		if err != nil {
			t.Fatal(err)
		}
		if err := apiCert.CheckSignatureFrom(caCert); err != nil {
			t.Errorf("apiserver certificate not signed by the tenant CA: %v", err)
		}
		svc := &corev1.Service{}
		if err := c.Get(ctx, cpKey(names.APIServerService()), svc); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"alpha-apiserver.kubenest-cp-tenants.svc", "kubernetes.default.svc", "alpha.example.com", svc.Spec.ClusterIP} {
			if err := apiCert.VerifyHostname(name); err != nil {
				t.Errorf("apiserver certificate: %v", err)
			}
		}
		// A Service of that name in the tenant's namespace, which its users may make, is not
		// the apiserver.
		if err := apiCert.VerifyHostname("alpha-apiserver.tenants.svc"); err == nil {
			t.Error("the apiserver certificate is valid for alpha-apiserver.tenants.svc")
		}
		if validity := apiCert.NotAfter.Sub(apiCert.NotBefore); validity < 364*24*time.Hour || validity > 366*24*time.Hour {
			t.Errorf("apiserver certificate valid for %s, want a year", validity)
		}
		for _, k := range []string{"etcd-server.crt", "etcd-server.key", "etcd-peer.crt", "etcd-peer.key", "ca.crt"} {
			if len(etcd.Data[k]) == 0 {
				t.Errorf("etcd certificates Secret lacks %s", k)
			}
		}
		for _, key := range []string{controlplane.KeyKubeconfig, controlplane.KeyInClusterKubeconfig} {
			cfg, err := kubeconfig.Parse(kc.Data[key])
			if err != nil {
				t.Fatalf("kubeconfig %s: %v", key, err)
			}
			if cfg.Server != "https://alpha-apiserver.kubenest-cp-tenants.svc:6443" {
				t.Errorf("kubeconfig %s server %s", key, cfg.Server)
			}
			cert, err := pki.ParseCert(cfg.ClientCertPEM)
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != controlplane.AdminUser || !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
				t.Errorf("kubeconfig %s client certificate %s %v", key, cert.Subject, cert.ExtKeyUsage)
			}
		}
	})

	t.Run("operator restart reuses everything", func(t *testing.T) {
		before := map[types.NamespacedName]string{}
		for _, k := range []types.NamespacedName{cpKey(names.CASecret()), cpKey(names.ControlPlaneCertsSecret()),
			cpKey(names.EtcdCertsSecret()), key(names.KubeconfigSecret())} {
			before[k] = secret(t, ctx, c, k.Namespace, k.Name).ResourceVersion
		}
		deploy := &appsv1.Deployment{}
		if err := c.Get(ctx, cpKey(names.ControlPlaneDeployment()), deploy); err != nil {
			t.Fatal(err)
		}
		op.stop()
		op = startOperator(parent, env, routes) // runs past this subtest
		// A spec change makes the new operator reconcile.
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) {
			v.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"v": "1"}
		})
		waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return v.Status.ObservedGeneration == v.Generation
		})
		for k, rv := range before {
			if got := secret(t, ctx, c, k.Namespace, k.Name).ResourceVersion; got != rv {
				t.Errorf("Secret %s changed (resourceVersion %s -> %s); certificates must be reused", k, rv, got)
			}
		}
		after := &appsv1.Deployment{}
		if err := c.Get(ctx, cpKey(names.ControlPlaneDeployment()), after); err != nil {
			t.Fatal(err)
		}
		if a, b := deploy.Spec.Template.Annotations[naming.AnnotationConfigHash], after.Spec.Template.Annotations[naming.AnnotationConfigHash]; a != b {
			t.Errorf("config hash changed %s -> %s", a, b)
		}
		if !slices.Contains(after.Spec.Template.Spec.Containers[0].Args, "--v=1") {
			t.Errorf("extra arg --v=1 not in apiserver args %v", after.Spec.Template.Spec.Containers[0].Args)
		}
	})

	t.Run("ready with a real tenant", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := c.Get(ctx, key(vc.Name), got); err != nil {
			t.Fatal(err)
		}
		tenant := testtenant.Run(t, testtenant.Binaries(t), got, controlplane.DefaultSettings(),
			secret(t, ctx, c, cpNS, names.EtcdCertsSecret()), secret(t, ctx, c, cpNS, names.ControlPlaneCertsSecret()),
			secret(t, ctx, c, cpNS, names.KubeletSignerSecret()))
		routes.set(fmt.Sprintf("%s.%s.svc:6443", names.APIServerService(), cpNS), tenant.APIServerAddress)
		kc := secret(t, ctx, c, ns, names.KubeconfigSecret())
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kc.Data[controlplane.KeyKubeconfig])
		if err != nil {
			t.Fatal(err)
		}
		cfg.Dial = routes.dial
		if err := tenant.WaitReady(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		// The test plays the kubelet and the host's workload controllers: the pods are Ready.
		markStatefulSetReady(t, ctx, c, names.EtcdStatefulSet())
		markDeploymentReady(t, ctx, c, names.ControlPlaneDeployment())

		got = waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool { return isTrue(v, v1alpha1.ConditionReady) })
		if got.Status.Phase != v1alpha1.PhaseReady || got.Status.Version == "" || got.Status.ObservedGeneration != got.Generation {
			t.Errorf("status %+v", got.Status)
		}
		// The admin kubeconfig the operator wrote works, and the tenant got its bootstrap RBAC.
		tc := kubernetes.NewForConfigOrDie(cfg)
		if _, err := tc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("listing tenant namespaces with the admin kubeconfig: %v", err)
		}
		for _, crb := range []string{"kubenest:apiserver-kubelet-client", controlplane.PortalUsersGroup} {
			if _, err := tc.RbacV1().ClusterRoleBindings().Get(ctx, crb, metav1.GetOptions{}); err != nil {
				t.Errorf("tenant bootstrap RBAC: %v", err)
			}
		}

		// What a platform team's Prometheus scrapes about it.
		labels := map[string]string{"namespace": ns, "virtualcluster": vc.Name}
		series := tenantSeries(c)
		for name, want := range map[string]float64{"kubenest_virtualcluster_ready": 1, "kubenest_virtualcluster_asleep": 0,
			"kubenest_virtualcluster_lent_nodes": 0, "kubenest_virtualcluster_shared_node_pods": 0} {
			if v, ok := metricValue(t, series, name, labels); !ok || v != want {
				t.Errorf("%s: %v (found %v), want %v", name, v, ok, want)
			}
		}
		for phase, want := range map[string]float64{"Ready": 1, "Provisioning": 0} {
			if v, ok := metricValue(t, series, "kubenest_virtualcluster_phase", map[string]string{"namespace": ns, "virtualcluster": vc.Name, "phase": phase}); !ok || v != want {
				t.Errorf("phase %s: %v (found %v), want %v", phase, v, ok, want)
			}
		}
		if n, ok := metricValue(t, metrics.Registry, "kubenest_virtualcluster_create_to_ready_seconds", nil); !ok || n < 1 {
			t.Errorf("create to Ready observed %v times (found %v)", n, ok)
		}
	})

	t.Run("delete leaves nothing", func(t *testing.T) {
		if err := c.Delete(ctx, vc); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, key(vc.Name), &v1alpha1.VirtualCluster{})
			return err != nil && client.IgnoreNotFound(err) == nil, nil
		})
		if err != nil {
			t.Fatalf("VirtualCluster not gone: %v", err)
		}
		sel := client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}
		for _, namespace := range []string{ns, cpNS} {
			for _, l := range []client.ObjectList{&corev1.SecretList{}, &corev1.ServiceList{}, &appsv1.StatefulSetList{},
				&appsv1.DeploymentList{}, &corev1.PodList{}, &corev1.PersistentVolumeClaimList{}} {
				if err := c.List(ctx, l, client.InNamespace(namespace), sel); err != nil {
					t.Fatal(err)
				}
				if n := meta.LenList(l); n != 0 {
					t.Errorf("%T: %d left in %s after the VirtualCluster was deleted", l, n, namespace)
				}
			}
		}
		// It was the namespace's last tenant: its control-plane namespace goes (here, where no
		// namespace controller runs, it stays terminating).
		assertNamespaceGoing(t, ctx, c, cpNS)
		// Its series go with it.
		if _, ok := metricValue(t, metrics.Registry, "kubenest_certificate_expiry_timestamp_seconds",
			map[string]string{"namespace": ns, "virtualcluster": vc.Name, "certificate": "ca"}); ok {
			t.Error("the deleted tenant's certificate expiry series is still served")
		}
		if _, ok := metricValue(t, tenantSeries(c), "kubenest_virtualcluster_ready", map[string]string{"namespace": ns, "virtualcluster": vc.Name}); ok {
			t.Error("the deleted tenant's ready series is still served")
		}
		// The Service range is given back (the host finalizes it once no Service uses it).
		scs := &networkingv1.ServiceCIDRList{}
		if err := c.List(ctx, scs, client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}); err != nil {
			t.Fatal(err)
		}
		for _, sc := range scs.Items {
			if sc.DeletionTimestamp.IsZero() {
				t.Errorf("ServiceCIDR %s is not being deleted", sc.Name)
			}
		}
		// Its holds and its claim go first.
		for _, sel := range []client.MatchingLabels{{networkingv1.LabelManagedBy: iphold.ManagedBy}, {naming.LabelVirtualCluster: vc.Name}} {
			ips := &networkingv1.IPAddressList{}
			if err := c.List(ctx, ips, sel); err != nil {
				t.Fatal(err)
			}
			if len(ips.Items) != 0 {
				t.Errorf("%d IPAddresses (%v) of the deleted tenant's range left", len(ips.Items), sel)
			}
		}
	})
}

// TestNodePortEndpoint checks a NodePort tenant waits for a host node address, then publishes
// it and puts it in the apiserver's certificate.
func TestNodePortEndpoint(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client
	startOperator(t, env, &tenantRoutes{})
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort, NodePort: ptr.To[int32](31443)}},
			Etcd:         v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
		},
	}
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
		return reason(v, v1alpha1.ConditionKubeconfigReady) == virtualcluster.ReasonWaitingForEndpoint
	})
	if got.Status.Endpoint != "" {
		t.Errorf("endpoint %q before any node exists", got.Status.Endpoint)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.8.7"}},
	}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	got = waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
		return isTrue(v, v1alpha1.ConditionKubeconfigReady)
	})
	if want := "https://10.9.8.7:31443"; got.Status.Endpoint != want {
		t.Errorf("endpoint %q, want %q", got.Status.Endpoint, want)
	}
	apiCert, err := pki.ParseCert(secret(t, ctx, c, cpNS, naming.For(vc.Name).ControlPlaneCertsSecret()).Data["apiserver.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if err := apiCert.VerifyHostname("10.9.8.7"); err != nil {
		t.Errorf("apiserver certificate does not cover the node address: %v", err)
	}
}

// TestStartQueueTurn: a tenant waiting for a start slot starts the moment one frees, not at
// its next look (30 s later).
func TestStartQueueTurn(t *testing.T) {
	env, ctx := startEnv(t, testenv.Options{}, 2*time.Minute)
	c := env.Client
	startOperator(t, env, &tenantRoutes{}, func(r *virtualcluster.Reconciler) {
		r.Starts = &virtualcluster.StartQueue{Max: 1, Timeout: 3 * time.Minute}
	})
	create := func(name string) {
		t.Helper()
		vc := &v1alpha1.VirtualCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec:       v1alpha1.VirtualClusterSpec{Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}}},
		}
		if err := c.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
	}
	// The first takes the one slot and holds it (no pod ever runs here); the second waits.
	create("first")
	waitFor(t, ctx, c, "first", func(v *v1alpha1.VirtualCluster) bool {
		return reason(v, v1alpha1.ConditionEtcdReady) == virtualcluster.ReasonWaitingForPods
	})
	create("second")
	waitFor(t, ctx, c, "second", func(v *v1alpha1.VirtualCluster) bool {
		return reason(v, v1alpha1.ConditionAPIServerReady) == virtualcluster.ReasonQueued
	})
	if err := c.Get(ctx, cpKey(naming.For("second").EtcdStatefulSet()), &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the waiting tenant's etcd StatefulSet: %v; want none yet", err)
	}

	// The first goes: the second starts within seconds.
	if err := c.Delete(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "first", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		return c.Get(ctx, cpKey(naming.For("second").EtcdStatefulSet()), &appsv1.StatefulSet{}) == nil, nil
	})
	if err != nil {
		t.Fatalf("the waiting tenant did not start within 10 s of the slot freeing: %v", err)
	}
	t.Logf("the waiting tenant's etcd StatefulSet %v after the slot freed", time.Since(freed).Round(time.Millisecond))
	// The first was not the namespace's last tenant: the control-plane namespace stays.
	cp := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: cpNS}, cp); err != nil || !cp.DeletionTimestamp.IsZero() {
		t.Errorf("namespace %s: %v, deletionTimestamp %v; want it kept for the tenant left", cpNS, err, cp.DeletionTimestamp)
	}
}

// key names an object in the tenants' namespace: a VirtualCluster, its admin kubeconfig.
func key(name string) types.NamespacedName { return types.NamespacedName{Namespace: ns, Name: name} }

// cpKey names an object in the tenants' control-plane namespace.
func cpKey(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: cpNS, Name: name}
}

// assertNamespaceGoing checks that namespace name is gone or being deleted.
func assertNamespaceGoing(t *testing.T, ctx context.Context, c client.Client, name string) {
	t.Helper()
	got := &corev1.Namespace{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: name}, got)
		return apierrors.IsNotFound(err) || (err == nil && !got.DeletionTimestamp.IsZero()), nil
	})
	if err != nil {
		t.Errorf("namespace %s is not being deleted: %v; deletionTimestamp %v", name, err, got.DeletionTimestamp)
	}
}

func isTrue(v *v1alpha1.VirtualCluster, typ string) bool {
	return meta.IsStatusConditionTrue(v.Status.Conditions, typ)
}

func reason(v *v1alpha1.VirtualCluster, typ string) string {
	if c := meta.FindStatusCondition(v.Status.Conditions, typ); c != nil {
		return c.Reason
	}
	return ""
}

func waitFor(t *testing.T, ctx context.Context, c client.Client, name string, ok func(*v1alpha1.VirtualCluster) bool) *v1alpha1.VirtualCluster {
	t.Helper()
	v := &v1alpha1.VirtualCluster{}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key(name), v); err != nil {
			return false, nil
		}
		return ok(v), nil
	})
	if err != nil {
		t.Fatalf("VirtualCluster %s: %v; status: %+v", name, err, v.Status)
	}
	return v
}

func patchVC(t *testing.T, ctx context.Context, c client.Client, name string, mutate func(*v1alpha1.VirtualCluster)) {
	t.Helper()
	v := &v1alpha1.VirtualCluster{}
	if err := c.Get(ctx, key(name), v); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(v.DeepCopy())
	mutate(v)
	if err := c.Patch(ctx, v, patch); err != nil {
		t.Fatal(err)
	}
}

// secret reads Secret name of namespace: cpNS for the control plane's, ns for the admin
// kubeconfig.
func secret(t *testing.T, ctx context.Context, c client.Client, namespace, name string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatalf("Secret %s/%s: %v", namespace, name, err)
	}
	return s
}

// markStatefulSetReady marks the StatefulSet name of the control-plane namespace Ready.
func markStatefulSetReady(t *testing.T, ctx context.Context, c client.Client, name string) {
	t.Helper()
	s := &appsv1.StatefulSet{}
	if err := c.Get(ctx, cpKey(name), s); err != nil {
		t.Fatal(err)
	}
	n := *s.Spec.Replicas
	s.Status = appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, Replicas: n, ReadyReplicas: n,
		CurrentReplicas: n, UpdatedReplicas: n, AvailableReplicas: n}
	if err := c.Status().Update(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// markDeploymentReady marks the Deployment name of the control-plane namespace Ready, and
// makes it a Ready pod.
func markDeploymentReady(t *testing.T, ctx context.Context, c client.Client, name string) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := c.Get(ctx, cpKey(name), d); err != nil {
		t.Fatal(err)
	}
	n := *d.Spec.Replicas
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, ReadyReplicas: n,
		UpdatedReplicas: n, AvailableReplicas: n}
	if err := c.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	// And its pod, Ready, which is what the operator waits for before it probes the tenant.
	// (The host's admission wants its ServiceAccount, which no controller makes here.)
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: "default"}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: d.Namespace, Name: d.Name + "-0", Labels: d.Spec.Template.Labels},
		Spec:       *d.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.10",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}
