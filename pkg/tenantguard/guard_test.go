package tenantguard_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	api "k8s.io/kubernetes/pkg/apis/core"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/networking"
	psapi "k8s.io/pod-security-admission/api"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/tenantguard"
)

const image = "kubenest.io/kubenest:v1"

func newGuard(t *testing.T, level psapi.Level, pods map[string]*corev1.Pod) *tenantguard.Guard {
	t.Helper()
	g, err := tenantguard.New(tenantguard.Config{
		ServiceRanges:   []netip.Prefix{netip.MustParsePrefix("10.254.3.0/24")},
		NodePodSecurity: level,
		KubeProxyImage:  image,
		Pod: func(_ context.Context, ns, name string) (*corev1.Pod, error) {
			if p, ok := pods[ns+"/"+name]; ok {
				return p, nil
			}
			return nil, apierrors.NewNotFound(api.Resource("pods"), name)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func attrs(obj, old runtime.Object, resource, subresource, ns, name string, op admission.Operation) admission.Attributes {
	gvr := api.SchemeGroupVersion.WithResource(resource)
	if resource == "servicecidrs" {
		gvr = networking.SchemeGroupVersion.WithResource(resource)
	}
	return admission.NewAttributesRecord(obj, old, gvr.GroupVersion().WithKind("X"), ns, name, gvr, subresource, op, nil, false,
		&user.DefaultInfo{Name: "tenant-admin", Groups: []string{"system:masters"}})
}

func validate(t *testing.T, g *tenantguard.Guard, a admission.Attributes) error {
	t.Helper()
	if !g.Handles(a.GetOperation()) {
		t.Fatalf("the guard does not handle %s", a.GetOperation())
	}
	return g.Validate(context.Background(), a, nil)
}

func wantRefused(t *testing.T, what string, err error, msg ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: %v, want refused", what, err)
		return
	}
	for _, m := range append(msg, tenantguard.Name) {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: %q does not say %q", what, err, m)
		}
	}
}

func TestServices(t *testing.T) {
	g := newGuard(t, psapi.LevelBaseline, nil)
	svc := func(ips ...string) *api.Service {
		return &api.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec: api.ServiceSpec{Type: api.ServiceTypeClusterIP, ClusterIP: ips[0], ClusterIPs: ips}}
	}
	for _, ip := range []string{"10.254.3.77", "None", ""} {
		if err := validate(t, g, attrs(svc(ip), nil, "services", "", "default", "web", admission.Create)); err != nil {
			t.Errorf("ClusterIP %q: %v", ip, err)
		}
	}
	for _, ip := range []string{"10.96.0.88", "10.254.0.77", "172.30.0.1"} {
		wantRefused(t, "ClusterIP "+ip, validate(t, g, attrs(svc(ip), nil, "services", "", "default", "web", admission.Create)),
			"spec.clusterIPs[0]", ip, "outside this tenant's Service range 10.254.3.0/24")
	}
	external := svc("10.254.3.8")
	external.Spec.ExternalIPs = []string{"172.30.0.1"}
	wantRefused(t, "external IPs", validate(t, g, attrs(external, nil, "services", "", "default", "web", admission.Create)), "spec.externalIPs")
	// A Service admitted before keeps working; only a change to its external IPs is checked.
	if err := validate(t, g, attrs(external, external.DeepCopy(), "services", "", "default", "web", admission.Update)); err != nil {
		t.Errorf("an update that leaves external IPs as they were: %v", err)
	}
	// Status updates are the endpoint and load-balancer controllers'; not checked here.
	if err := validate(t, g, attrs(svc("10.96.0.1"), nil, "services", "status", "default", "web", admission.Update)); err != nil {
		t.Errorf("status: %v", err)
	}
}

func TestServiceCIDRs(t *testing.T) {
	g := newGuard(t, psapi.LevelBaseline, nil)
	cidr := func(c ...string) *networking.ServiceCIDR {
		return &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "extra"}, Spec: networking.ServiceCIDRSpec{CIDRs: c}}
	}
	for _, c := range []string{"10.254.3.0/24", "10.254.3.128/25"} {
		if err := validate(t, g, attrs(cidr(c), nil, "servicecidrs", "", "", "extra", admission.Create)); err != nil {
			t.Errorf("%s: %v", c, err)
		}
	}
	for _, c := range []string{"10.96.0.0/16", "10.254.0.0/16", "10.254.0.0/24", "0.0.0.0/0"} {
		wantRefused(t, c, validate(t, g, attrs(cidr(c), nil, "servicecidrs", "", "", "extra", admission.Create)), "spec.cidrs[0]", c)
	}
}

// rootPod is a pod a hostile tenant admin would use to become root on a lent node.
func rootPod(node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName: node, HostPID: true,
			Containers: []corev1.Container{{Name: "sh", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeMounts: []corev1.VolumeMount{{Name: "host", MountPath: "/h"}}}},
			Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		},
	}
}

