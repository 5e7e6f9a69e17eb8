package controlplane_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubeproxyconfig "k8s.io/kubernetes/pkg/proxy/apis/config"
	kubeproxyscheme "k8s.io/kubernetes/pkg/proxy/apis/config/scheme"
	kubeproxyvalidation "k8s.io/kubernetes/pkg/proxy/apis/config/validation"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

func TestTenantKubeProxy(t *testing.T) {
	s := controlplane.DefaultSettings()
	s.Image = "registry.example/kubenest:v1"
	objs, err := controlplane.TenantKubeProxy(s, "https://192.0.2.10:31443")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("its service account is bound to system:node-proxier", func(t *testing.T) {
		sa, crb := objs.ServiceAccount, objs.ClusterRoleBinding
		if sa.Namespace != "kube-system" || sa.Name != "kube-proxy" {
			t.Errorf("ServiceAccount %s/%s", sa.Namespace, sa.Name)
		}
		want := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}
		if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != "system:node-proxier" || !slices.Equal(crb.Subjects, []rbacv1.Subject{want}) {
			t.Errorf("ClusterRoleBinding %s: role %+v, subjects %+v", crb.Name, crb.RoleRef, crb.Subjects)
		}
	})

	ds := objs.DaemonSet
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	t.Run("the DaemonSet runs our kube-proxy on lent nodes only", func(t *testing.T) {
		if want := map[string]string{v1alpha1.LabelLent: "true"}; len(pod.NodeSelector) != 1 || pod.NodeSelector[v1alpha1.LabelLent] != "true" {
			t.Errorf("node selector %v, want %v", pod.NodeSelector, want)
		}
		if c.Image != s.Image || c.ImagePullPolicy != s.ImagePullPolicy {
			t.Errorf("image %s (%s), want the operator's %s", c.Image, c.ImagePullPolicy, s.Image)
		}
		wantCmd := []string{controlplane.BinaryPath, "kube-proxy",
			"--proxy-mode=iptables", "--conntrack-max-per-core=0", "--hostname-override=$(NODE_NAME)"}
		if !slices.Equal(c.Command, wantCmd) {
			t.Errorf("command %q, want %q", c.Command, wantCmd)
		}
		if len(c.Env) == 0 || c.Env[0].Name != "NODE_NAME" || c.Env[0].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("env %+v: want NODE_NAME from spec.nodeName", c.Env)
		}
		if !pod.HostNetwork || pod.ServiceAccountName != "kube-proxy" || pod.PriorityClassName != "system-node-critical" {
			t.Errorf("hostNetwork %v, service account %q, priority class %q", pod.HostNetwork, pod.ServiceAccountName, pod.PriorityClassName)
		}
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged || sc.RunAsUser == nil || *sc.RunAsUser != 0 {
			t.Errorf("security context %+v: want privileged, as root", sc)
		}
		if len(pod.Tolerations) != 1 || pod.Tolerations[0].Operator != corev1.TolerationOpExists || pod.Tolerations[0].Key != "" {
			t.Errorf("tolerations %+v: want one that tolerates every taint", pod.Tolerations)
		}
		hostPaths := map[string]string{}
		for _, v := range pod.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = v.HostPath.Path
			}
		}
		for _, m := range c.VolumeMounts {
			if p, ok := hostPaths[m.Name]; ok && p != m.MountPath {
				t.Errorf("host path %s mounted at %s", p, m.MountPath)
			}
			if m.Name == "lib-modules" && !m.ReadOnly {
				t.Errorf("/lib/modules is mounted writable")
			}
		}
		if hostPaths["xtables-lock"] != "/run/xtables.lock" || hostPaths["lib-modules"] != "/lib/modules" {
			t.Errorf("host paths %v: want /run/xtables.lock and /lib/modules", hostPaths)
		}
		if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 0 {
			t.Errorf("rolling update %+v: a surge would run two kube-proxies on a node", ru)
		}
		if !labelsMatch(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
			t.Errorf("selector %v does not select the pod template's labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
		}
	})

	t.Run("it reads nothing the tenant's admin can edit but its token and CA bundle", func(t *testing.T) {
		// What kube-proxy's own code makes of its flags, with its defaults.
		cfg := kubeProxyConfiguration(t, c.Command[2:])
		if cfg.Mode != kubeproxyconfig.ProxyModeIPTables {
			t.Errorf("mode %q, want iptables", cfg.Mode)
		}
		if cfg.ClientConnection.Kubeconfig != "" {
			t.Errorf("kubeconfig %s: a kubeconfig file can name commands to run (exec plugins)", cfg.ClientConnection.Kubeconfig)
		}
		if cfg.Linux.Conntrack.MaxPerCore == nil || *cfg.Linux.Conntrack.MaxPerCore != 0 {
			t.Errorf("conntrack maxPerCore %v: want 0, the node's table size left alone", cfg.Linux.Conntrack.MaxPerCore)
		}
		for _, v := range pod.Volumes {
			if v.HostPath == nil {
				t.Errorf("volume %s: want the two host paths only (the service-account token is added by the apiserver)", v.Name)
			}
		}
		// client-go's in-cluster configuration: the server from the pod's environment (its
		// own values come before the kubelet's Service variables), the token and CA bundle
		// from its service-account volume.
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		for name, want := range map[string]string{"KUBERNETES_SERVICE_HOST": "192.0.2.10", "KUBERNETES_SERVICE_PORT": "31443"} {
			if env[name] != want {
				t.Errorf("%s=%q, want %q", name, env[name], want)
			}
		}
	})

	t.Run("another server changes the pods", func(t *testing.T) {
		moved, err := controlplane.TenantKubeProxy(s, "https://[2001:db8::1]:6443")
		if err != nil {
			t.Fatal(err)
		}
		if equality.Semantic.DeepEqual(moved.DaemonSet.Spec.Template, ds.Spec.Template) {
			t.Errorf("the same pod template for another server")
		}
		env := moved.DaemonSet.Spec.Template.Spec.Containers[0].Env
		if env[1].Value != "2001:db8::1" || env[2].Value != "6443" {
			t.Errorf("env %+v for https://[2001:db8::1]:6443", env)
		}
		again, _ := controlplane.TenantKubeProxy(s, "https://192.0.2.10:31443")
		if !equality.Semantic.DeepEqual(again.DaemonSet, ds) {
			t.Errorf("the same inputs give another DaemonSet")
		}
	})

	t.Run("label values are valid", func(t *testing.T) {
		for _, labels := range []map[string]string{objs.ServiceAccount.Labels, objs.ClusterRoleBinding.Labels, ds.Labels, ds.Spec.Template.Labels} {
			for k, v := range labels {
				if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
					t.Errorf("label %s=%q: %s", k, v, strings.Join(errs, "; "))
				}
			}
		}
	})

	t.Run("no image, no server: errors", func(t *testing.T) {
		noImage := s
		noImage.Image = ""
		if _, err := controlplane.TenantKubeProxy(noImage, "https://192.0.2.10:31443"); err == nil {
			t.Error("no error without an image")
		}
		for _, server := range []string{"", "http://192.0.2.10:80", "https://192.0.2.10", "https://192.0.2.10:6443/path", "https://u:p@192.0.2.10:6443"} {
			if _, err := controlplane.TenantKubeProxy(s, server); err == nil {
				t.Errorf("no error for server %q", server)
			}
		}
	})
}

