package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// installKubeProxy runs kube-proxy on every node as production hosts do: a kube-system
// DaemonSet, here from the KubeNest image ("nest-controlplane kube-proxy", iptables mode, the
// builder the operator uses for tenants). Lending a node removes its pod with the host's other
// pods, and the tenant's kube-proxy takes over the node until it comes back; never two on one
// node. It reaches the apiserver at its address on the bridge, not through a Service: it is
// what makes Services work.
func (c config) installKubeProxy(ctx context.Context, nodes int) error {
	objs, err := controlplane.KubeProxy{
		Image:           c.kubeProxyImage,
		ImagePullPolicy: corev1.PullNever,
		Server:          fmt.Sprintf("https://%s:%d", bridgeIP, apiPort),
		ClusterCIDR:     podCIDR,
		Labels:          map[string]string{"app.kubernetes.io/managed-by": "kubenest-local"},
	}.Objects()
	if err != nil {
		return err
	}
	client, err := c.client()
	if err != nil {
		return err
	}
	ns := controlplane.KubeProxyNamespace
	create := []func() error{
		func() error {
			_, err := client.CoreV1().ServiceAccounts(ns).Create(ctx, objs.ServiceAccount, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.RbacV1().ClusterRoleBindings().Create(ctx, objs.ClusterRoleBinding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := client.AppsV1().DaemonSets(ns).Create(ctx, objs.DaemonSet, metav1.CreateOptions{})
			return err
		},
	}
	for _, f := range create {
		if err := f(); err != nil {
			return fmt.Errorf("creating kube-proxy's objects: %w", err)
		}
	}
	ds := &appsv1.DaemonSet{}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.AppsV1().DaemonSets(ns).Get(ctx, objs.DaemonSet.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ds = got
		return int(got.Status.NumberReady) == nodes && got.Status.DesiredNumberScheduled == got.Status.NumberReady, nil
	})
	if err != nil {
		return fmt.Errorf("kube-proxy ready on %d of %d nodes: %w", ds.Status.NumberReady, nodes, err)
	}
	return nil
}
