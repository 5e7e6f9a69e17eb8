package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/union"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	psapi "k8s.io/pod-security-admission/api"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/tenantguard"
)

// guardOptions are the flags of KubeNest's tenant guard (package tenantguard); the operator
// owns them, so a VirtualCluster's extraArgs cannot change them.
type guardOptions struct {
	nodePodSecurity string
	kubeProxyImage  string
}

func (o *guardOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.nodePodSecurity, "kubenest-node-pod-security", o.nodePodSecurity,
		"Pod Security level every pod bound to a node must meet, whatever its namespace's labels say: baseline, or privileged where the platform grants it (KubeNest).")
	fs.StringVar(&o.kubeProxyImage, "kubenest-kube-proxy-image", o.kubeProxyImage,
		"Image of the operator's kube-proxy DaemonSet: its pods, exactly as the operator builds them, may be privileged on lent nodes under baseline (KubeNest).")
}

// install puts the guard at the end of the kube-apiserver's admission chain, after every
// mutation, and its authorizer ahead of every other, where no admission or authorization
// flag can remove them.
func (o guardOptions) install(config *apiserver.Config, opts options.CompletedOptions) error {
	var ranges []netip.Prefix
	for _, r := range []net.IPNet{opts.PrimaryServiceClusterIPRange, opts.SecondaryServiceClusterIPRange} {
		if r.IP == nil {
			continue
		}
		p, err := netip.ParsePrefix(r.String())
		if err != nil {
			return fmt.Errorf("service range %s: %w", r.String(), err)
		}
		ranges = append(ranges, p)
	}
	generic := config.KubeAPIs.ControlPlane.Generic
	client, err := kubernetes.NewForConfig(generic.LoopbackClientConfig)
	if err != nil {
		return err
	}
	guard, err := tenantguard.New(tenantguard.Config{
		ServiceRanges:   ranges,
		NodePodSecurity: psapi.Level(o.nodePodSecurity),
		KubeProxyImage:  o.kubeProxyImage,
		Pod: func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
			return client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		Claim: func(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
			return client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		},
		Volume: func(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
			return client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		return fmt.Errorf("--kubenest-node-pod-security: %w", err)
	}
	generic.AdmissionControl = admission.NewChainHandler(generic.AdmissionControl, guard)
	generic.Authorization.Authorizer = union.New(tenantguard.NodeProxyAuthorizer{
		Level: psapi.Level(o.nodePodSecurity), APIServerUser: controlplane.APIServerKubeletClient,
	}, generic.Authorization.Authorizer)
	klog.InfoS("KubeNest tenant guard installed", "serviceRanges", ranges, "nodePodSecurity", o.nodePodSecurity, "kubeProxyImage", o.kubeProxyImage)
	return nil
}