func internal(t *testing.T, p *corev1.Pod) *api.Pod {
	t.Helper()
	out := &api.Pod{}
	if err := apiv1.Convert_v1_Pod_To_core_Pod(p, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPodsOnNodes(t *testing.T) {
	root := rootPod("")
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	pods := map[string]*corev1.Pod{"default/root": root, "default/plain": plain}
	g := newGuard(t, psapi.LevelBaseline, pods)

	t.Run("created on a node", func(t *testing.T) {
		wantRefused(t, "a privileged pod named to a lent node", validate(t, g, attrs(internal(t, rootPod("lent-1")), nil, "pods", "", "default", "root", admission.Create)),
			`Pod Security "baseline"`, "privileged", "hostPID", "hostPath volumes", "node lent-1")
		if err := validate(t, g, attrs(internal(t, rootPod("")), nil, "pods", "", "default", "root", admission.Create)); err != nil {
			t.Errorf("an unbound pod is not checked until it is bound: %v", err)
		}
	})
	t.Run("bound by the scheduler", func(t *testing.T) {
		bind := func(name string) *api.Binding {
			return &api.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Target: api.ObjectReference{Kind: "Node", Name: "lent-1"}}
		}
		wantRefused(t, "binding a privileged pod", validate(t, g, attrs(bind("root"), nil, "pods", "binding", "default", "root", admission.Create)),
			"privileged", "node lent-1")
		if err := validate(t, g, attrs(bind("plain"), nil, "pods", "binding", "default", "plain", admission.Create)); err != nil {
			t.Errorf("binding a baseline pod: %v", err)
		}
	})
	t.Run("ephemeral containers and image changes of a bound pod", func(t *testing.T) {
		bound := plain.DeepCopy()
		bound.Spec.NodeName = "lent-1"
		debug := bound.DeepCopy()
		debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		wantRefused(t, "a privileged ephemeral container", validate(t, g, attrs(internal(t, debug), internal(t, bound), "pods", "ephemeralcontainers", "default", "plain", admission.Update)), "privileged")
		relabelled := bound.DeepCopy()
		relabelled.Labels = map[string]string{"a": "b"}
		if err := validate(t, g, attrs(internal(t, relabelled), internal(t, bound), "pods", "", "default", "plain", admission.Update)); err != nil {
			t.Errorf("relabelling a bound pod: %v", err)
		}
	})
	t.Run("privileged granted", func(t *testing.T) {
		granted := newGuard(t, psapi.LevelPrivileged, pods)
		if err := validate(t, granted, attrs(internal(t, rootPod("lent-1")), nil, "pods", "", "default", "root", admission.Create)); err != nil {
			t.Errorf("with privileged granted: %v", err)
		}
	})
}

// The operator's kube-proxy may be privileged on lent nodes, exactly as the operator builds it.
func TestKubeProxyExemption(t *testing.T) {
	g := newGuard(t, psapi.LevelBaseline, nil)
	objs, err := controlplane.TenantKubeProxy(controlplane.Settings{Image: image}, "https://192.0.2.10:31443", []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	proxy := func(mutate func(*corev1.Pod)) *api.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-x1", Namespace: "kube-system"},
			Spec:       *objs.DaemonSet.Spec.Template.Spec.DeepCopy(),
		}
		p.Spec.NodeName = "lent-1"
		// What the service-account admission plugin adds.
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-api-access-abcde", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
					FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
			}}}})
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "kube-api-access-abcde", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true})
		if mutate != nil {
			mutate(p)
		}
		return internal(t, p)
	}
	if err := validate(t, g, attrs(proxy(nil), nil, "pods", "", "kube-system", "kube-proxy-x1", admission.Create)); err != nil {
		t.Fatalf("the operator's kube-proxy: %v", err)
	}
	for name, mutate := range map[string]func(*corev1.Pod){
		"another image":      func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/shell:1" },
		"another command":    func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "cat /h/etc/shadow"} },
		"arguments added":    func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"--proxy-mode=ipvs"} },
		"another namespace":  func(p *corev1.Pod) { p.Namespace = "default" },
		"hostPID":            func(p *corev1.Pod) { p.Spec.HostPID = true },
		"the host's root":    func(p *corev1.Pod) { p.Spec.Volumes[1].HostPath.Path = "/" },
		"a second container": func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, rootPod("").Spec.Containers[0]) },
		"an exec hook": func(p *corev1.Pod) {
			p.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PostStart: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{Command: []string{"x"}}}}
		},
		"a writable mount": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[2].ReadOnly = false },
		"environment added": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/x"})
		},
		"an init container":   func(p *corev1.Pod) { p.Spec.InitContainers = rootPod("").Spec.Containers },
		"a projected secret":  func(p *corev1.Pod) { p.Spec.Volumes[3].Projected.Sources[1].ConfigMap.Name = "other" },
		"subPath of a volume": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[1].SubPath = "x" },
	} {
		wantRefused(t, "kube-proxy with "+name, validate(t, g, attrs(proxy(mutate), nil, "pods", "", "kube-system", "kube-proxy-x1", admission.Create)), "privileged")
	}
	// Swapping the image of the running pod is a change that is checked.
	old := proxy(nil)
	swapped := proxy(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/shell:1" })
	wantRefused(t, "the kube-proxy pod's image swapped", validate(t, g, attrs(swapped, old, "pods", "", "kube-system", "kube-proxy-x1", admission.Update)), "privileged")
}
