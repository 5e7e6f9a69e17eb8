//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// TestSleepWake puts a tenant with data and workloads on the shared node to sleep by hand:
// nothing of it runs in the host while it sleeps, and awake again it is as it was.
func TestSleepWake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-sleep")
	vc := newVC(ns, "sleepy", v1alpha1.ExposureNodePort) // etcd on a volume, the default
	vc.Spec.Nodes.Shared = true
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	cpNS := controlplane.Namespace(waitReady(t, ctx, vc))
	kubeconfig := downloadKubeconfig(t, ctx, vc)
	tenant := tenantClient(t, kubeconfig)
	if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "keep"}, Data: map[string]string{"answer": "42"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createWebDeployment(t, ctx, tenant, 2)
	before := waitTenantPodsRunning(t, ctx, tenant, 2)
	// A pod of no controller: nothing would make it again if the sleep lost it.
	bare, err := tenant.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare"},
		Spec: corev1.PodSpec{
			NodeName: "kubenest-shared", TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "c", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitPodRunning := func(what string) *corev1.Pod {
		t.Helper()
		var got *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err = tenant.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodRunning && got.Status.PodIP != "", nil
		})
		if err != nil {
			t.Fatalf("pod bare not Running %s: %v (%+v)", what, err, got)
		}
		return got
	}
	waitPodRunning("before the sleep")

	t.Run("asleep, nothing of the tenant runs in the host and its data stays", func(t *testing.T) {
		start := time.Now()
		got := sleepAndWait(t, ctx, vc)
		t.Logf("asleep %s after spec.sleep.asleep was set", time.Since(start).Round(100*time.Millisecond))
		if got.Status.Phase != v1alpha1.PhaseSleeping {
			t.Errorf("phase %s, want Sleeping", got.Status.Phase)
		}
		if ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse ||
			!strings.Contains(ready.Message, "asleep") {
			t.Errorf("Ready condition %+v, want False saying the tenant is asleep", ready)
		}
		// Neither its control plane nor its shared-node pods.
		for _, hostNS := range []string{cpNS, ns} {
			pods := &corev1.PodList{}
			if err := host.List(ctx, pods, client.InNamespace(hostNS)); err != nil {
				t.Fatal(err)
			}
			for _, p := range pods.Items {
				t.Errorf("pod %s (%s) still in host namespace %s while the tenant sleeps", p.Name, p.Labels[naming.LabelComponent], hostNS)
			}
		}
		claims := &corev1.PersistentVolumeClaimList{}
		if err := host.List(ctx, claims, client.InNamespace(cpNS), client.MatchingLabels{naming.LabelVirtualCluster: vc.Name}); err != nil {
			t.Fatal(err)
		}
		if len(claims.Items) != 1 {
			t.Errorf("%d etcd volume claims while asleep, want the 1 that holds the tenant's data", len(claims.Items))
		}
	})

	t.Run("awake again, the tenant is as it was", func(t *testing.T) {
		start := time.Now()
		setAsleep(t, ctx, vc, false)
		waitReady(t, ctx, vc)
		t.Logf("Ready %s after spec.sleep.asleep was unset", time.Since(start).Round(100*time.Millisecond))
		// The controllers that stopped with the sleep handed their lease back: the woken
		// ones lead at once, not after the lease's 30 s.
		ready := time.Now()
		var holder string
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			lease, err := tenant.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			holder = ptr.Deref(lease.Spec.HolderIdentity, "")
			pods := &corev1.PodList{}
			if err := host.List(ctx, pods, client.InNamespace(cpNS), client.MatchingLabels{naming.LabelComponent: naming.ComponentControlPlane}); err != nil {
				return false, err
			}
			return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
				return p.DeletionTimestamp == nil && strings.HasPrefix(holder, p.Name+"_")
			}), nil
		})
		if err != nil {
			t.Errorf("20 s after the woken tenant was Ready its controllers do not lead (lease holder %q): %v", holder, err)
		} else {
			t.Logf("the woken controllers lead %s after Ready", time.Since(ready).Round(100*time.Millisecond))
		}
		// A plain kubectl call through the kubeconfig downloaded before the tenant slept.
		if out := kubectl(t, "--kubeconfig", kubeconfig, "get", "configmap", "keep", "-o", "jsonpath={.data.answer}"); out != "42" {
			t.Errorf("ConfigMap keep after waking: answer %q, want 42", out)
		}
		// Awake, each tenant pod runs again in a host pod of its own: the tenant sees its IP.
		var after []corev1.Pod
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			after = waitTenantPodsRunning(t, ctx, tenant, 2)
			bareNow, err := tenant.CoreV1().Pods("default").Get(ctx, "bare", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			hostIPs := map[string]string{}
			for _, p := range hostPodsOf(t, ctx, ns, vc.Name) {
				if p.Status.Phase == corev1.PodRunning {
					hostIPs[p.Annotations[clustertree.AnnotationTenantName]] = p.Status.PodIP
				}
			}
			for _, p := range append(after, *bareNow) {
				if ip, ok := hostIPs[p.Name]; !ok || ip != p.Status.PodIP {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("the tenant's pods do not all run in new host pods after waking: %v", err)
		}
		t.Logf("the tenant's pods Running in new host pods %s after waking", time.Since(start).Round(100*time.Millisecond))
		names := func(pods []corev1.Pod) []string {
			var out []string
			for _, p := range pods {
				out = append(out, p.Name)
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(names(before), names(after)) {
			t.Errorf("tenant pods %v after waking, want the same pods as before %v", names(after), names(before))
		}
		if got := waitPodRunning("after waking"); got.UID != bare.UID {
			t.Errorf("pod bare after waking has UID %s, want the pod from before the sleep (%s)", got.UID, bare.UID)
		}
		got := waitVC(t, ctx, vc, time.Minute, func(v *v1alpha1.VirtualCluster) bool { return v.Status.Phase == v1alpha1.PhaseReady })
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAsleep); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "Awake" {
			t.Errorf("awake, condition Asleep is %+v, want False, reason Awake", c)
		}
	})

	t.Run("asleep, the first kubectl call wakes the tenant and is answered", func(t *testing.T) {
		sleepAndWait(t, ctx, vc)
		start := time.Now()
		// No retry, no wait: the wake gateway holds the connection while the tenant wakes.
		out := kubectl(t, "--kubeconfig", kubeconfig, "get", "configmap", "keep", "-o", "jsonpath={.data.answer}")
		t.Logf("kubectl answered %s after it started, the tenant asleep", time.Since(start).Round(100*time.Millisecond))
		if out != "42" {
			t.Errorf("kubectl get configmap keep: %q, want 42", out)
		}
		got := waitVC(t, ctx, vc, time.Minute, func(v *v1alpha1.VirtualCluster) bool { return v.Status.Phase == v1alpha1.PhaseReady })
		if got.Spec.Sleep.Asleep {
			t.Errorf("spec.sleep.asleep is still true after a request woke the tenant")
		}
		// Once awake, the Service leads to the apiserver again, not through the gateway.
		slices := &discoveryv1.EndpointSliceList{}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := host.List(ctx, slices, client.InNamespace(cpNS), client.MatchingLabels{discoveryv1.LabelServiceName: naming.For(vc.Name).APIServerService()}); err != nil {
				return false, err
			}
			for _, s := range slices.Items {
				if s.Labels[discoveryv1.LabelManagedBy] != "endpointslice-controller.k8s.io" {
					return false, nil
				}
			}
			return len(slices.Items) > 0, nil
		})
		if err != nil {
			t.Errorf("the awake tenant's Service is not led by the EndpointSlice controller's slices alone: %v (%d slices)", err, len(slices.Items))
		}
		waitTenantPodsRunning(t, ctx, tenant, 2)
	})

	t.Run("idle for spec.sleep.afterInactivity, it sleeps; its own components and pods do not keep it awake", func(t *testing.T) {
		const after = time.Minute
		patchSleep(t, ctx, vc, fmt.Sprintf(`{"afterInactivity":%q}`, after))
		// A person's last request; then only the tenant's controllers, scheduler, DNS, the
		// shared node and its running pods are at work.
		kubectl(t, "--kubeconfig", kubeconfig, "get", "configmap", "keep")
		last := time.Now()
		got := waitVC(t, ctx, vc, after+2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			return meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.ConditionAsleep)
		})
		asleep := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAsleep).LastTransitionTime.Time
		t.Logf("asleep %s after the last request (spec.sleep.afterInactivity %s)", asleep.Sub(last).Round(time.Second), after)
		if asleep.Before(last.Add(after - time.Second)) { // the condition's time has seconds only
			t.Errorf("asleep %s after the last request, before spec.sleep.afterInactivity %s passed", asleep.Sub(last), after)
		}
		if !got.Spec.Sleep.Asleep {
			t.Errorf("asleep by inactivity, but spec.sleep.asleep is not set")
		}
		// Woken as ever by its next request.
		if out := kubectl(t, "--kubeconfig", kubeconfig, "get", "configmap", "keep", "-o", "jsonpath={.data.answer}"); out != "42" {
			t.Errorf("kubectl get configmap keep after the inactivity sleep: %q, want 42", out)
		}
		waitTenantPodsRunning(t, ctx, tenant, 2)
	})
}

// setAsleep sets the tenant's spec.sleep.asleep, as a person would with kubectl patch.
func setAsleep(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, asleep bool) {
	t.Helper()
	patchSleep(t, ctx, vc, fmt.Sprintf(`{"asleep":%t}`, asleep))
}

// patchSleep merges sleep (JSON) into the tenant's spec.sleep, as kubectl patch would.
func patchSleep(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, sleep string) {
	t.Helper()
	patch := `{"spec":{"sleep":` + sleep + `}}`
	if err := host.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Namespace, Name: vc.Name}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// sleepAndWait puts the tenant to sleep and waits until nothing of it runs in the host.
func sleepAndWait(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster) *v1alpha1.VirtualCluster {
	t.Helper()
	setAsleep(t, ctx, vc, true)
	return waitVC(t, ctx, vc, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
		return meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.ConditionAsleep)
	})
}
