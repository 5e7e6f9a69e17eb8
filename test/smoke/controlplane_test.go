// Package smoke runs a tenant control plane as local processes, from exactly the certificates,
// kubeconfigs and flags the operator generates, and uses it: the tenant's controller-manager
// must turn a Deployment into a ReplicaSet and pods, and the scheduler must lead.
package smoke

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

func TestControlPlaneProcesses(t *testing.T) {
	bin := testtenant.Binary(t)
	vc := testtenant.VirtualCluster("smoke", "6b1f7a52-0000-4000-8000-000000000001")
	// The operator's material (authorities, leaves, the Secrets the pods mount) and the admin
	// kubeconfig, as the operator writes it, for this machine's endpoint.
	tenant, admin := testtenant.RunStandalone(t, bin, vc)
	cfg, err := clientcmd.RESTConfigFromKubeConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := tenant.WaitReady(ctx, cfg); err != nil {
		t.Fatalf("tenant apiserver not ready: %v", err)
	}
	readyAfter := time.Since(tenant.Started)

	// Use the tenant as a tenant would.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	_, err = client.AppsV1().Deployments("team-a").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		rs, err := client.AppsV1().ReplicaSets("team-a").List(ctx, metav1.ListOptions{})
		if err != nil || len(rs.Items) == 0 {
			return false, nil
		}
		pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("the tenant's controller-manager did not create the ReplicaSet and its pods: %v\ncontroller-manager:\n%s", err, tenant.Processes[2].Tail())
	}
	// The scheduler is up and leading; with no nodes the pods stay Pending.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the tenant's scheduler holds no lease: %v\nscheduler:\n%s", err, tenant.Processes[3].Tail())
	}

	var total int64
	for _, p := range tenant.Processes {
		rss := p.RSSKiB()
		total += rss
		t.Logf("RSS %-18s %4d MiB", p.Name, rss/1024)
	}
	t.Logf("RSS total              %4d MiB", total/1024)
	t.Logf("process start to /readyz: %s", readyAfter.Round(10*time.Millisecond))
}
