//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// haGapBound is the longest a HA tenant may go without answering while one of its pods (or the
// node under one of them) goes away: about the time a client takes to notice a dead connection
// and the host's kube-proxy to drop the gone apiserver's endpoint.
const haGapBound = 10 * time.Second

// TestHAUnderFault runs a tenant with three etcd members (on volume claims) and two apiservers,
// and writes and reads through its kubeconfig every 200 ms while, one after the other, an etcd
// member's pod is deleted, an apiserver's pod is deleted, the operator is deleted and the node
// under an etcd member is drained. The tenant keeps answering, and every member comes back on
// its own claim, with its data, and rejoins.
func TestHAUnderFault(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-ha")
	vc := newVC(ns, "ha", v1alpha1.ExposureNodePort)
	vc.Spec.Etcd.Replicas = 3
	vc.Spec.ControlPlane.Replicas = ptr.To[int32](2)
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	vc = waitReady(t, ctx, vc)
	names := naming.For(vc.Name)
	cpNS := controlplane.Namespace(vc) // the tenant's etcd, control plane and their claims
	etcdPods := func() []corev1.Pod {
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(cpNS), client.MatchingLabels(names.Labels(naming.ComponentEtcd))); err != nil {
			t.Fatal(err)
		}
		return pods.Items
	}
	for _, p := range etcdPods() {
		t.Logf("etcd member %s on %s", p.Name, p.Spec.NodeName)
	}
	claims := map[string]types.UID{}
	for i := range 3 {
		c := &corev1.PersistentVolumeClaim{}
		name := fmt.Sprintf("data-%s-%d", names.EtcdStatefulSet(), i)
		if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: name}, c); err != nil {
			t.Fatalf("etcd member %d's claim: %v", i, err)
		}
		claims[name] = c.UID
	}

	kubeconfig := downloadKubeconfig(t, ctx, vc)
	cfg := tenantConfig(t, kubeconfig)
	cfg.Timeout = 2 * time.Second // a request to a dying apiserver fails fast, as a failure
	tenant := kubernetes.NewForConfigOrDie(cfg)
	const kept = 50
	for i := range kept {
		if _, err := tenant.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kept-%d", i)}, Data: map[string]string{"i": strconv.Itoa(i)},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	p := startProbe(ctx, tenant)
	waitHA := func(t *testing.T, what string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
			sts, dep, got := &appsv1.StatefulSet{}, &appsv1.Deployment{}, &v1alpha1.VirtualCluster{}
			if host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: names.EtcdStatefulSet()}, sts) != nil ||
				host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: names.ControlPlaneDeployment()}, dep) != nil ||
				host.Get(ctx, client.ObjectKeyFromObject(vc), got) != nil {
				return false, nil
			}
			return sts.Status.ReadyReplicas == 3 && dep.Status.AvailableReplicas == 2 && dep.Status.Replicas == 2 &&
				meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady), nil
		})
		if err != nil {
			t.Fatalf("after %s, the tenant's 3 etcd members and 2 apiservers are not all back: %v", what, err)
		}
	}
	// fault runs do, which returns the pods it takes away, and waits for their replacements.
	fault := func(name string, do func(t *testing.T) []corev1.Pod) {
		t.Run(name, func(t *testing.T) {
			p.take()
			for _, gone := range do(t) {
				err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
					now := &corev1.Pod{}
					err := host.Get(ctx, client.ObjectKeyFromObject(&gone), now)
					return apierrors.IsNotFound(err) || (err == nil && now.UID != gone.UID), nil
				})
				if err != nil {
					t.Fatalf("pod %s is still there: %v", gone.Name, err)
				}
			}
			waitHA(t, name)
			time.Sleep(2 * time.Second) // a few probes on the healed tenant
			s := p.take()
			t.Logf("%s: %d requests, %d failed, longest gap %s", name, s.requests, s.failed, s.gap.Round(10*time.Millisecond))
			if s.gap > haGapBound {
				t.Errorf("the tenant did not answer for %s (bound %s); last error: %v", s.gap.Round(10*time.Millisecond), haGapBound, s.lastErr)
			}
		})
	}

	fault("an etcd member's pod is deleted", func(t *testing.T) []corev1.Pod {
		pod := etcdPods()[1]
		if err := host.Delete(ctx, &pod); err != nil {
			t.Fatal(err)
		}
		return []corev1.Pod{pod}
	})
	fault("the leading control-plane pod is deleted", func(t *testing.T) []corev1.Pod {
		// The pod whose controller-manager holds the lease the scheduler also runs under.
		lease, err := tenant.CoordinationV1().Leases("kube-system").Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil {
			t.Fatalf("the controller-manager's lease: %v", err)
		}
		pod := &corev1.Pod{}
		leader := strings.Split(*lease.Spec.HolderIdentity, "_")[0]
		if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: leader}, pod); err != nil {
			t.Fatalf("the leading control-plane pod %s: %v", leader, err)
		}
		if err := host.Delete(ctx, pod); err != nil {
			t.Fatal(err)
		}
		return []corev1.Pod{*pod}
	})
	// The other pod's controller-manager took over, and its scheduler with it.
	t.Run("a new leader's controllers and scheduler work", func(t *testing.T) {
		checkScheduled(t, ctx, tenant, "after-failover")
	})
	fault("the operator is deleted", func(t *testing.T) []corev1.Pod {
		op := killOperator(t, ctx)
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ops := &corev1.PodList{}
			if host.List(ctx, ops, client.MatchingLabels{"app.kubernetes.io/component": "operator"}) != nil {
				return false, nil
			}
			for _, o := range ops.Items {
				if o.DeletionTimestamp == nil && podutils.IsPodReady(&o) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("no operator pod came back: %v", err)
		}
		return []corev1.Pod{op}
	})
	fault("the node under an etcd member is drained", func(t *testing.T) []corev1.Pod {
		// The hardest node to lose: the one whose address the tenant's endpoint names, when
		// a member runs there.
		pods := etcdPods()
		node := pods[len(pods)-1].Spec.NodeName
		for _, p := range pods {
			if strings.Contains(vc.Status.Endpoint, "//"+p.Status.HostIP+":") {
				node = p.Spec.NodeName
			}
		}
		return drainTenant(t, ctx, cpNS, node, 20*time.Second)
	})
	p.stop()

	total := p.totals()
	t.Logf("in all: %d requests, %d failed", total.requests, total.failed)
	for name, uid := range claims {
		c := &corev1.PersistentVolumeClaim{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: name}, c); err != nil || c.UID != uid {
			t.Errorf("etcd's claim %s is not the one it started with (%v): its member lost its data", name, err)
		}
	}
	list, err := tenant.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "kept-") {
			found++
		}
	}
	if found != kept {
		t.Errorf("%d of the %d ConfigMaps written before the faults are left", found, kept)
	}
	deleteAndCheckGone(t, ctx, vc)
}

