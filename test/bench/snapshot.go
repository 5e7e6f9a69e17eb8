package main

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// snapshotRestore fills a tenant with ConfigMaps and Deployments, then times a
// VirtualClusterSnapshot of it (create → Succeeded) and a new tenant restored from it
// (create → Ready, and → every object listed through its kubeconfig).
func snapshotRestore(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("snapshot", flag.ExitOnError)
	configMaps := fs.Int("configmaps", 1000, "ConfigMaps in the tenant")
	deployments := fs.Int("deployments", 100, "Deployments in the tenant (no node runs their pods)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long each step may take")
	_ = fs.Parse(args)
	ns, cleanup, err := namespace(ctx, e, "bench-snapshot")
	if err != nil {
		return nil, err
	}
	defer cleanup()

	source := benchVC(ns, "source")
	tenant, err := readyTenant(ctx, e, source, *timeout)
	if err != nil {
		return nil, err
	}
	fmt.Printf("filling the tenant: %d ConfigMaps, %d Deployments...\n", *configMaps, *deployments)
	if err := fill(ctx, tenant, *configMaps, *deployments); err != nil {
		return nil, err
	}

	snap := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "filled", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: source.Name}}
	start := time.Now()
	if err := e.host.Create(ctx, snap); err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.host.Get(ctx, client.ObjectKeyFromObject(snap), snap); err != nil {
			return false, nil
		}
		if snap.Status.Phase == v1alpha1.SnapshotFailed {
			return false, fmt.Errorf("snapshot failed: %+v", snap.Status.Conditions)
		}
		return snap.Status.Phase == v1alpha1.SnapshotSucceeded, nil
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	taken := time.Since(start)
	fmt.Printf("  snapshot taken in %.1fs, %s\n", taken.Seconds(), snap.Status.Size)

	restored := benchVC(ns, "restored")
	restored.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: snap.Name}
	start = time.Now()
	copyTenant, err := readyTenant(ctx, e, restored, *timeout)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	ready := time.Since(start)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
		cms, err := copyTenant.CoreV1().ConfigMaps("bench").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		deps, err := copyTenant.AppsV1().Deployments("bench").List(ctx, metav1.ListOptions{})
		return err == nil && len(cms.Items) >= *configMaps && len(deps.Items) == *deployments, nil
	})
	if err != nil {
		return nil, fmt.Errorf("the restored tenant does not list every object: %w", err)
	}
	listed := time.Since(start)
	fmt.Printf("  restored tenant Ready in %.1fs, every object listed at %.1fs\n", ready.Seconds(), listed.Seconds())

	objects := fmt.Sprintf("a tenant (default storage) holding %d ConfigMaps and %d Deployments in one namespace", *configMaps, *deployments)
	return []Figure{
		{"snapshot: create→Succeeded", taken.Seconds(), "s", "VirtualClusterSnapshot of " + objects + ": from the create call to phase Succeeded (its volume claim provisioned, its job's pod run, the snapshot streamed from etcd)"},
		{"snapshot: size", float64(snap.Status.SizeBytes) / mib, "MiB", "status.sizeBytes of that snapshot"},
		{"restore: create→Ready", ready.Seconds(), "s", "a new VirtualCluster with spec.restore of that snapshot: from the create call to Ready and a first answer from its kubeconfig"},
		{"restore: create→every object listed", listed.Seconds(), "s", "the same, until a LIST of the namespace's ConfigMaps and Deployments through the new tenant's kubeconfig returns them all"},
	}, nil
}

// fill creates ConfigMaps and Deployments in namespace "bench" of a tenant, eight at a time.
func fill(ctx context.Context, tenant kubernetes.Interface, configMaps, deployments int) error {
	if _, err := tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	work := make(chan func() error)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for f := range work {
				if err := f(); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range configMaps {
		work <- func() error {
			_, err := tenant.CoreV1().ConfigMaps("bench").Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)},
				Data:       map[string]string{"value": fmt.Sprintf("%0512d", i)},
			}, metav1.CreateOptions{})
			return err
		}
	}
	for i := range deployments {
		labels := map[string]string{"app": fmt.Sprintf("app-%d", i)}
		work <- func() error {
			_, err := tenant.AppsV1().Deployments("bench").Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i)},
				Spec: appsv1.DeploymentSpec{
					Replicas: ptr.To[int32](1),
					Selector: &metav1.LabelSelector{MatchLabels: labels},
					Template: corev1.PodTemplateSpec{
						ObjectMeta: metav1.ObjectMeta{Labels: labels},
						Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "kubenest.io/busybox:1.35", Command: []string{"sleep", "3600"}}}},
					},
				},
			}, metav1.CreateOptions{})
			return err
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
