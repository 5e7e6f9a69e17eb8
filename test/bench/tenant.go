package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// labelBench marks the host namespaces the benchmarks create, so `bench cleanup` finds what an
// interrupted run left behind.
const labelBench = "kubenest.io/bench"

// namespace creates a host namespace and waits for its default service account. The cleanup it
// returns deletes the namespace, with everything in it, and waits until it is gone.
func namespace(ctx context.Context, e *env, name string) (string, func(), error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{labelBench: "true"}}}
	err := e.host.Create(ctx, ns)
	if apierrors.IsAlreadyExists(err) {
		// Left by an earlier run that was stopped: its tenants and the namespace go first. A
		// namespace of that name that is not a benchmark's is not touched.
		old := &corev1.Namespace{}
		if err := e.host.Get(ctx, client.ObjectKey{Name: name}, old); err == nil && old.Labels[labelBench] != "true" {
			return "", nil, fmt.Errorf("namespace %s exists and is not a benchmark's (no %s label): not using it", name, labelBench)
		}
		fmt.Printf("removing namespace %s, left by an earlier run\n", name)
		deleteNamespace(e, name)
		err = e.host.Create(ctx, ns.DeepCopy())
	}
	if err != nil {
		return "", nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	cleanup := func() { deleteNamespace(e, name) }
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return e.host.Get(ctx, client.ObjectKey{Namespace: name, Name: "default"}, &corev1.ServiceAccount{}) == nil, nil
	})
	if err != nil {
		cleanup()
		return "", nil, fmt.Errorf("no default service account in %s: %w", name, err)
	}
	return name, cleanup, nil
}

// sharedTenant creates a VirtualCluster with the shared node, room there for pods pods (a share
// of the shared nodes the bench grants as the host's admin), in a namespace of its own, and
// returns a client of the tenant once its virtual node is Ready.
func sharedTenant(ctx context.Context, e *env, name string, pods int) (kubernetes.Interface, func(), error) {
	ns, cleanupNS, err := namespace(ctx, e, name)
	if err != nil {
		return nil, nil, err
	}
	vc := benchVC(ns, "bench")
	vc.Spec.Nodes.Shared = true
	vc.Spec.Nodes.SharedQuota = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(pods), resource.DecimalSI)}
	if err := e.host.Create(ctx, vc); err != nil {
		cleanupNS()
		return nil, nil, err
	}
	cleanup := func() {
		_ = e.host.Delete(context.Background(), vc)
		cleanupNS()
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionSharedNodeReady), nil
	})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("tenant's shared node not ready: %w", err)
	}
	tenant, err := tenantClient(ctx, e, vc)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err1 := tenant.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		n, err2 := tenant.CoreV1().Nodes().Get(ctx, "kubenest-shared", metav1.GetOptions{})
		return err1 == nil && err2 == nil && len(n.Status.Conditions) > 0, nil
	})
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("tenant not ready for pods: %w", err)
	}
	return tenant, cleanup, nil
}

// deleteNamespace deletes a host namespace and waits, up to 5 minutes, until it is gone. The
// VirtualClusters in it go first, each through the operator's finalizer, so the namespace
// never waits on a tenant whose namespace is already terminating.
func deleteNamespace(e *env, name string) {
	ctx := context.Background()
	_ = e.host.DeleteAllOf(ctx, &v1alpha1.VirtualCluster{}, client.InNamespace(name))
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		l := &v1alpha1.VirtualClusterList{}
		return e.host.List(ctx, l, client.InNamespace(name)) == nil && len(l.Items) == 0, nil
	})
	waitControlPlaneNamespaceGone(e, name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_ = e.host.Delete(ctx, ns)
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.host.Get(ctx, client.ObjectKeyFromObject(ns), &corev1.Namespace{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
}

// waitControlPlaneNamespaceGone waits, up to 5 minutes, until the control-plane namespace of
// namespace ns is gone, which the operator deletes with the namespace's last VirtualCluster: a
// tenant created meanwhile would wait for it to go, and be measured waiting.
func waitControlPlaneNamespaceGone(e *env, ns string) {
	cp := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: naming.ControlPlaneNamespace(ns)}}
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(e.host.Get(ctx, client.ObjectKeyFromObject(cp), &corev1.Namespace{})), nil
	})
}

