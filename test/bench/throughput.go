package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	"k8s.io/utils/ptr"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// podRun is how one Deployment of n pods came up: from its creation to every pod Running, and
// each pod's own time from appearing to Running, as seen by a watch.
type podRun struct {
	total   time.Duration
	perPod  []time.Duration
	pods    int
	running int
}

// runDeployment creates a Deployment of n sleeping pods in namespace ns of a cluster and
// measures it until every pod is Running or timeout passes; then it deletes the Deployment.
func runDeployment(ctx context.Context, c kubernetes.Interface, ns string, n int32, image string, timeout time.Duration) (podRun, error) {
	labels := map[string]string{"app": "bench"}
	var mu sync.Mutex
	seen, runningAt := map[string]time.Time{}, map[string]time.Time{}
	observe := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[p.Name]; !ok {
			seen[p.Name] = now
		}
		if _, ok := runningAt[p.Name]; !ok && p.Status.Phase == corev1.PodRunning {
			runningAt[p.Name] = now
		}
	}
	// An informer, not a bare watch: it re-lists and re-watches when the server ends a watch.
	informers := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "app=bench" }))
	podInformer := informers.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	}); err != nil {
		return podRun{}, err
	}
	stop := make(chan struct{})
	defer close(stop)
	informers.Start(stop)
	informers.WaitForCacheSync(stop)

	start := time.Now()
	_, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{
						Name: "sleep", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
						Resources: corev1.ResourceRequirements{},
					}},
				},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return podRun{}, err
	}
	defer func() {
		_ = c.AppsV1().Deployments(ns).Delete(context.Background(), "bench", metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
		_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=bench"})
			return err == nil && len(pods.Items) == 0, nil
		})
	}()

	var run podRun
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		run.pods, run.running = len(seen), len(runningAt)
		return len(runningAt) >= int(n), nil
	})
	run.total = time.Since(start)
	mu.Lock()
	for name, r := range runningAt {
		run.perPod = append(run.perPod, r.Sub(seen[name]))
	}
	mu.Unlock()
	slices.Sort(run.perPod)
	if err != nil {
		return run, fmt.Errorf("%d of %d pods Running after %s", run.running, n, timeout)
	}
	return run, nil
}

// percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

// throughput creates N pods through a tenant's shared node, then N pods directly in the host,
// in the same run, and compares.
func throughput(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("throughput", flag.ExitOnError)
	pods := fs.Int("pods", 200, "pods per Deployment (try 1000)")
	timeout := fs.Duration("timeout", 15*time.Minute, "how long one Deployment may take to be all Running, and the nodes to finish tearing the pods down")
	_ = fs.Parse(args)

	tenant, cleanup, err := sharedTenant(ctx, e, "bench-throughput", *pods)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	direct, cleanupNS, err := namespace(ctx, e, "bench-direct")
	if err != nil {
		return nil, err
	}
	defer cleanupNS()

	fmt.Printf("creating %d pods through the tenant's shared node...\n", *pods)
	viaTenant, err := runDeployment(ctx, tenant, "default", int32(*pods), e.image, *timeout)
	if err != nil {
		return nil, fmt.Errorf("through the tenant: %w", err)
	}
	fmt.Printf("creating %d pods directly in the host...\n", *pods)
	viaHost, err := runDeployment(ctx, e.hostCS, direct, int32(*pods), e.image, *timeout)
	if err != nil {
		return nil, fmt.Errorf("directly: %w", err)
	}
	// The pods' objects are gone; the nodes are not done with them yet. What runs next (make
	// bench's create after the others) measures the host, not this run's tail.
	fmt.Println("waiting for the host's nodes to finish tearing the pods down...")
	settled, err := nodesSettled(ctx, e.hostCS, *timeout)
	if err != nil {
		return nil, err
	}
	n := fmt.Sprint(*pods)
	method := "a Deployment of " + n + " sleeping busybox pods; times from Deployment creation, per pod from its first watch event to Running"
	return []Figure{
		{"host's nodes done with the " + fmt.Sprint(2**pods) + " pods after their objects are gone", seconds(settled), "s",
			"from the last pod object's deletion until no node runs a pod sandbox more than the host's API has pods on it (each kubelet's kubelet_running_pods through the node proxy)"},
		{"clustertree: " + n + " pods all Running", seconds(viaTenant.total), "s", method + ", in the tenant"},
		{"direct: " + n + " pods all Running", seconds(viaHost.total), "s", method + ", in the host"},
		{"all Running, tenant/direct", viaTenant.total.Seconds() / viaHost.total.Seconds(), "ratio", "same run"},
		{"clustertree: per-pod create→Running p50", seconds(percentile(viaTenant.perPod, 0.5)), "s", method},
		{"clustertree: per-pod create→Running p99", seconds(percentile(viaTenant.perPod, 0.99)), "s", method},
		{"direct: per-pod create→Running p50", seconds(percentile(viaHost.perPod, 0.5)), "s", method},
		{"direct: per-pod create→Running p99", seconds(percentile(viaHost.perPod, 0.99)), "s", method},
		{"per-pod p50, tenant/direct", percentile(viaTenant.perPod, 0.5).Seconds() / percentile(viaHost.perPod, 0.5).Seconds(), "ratio", "same run"},
		{"per-pod p99, tenant/direct", percentile(viaTenant.perPod, 0.99).Seconds() / percentile(viaHost.perPod, 0.99).Seconds(), "ratio", "same run"},
	}, nil
}

// nodesSettled waits until every Ready node of the host runs no more pod sandboxes than the
// host's API has pods on it that have not ended, and says how long that took. A kubelet stops
// and removes the sandboxes of deleted pods well after their objects are gone (minutes, after
// a few hundred on this machine), and a pod started meanwhile waits behind that work.
func nodesSettled(ctx context.Context, cs kubernetes.Interface, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var behind []string
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		live := map[string]int{}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Spec.NodeName != "" && !podutil.IsPodTerminal(p) {
				live[p.Spec.NodeName]++
			}
		}
		behind = nil
		for _, node := range nodes.Items {
			if !nodeReady(&node) {
				continue
			}
			running, err := runningSandboxes(ctx, cs, node.Name)
			if err != nil {
				return false, nil
			}
			if running > live[node.Name] {
				behind = append(behind, fmt.Sprintf("%s: %d sandboxes for %d pods", node.Name, running, live[node.Name]))
			}
		}
		return len(behind) == 0, nil
	})
	if err != nil {
		return time.Since(start), fmt.Errorf("the host's nodes still tearing pods down after %s (%s): %w", timeout, strings.Join(behind, ", "), err)
	}
	return time.Since(start), nil
}

// runningSandboxes reads the kubelet's kubelet_running_pods gauge: pods with a running sandbox.
func runningSandboxes(ctx context.Context, cs kubernetes.Interface, node string) (int, error) {
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, fmt.Errorf("node %s: reading the kubelet's metrics: %w", node, err)
	}
	gauge := families["kubelet_running_pods"].GetMetric()
	if len(gauge) == 0 {
		return 0, fmt.Errorf("node %s: no kubelet_running_pods in the kubelet's metrics", node)
	}
	return int(gauge[0].GetGauge().GetValue()), nil
}