func TestNodeEndpoint(t *testing.T) {
	tests := []struct {
		endpoint, clusterIP, want string
		wantErr                   bool
	}{
		{endpoint: "https://192.0.2.10:31443", clusterIP: "10.96.4.2", want: "https://192.0.2.10:31443"},
		{endpoint: "https://tenant.example.com:6443", clusterIP: "10.96.4.2", want: "https://tenant.example.com:6443"},
		// The in-cluster name resolves nowhere on a node: the ClusterIP instead.
		{endpoint: "https://team-a-apiserver.tenants.svc:6443", clusterIP: "10.96.4.2", want: "https://10.96.4.2:6443"},
		{endpoint: "", clusterIP: "fd00::4:2", want: "https://[fd00::4:2]:6443"},
		{endpoint: "https://team-a-apiserver.tenants.svc:6443", clusterIP: "", wantErr: true},
		{endpoint: "", clusterIP: "None", wantErr: true},
	}
	for _, tt := range tests {
		got, err := controlplane.NodeEndpoint(tt.endpoint, tt.clusterIP)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("NodeEndpoint(%q, %q) = %q, %v; want %q (error %v)", tt.endpoint, tt.clusterIP, got, err, tt.want, tt.wantErr)
		}
	}
}

func labelsMatch(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// A kube-proxy for every node (the local host cluster's) with the pods' range.
func TestKubeProxyEveryNode(t *testing.T) {
	objs, err := controlplane.KubeProxy{
		Image: "kubenest.io/kubenest:dev", Server: "https://172.30.0.1:6443",
		ClusterCIDR: "10.244.0.0/16",
	}.Objects()
	if err != nil {
		t.Fatal(err)
	}
	if sel := objs.DaemonSet.Spec.Template.Spec.NodeSelector; len(sel) != 0 {
		t.Errorf("node selector %v, want none", sel)
	}
	cfg := kubeProxyConfiguration(t, objs.DaemonSet.Spec.Template.Spec.Containers[0].Command[2:])
	if cidrs := cfg.DetectLocal.ClusterCIDRs; !slices.Equal(cidrs, []string{"10.244.0.0/16"}) {
		t.Errorf("cluster CIDRs %v", cidrs)
	}
}

// kubeProxyConfiguration is the configuration kube-proxy's own code makes of flags: parsed,
// completed with its defaults and validated by it, then written out (--write-config-to) and
// decoded strictly.
func kubeProxyConfiguration(t *testing.T, flags []string) *kubeproxyconfig.KubeProxyConfiguration {
	t.Helper()
	t.Setenv("NODE_NAME", "node-1")
	out := filepath.Join(t.TempDir(), "config.yaml")
	o := proxyapp.NewOptions()
	fs := pflag.NewFlagSet("kube-proxy", pflag.ContinueOnError)
	o.AddFlags(fs)
	expanded := make([]string, len(flags))
	for i, f := range flags {
		expanded[i] = strings.ReplaceAll(f, "$(NODE_NAME)", "node-1")
	}
	if err := fs.Parse(append(expanded, "--write-config-to="+out)); err != nil {
		t.Fatalf("kube-proxy refuses its flags %q: %v", flags, err)
	}
	if err := o.Complete(fs); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("kube-proxy rejects its flags %q: %v", flags, err)
	}
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := kubeproxyscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decoding what kube-proxy wrote: %v\n%s", err, data)
	}
	cfg := obj.(*kubeproxyconfig.KubeProxyConfiguration)
	if errs := kubeproxyvalidation.Validate(cfg); len(errs) > 0 {
		t.Errorf("kube-proxy rejects its configuration: %v", errs.ToAggregate())
	}
	return cfg
}