// benchVC is the VirtualCluster the benchmarks create: the default storage (one etcd member
// on a volume claim of the host's default StorageClass), its apiserver on a NodePort this
// machine reaches.
func benchVC(ns, name string) *v1alpha1.VirtualCluster {
	return &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort}},
		},
	}
}

// readyTenant creates a VirtualCluster and waits, up to timeout, until it is Ready and its
// kubeconfig answers; it returns the VirtualCluster as last read and a client of the tenant.
func readyTenant(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster, timeout time.Duration) (kubernetes.Interface, error) {
	if err := e.host.Create(ctx, vc); err != nil {
		return nil, err
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s/%s not Ready within %s: %w", vc.Namespace, vc.Name, timeout, err)
	}
	tenant, err := tenantClient(ctx, e, vc)
	if err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s/%s: kubeconfig does not answer: %w", vc.Namespace, vc.Name, err)
	}
	return tenant, nil
}

// tenantClient reads a VirtualCluster's admin kubeconfig Secret.
func tenantClient(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster) (kubernetes.Interface, error) {
	cfg, err := tenantConfig(ctx, e, vc)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// tenantConfig is the REST config of a VirtualCluster's admin kubeconfig Secret.
func tenantConfig(ctx context.Context, e *env, vc *v1alpha1.VirtualCluster) (*rest.Config, error) {
	ref := vc.Status.KubeconfigSecretRef
	if ref == nil {
		return nil, fmt.Errorf("%s has no kubeconfig yet", vc.Name)
	}
	s := &corev1.Secret{}
	if err := e.host.Get(ctx, client.ObjectKey{Namespace: vc.Namespace, Name: ref.Name}, s); err != nil {
		return nil, err
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[ref.Key])
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 100, 200
	return cfg, nil
}

// componentArgs are extra flags for the tenants' control-plane components (the VirtualCluster's
// extraArgs), from repeatable command-line flags, to measure what a flag changes.
type componentArgs struct {
	apiserver, controllerManager, scheduler keyValues
}

func (a *componentArgs) register(fs *flag.FlagSet) {
	fs.Var(&a.apiserver, "apiserver-arg", "extra kube-apiserver flag of the tenants, name=value (repeatable)")
	fs.Var(&a.controllerManager, "controller-manager-arg", "extra kube-controller-manager flag of the tenants, name=value (repeatable)")
	fs.Var(&a.scheduler, "scheduler-arg", "extra kube-scheduler flag of the tenants, name=value (repeatable)")
}

// apply sets the extra flags on a VirtualCluster.
func (a *componentArgs) apply(vc *v1alpha1.VirtualCluster) {
	vc.Spec.ControlPlane.APIServer.ExtraArgs = a.apiserver.m
	vc.Spec.ControlPlane.ControllerManager.ExtraArgs = a.controllerManager.m
	vc.Spec.ControlPlane.Scheduler.ExtraArgs = a.scheduler.m
}

// String says which extra flags are set, for a method: empty when none are.
func (a *componentArgs) String() string {
	var parts []string
	for _, c := range []struct {
		name string
		kv   keyValues
	}{{"kube-apiserver", a.apiserver}, {"kube-controller-manager", a.controllerManager}, {"kube-scheduler", a.scheduler}} {
		if len(c.kv.m) > 0 {
			parts = append(parts, c.name+" "+c.kv.String())
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; extra flags: " + strings.Join(parts, ", ")
}

// keyValues is a repeatable name=value flag.
type keyValues struct{ m map[string]string }

func (kv *keyValues) String() string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(kv.m)) {
		out = append(out, "--"+k+"="+kv.m[k])
	}
	return strings.Join(out, " ")
}

func (kv *keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not name=value", s)
	}
	if kv.m == nil {
		kv.m = map[string]string{}
	}
	kv.m[strings.TrimPrefix(k, "--")] = v
	return nil
}