// checkScheduled creates a Deployment in the tenant and waits until its pod has been
// considered by the tenant's scheduler (scheduled, or reported unschedulable): the
// controller-manager and the scheduler both run.
func checkScheduled(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name string) {
	t.Helper()
	labels := map[string]string{"app": name}
	_, err := tenant.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		for _, c := range pods.Items[0].Status.Conditions {
			if c.Type == corev1.PodScheduled {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the tenant's controller-manager and scheduler did not make and place the Deployment's pod: %v", err)
	}
}

// drainTenant cordons a node and evicts the pods of ns (the tenant's control-plane namespace)
// from it, as kubectl drain would: through the eviction API, so the tenant's
// PodDisruptionBudgets hold (a pod a budget protects is tried again, and left where it is
// after a while). The node stays cordoned for the given time, as for a maintenance, then comes
// back. It returns the pods it evicted.
func drainTenant(t *testing.T, ctx context.Context, ns, node string, down time.Duration) []corev1.Pod {
	t.Helper()
	cordon(t, ctx, node, true)
	defer cordon(t, ctx, node, false)
	back := time.Now().Add(down)
	var evicted []corev1.Pod
	for {
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": node}); err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			err := hostCS.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name}})
			switch {
			case err == nil:
				t.Logf("evicted %s from %s", p.Name, node)
				evicted = append(evicted, p)
			case apierrors.IsTooManyRequests(err):
				held++ // a disruption budget holds it, for now
			case !apierrors.IsNotFound(err):
				t.Fatalf("evicting %s: %v", p.Name, err)
			}
		}
		if time.Now().After(back) {
			if held > 0 {
				t.Logf("%d of the tenant's pods stayed on %s: their disruption budgets did not allow more", held, node)
			}
			t.Logf("%s is back after %s", node, down)
			return evicted
		}
		time.Sleep(time.Second)
	}
}

// probe writes and reads a ConfigMap in a tenant every 200 ms and keeps count: since it started, and since the last take.
type probe struct {
	mu       sync.Mutex
	cur      probeStats
	total    probeStats
	lastOK   time.Time
	cancel   context.CancelFunc
	finished chan struct{}
}

type probeStats struct {
	requests, failed int
	gap              time.Duration // the longest time between two answers
	lastErr          error
}

func startProbe(ctx context.Context, tenant kubernetes.Interface) *probe {
	ctx, cancel := context.WithCancel(ctx)
	p := &probe{lastOK: time.Now(), cancel: cancel, finished: make(chan struct{})}
	cms := tenant.CoreV1().ConfigMaps("default")
	go func() {
		defer close(p.finished)
		for i := 0; ctx.Err() == nil; i++ {
			start := time.Now()
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}, Data: map[string]string{"n": strconv.Itoa(i)}}
			_, err := cms.Update(ctx, cm, metav1.UpdateOptions{})
			if apierrors.IsNotFound(err) {
				_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			}
			if err == nil {
				var got *corev1.ConfigMap
				got, err = cms.Get(ctx, "probe", metav1.GetOptions{})
				if err == nil && got.Data["n"] != strconv.Itoa(i) {
					err = fmt.Errorf("read %q after writing %d", got.Data["n"], i)
				}
			}
			if ctx.Err() != nil {
				return
			}
			p.record(err)
			time.Sleep(200*time.Millisecond - time.Since(start))
		}
	}()
	return p
}

func (p *probe) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, s := range []*probeStats{&p.cur, &p.total} {
		s.requests++
		if err != nil {
			s.failed++
			s.lastErr = err
		}
		s.gap = max(s.gap, now.Sub(p.lastOK))
	}
	if err == nil {
		p.lastOK = now
	}
}

// take returns the figures since the last take, and starts counting anew.
func (p *probe) take() probeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.cur
	p.cur = probeStats{}
	return s
}

// totals returns the figures since the probe started.
func (p *probe) totals() probeStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

func (p *probe) stop() {
	p.cancel()
	<-p.finished
}
