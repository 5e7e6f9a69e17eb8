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
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"

	api "k8s.io/kubernetes/pkg/apis/core"
	apiv1 "k8s.io/kubernetes/pkg/apis/core/v1"
	"k8s.io/kubernetes/pkg/apis/networking"
	psapi "k8s.io/pod-security-admission/api"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/tenantguard"
)

const image = "kubenest.io/kubenest:v1"

// The claims and volumes newGuard's guard reads: "default/host-data" bound to a hostPath
// volume (made while privileged pods were granted), "default/data" to a CSI one.
var (
	claims = map[string]*corev1.PersistentVolumeClaim{
		"default/host-data": {ObjectMeta: metav1.ObjectMeta{Name: "host-data", Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "host-root"}},
		"default/data":      {ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "default"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "disk-1"}},
	}
	volumes = map[string]*corev1.PersistentVolume{
		"host-root": {ObjectMeta: metav1.ObjectMeta{Name: "host-root"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
		"disk-1": {ObjectMeta: metav1.ObjectMeta{Name: "disk-1"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}}},
	}
)

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
		Claim: func(_ context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
			if c, ok := claims[ns+"/"+name]; ok {
				return c, nil
			}
			return nil, apierrors.NewNotFound(api.Resource("persistentvolumeclaims"), name)
		},
		Volume: func(_ context.Context, name string) (*corev1.PersistentVolume, error) {
			if v, ok := volumes[name]; ok {
				return v, nil
			}
			return nil, apierrors.NewNotFound(api.Resource("persistentvolumes"), name)
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
		// Unbound too: a binding commits to the pod as stored when it lands, which a change
		// racing it may have made after the guard read it.
		wantRefused(t, "a privileged pod not bound yet", validate(t, g, attrs(internal(t, rootPod("")), nil, "pods", "", "default", "root", admission.Create)),
			"privileged", "on this cluster's nodes")
		unbound := plain.DeepCopy()
		swapped := unbound.DeepCopy()
		swapped.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		wantRefused(t, "an unbound pod made privileged while its binding is on its way", validate(t, g, attrs(internal(t, swapped), internal(t, unbound), "pods", "", "default", "plain", admission.Update)),
			"privileged")
		if err := validate(t, g, attrs(internal(t, plain), nil, "pods", "", "default", "plain", admission.Create)); err != nil {
			t.Errorf("a baseline pod: %v", err)
		}
	})
	t.Run("volumes the node mounts from its own devices, drivers or network identity", func(t *testing.T) {
		for name, src := range map[string]corev1.VolumeSource{
			"fc":         {FC: &corev1.FCVolumeSource{WWIDs: []string{"0Google_PersistentDisk_persistent-disk-0-part1"}, FSType: "ext4"}},
			"flexVolume": {FlexVolume: &corev1.FlexVolumeSource{Driver: "example.com/exec"}},
			"iscsi":      {ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:disk", Lun: 0}},
			"gitRepo":    {GitRepo: &corev1.GitRepoVolumeSource{Repository: "https://example.com/r.git"}},
			"nfs":        {NFS: &corev1.NFSVolumeSource{Server: "10.0.0.2", Path: "/exports"}},
		} {
			p := plain.DeepCopy()
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: src}}
			wantRefused(t, "a pod with an inline "+name+" volume", validate(t, g, attrs(internal(t, p), nil, "pods", "", "default", "plain", admission.Create)),
				"spec.volumes[0]."+name)
		}
		ok := plain.DeepCopy()
		ok.Spec.Volumes = []corev1.Volume{{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
		if err := validate(t, g, attrs(internal(t, ok), nil, "pods", "", "default", "plain", admission.Create)); err != nil {
			t.Errorf("configMap, emptyDir and claim volumes: %v", err)
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
		// POST /api/v1/namespaces/default/bindings, the older form of the same.
		wantRefused(t, "binding a privileged pod through the bindings resource", validate(t, g, attrs(bind("root"), nil, "bindings", "", "default", "root", admission.Create)),
			"privileged", "node lent-1")
		if err := validate(t, g, attrs(bind("plain"), nil, "bindings", "", "default", "plain", admission.Create)); err != nil {
			t.Errorf("binding a baseline pod through the bindings resource: %v", err)
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
	t.Run("a claim bound to a volume of the node's own, made while privileged pods were granted", func(t *testing.T) {
		claimPod := func(name, claim string) *corev1.Pod {
			p := plain.DeepCopy()
			p.Name = name
			p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
			return p
		}
		podsByName := map[string]*corev1.Pod{"default/thief": claimPod("thief", "host-data"), "default/keeper": claimPod("keeper", "data")}
		g := newGuard(t, psapi.LevelBaseline, podsByName)
		bind := func(name string) *api.Binding {
			return &api.Binding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Target: api.ObjectReference{Kind: "Node", Name: "lent-1"}}
		}
		wantRefused(t, "binding a pod whose claim is bound to a hostPath volume", validate(t, g, attrs(bind("thief"), nil, "pods", "binding", "default", "thief", admission.Create)),
			"claim host-data", "PersistentVolume host-root", "hostPath", "node lent-1")
		named := claimPod("thief", "host-data")
		named.Spec.NodeName = "lent-1"
		wantRefused(t, "creating it on the node", validate(t, g, attrs(internal(t, named), nil, "pods", "", "default", "thief", admission.Create)), "hostPath")
		if err := validate(t, g, attrs(bind("keeper"), nil, "pods", "binding", "default", "keeper", admission.Create)); err != nil {
			t.Errorf("binding a pod whose claim is bound to a CSI volume: %v", err)
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
	objs, err := controlplane.TenantKubeProxy(controlplane.Settings{Image: image}, "https://192.0.2.10:31443")
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
	// The tenant may point its own kube-proxy at a server of its own: rules for that node's traffic.
	elsewhere := proxy(func(p *corev1.Pod) {
		p.Spec.Containers[0].Env[1].Value, p.Spec.Containers[0].Env[2].Value = "198.51.100.7", "443"
	})
	if err := validate(t, g, attrs(elsewhere, nil, "pods", "", "kube-system", "kube-proxy-x1", admission.Create)); err != nil {
		t.Errorf("the operator's kube-proxy towards another server: %v", err)
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
		"a writable mount": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[1].ReadOnly = false },
		"environment added": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "LD_PRELOAD", Value: "/x"})
		},
		"an init container":  func(p *corev1.Pod) { p.Spec.InitContainers = rootPod("").Spec.Containers },
		"a projected secret": func(p *corev1.Pod) { p.Spec.Volumes[2].Projected.Sources[1].ConfigMap.Name = "other" },
		"a ConfigMap of files mounted": func(p *corev1.Pod) {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}})
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy", ReadOnly: true})
		},
		"the server from a ConfigMap": func(p *corev1.Pod) {
			p.Spec.Containers[0].Env[1] = corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}, Key: "host"}}}
		},
		"subPath of a volume": func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[1].SubPath = "x" },
	} {
		wantRefused(t, "kube-proxy with "+name, validate(t, g, attrs(proxy(mutate), nil, "pods", "", "kube-system", "kube-proxy-x1", admission.Create)), "privileged")
	}
	// Swapping the image of the running pod is a change that is checked.
	old := proxy(nil)
	swapped := proxy(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "evil.example/shell:1" })
	wantRefused(t, "the kube-proxy pod's image swapped", validate(t, g, attrs(swapped, old, "pods", "", "kube-system", "kube-proxy-x1", admission.Update)), "privileged")
}

func TestPersistentVolumes(t *testing.T) {
	g := newGuard(t, psapi.LevelBaseline, nil)
	pv := func(src api.PersistentVolumeSource) *api.PersistentVolume {
		return &api.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"}, Spec: api.PersistentVolumeSpec{PersistentVolumeSource: src}}
	}
	for name, src := range map[string]api.PersistentVolumeSource{
		"hostPath":   {HostPath: &api.HostPathVolumeSource{Path: "/"}},
		"local":      {Local: &api.LocalVolumeSource{Path: "/dev/sda"}},
		"flexVolume": {FlexVolume: &api.FlexPersistentVolumeSource{Driver: "x/y"}},
		"fc":         {FC: &api.FCVolumeSource{WWIDs: []string{"w"}}},
		"iscsi":      {ISCSI: &api.ISCSIPersistentVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:d"}},
		"nfs":        {NFS: &api.NFSVolumeSource{Server: "10.0.0.2", Path: "/exports"}},
	} {
		wantRefused(t, name, validate(t, g, attrs(pv(src), nil, "persistentvolumes", "", "", "pv", admission.Create)), "spec."+name, `Pod Security "baseline"`)
	}
	csi := pv(api.PersistentVolumeSource{CSI: &api.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}})
	if err := validate(t, g, attrs(csi, nil, "persistentvolumes", "", "", "pv", admission.Create)); err != nil {
		t.Errorf("a CSI volume: %v", err)
	}
	// One admitted while privileged pods were granted keeps being updated by its controllers.
	host := pv(api.PersistentVolumeSource{HostPath: &api.HostPathVolumeSource{Path: "/data"}})
	bound := host.DeepCopy()
	bound.Spec.ClaimRef = &api.ObjectReference{Namespace: "default", Name: "claim"}
	if err := validate(t, g, attrs(bound, host, "persistentvolumes", "", "", "pv", admission.Update)); err != nil {
		t.Errorf("binding a volume admitted before: %v", err)
	}
	granted := newGuard(t, psapi.LevelPrivileged, nil)
	if err := validate(t, granted, attrs(host, nil, "persistentvolumes", "", "", "pv", admission.Create)); err != nil {
		t.Errorf("a hostPath volume with privileged granted: %v", err)
	}
}

// The kubelet's API runs commands in any container: none into the privileged kube-proxy under
// baseline, by any way; into other pods through pods/exec as before.
func TestKubeletAPI(t *testing.T) {
	objs, err := controlplane.TenantKubeProxy(controlplane.Settings{Image: image}, "https://192.0.2.10:31443")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-x1", Namespace: "kube-system"}, Spec: *objs.DaemonSet.Spec.Template.Spec.DeepCopy()}
	proxy.Spec.NodeName = "lent-1"
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: "lent-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
	pods := map[string]*corev1.Pod{"kube-system/kube-proxy-x1": proxy, "default/plain": plain}
	g := newGuard(t, psapi.LevelBaseline, pods)

	for _, sub := range []string{"exec", "attach", "portforward"} {
		wantRefused(t, sub+" into the kube-proxy", validate(t, g, attrs(&api.PodExecOptions{}, nil, "pods", sub, "kube-system", "kube-proxy-x1", admission.Connect)),
			"kube-system/kube-proxy-x1", "privileged", sub)
		if err := validate(t, g, attrs(&api.PodExecOptions{}, nil, "pods", sub, "default", "plain", admission.Connect)); err != nil {
			t.Errorf("%s into a baseline pod: %v", sub, err)
		}
	}
	if err := validate(t, g, attrs(&api.PodProxyOptions{}, nil, "pods", "proxy", "kube-system", "kube-proxy-x1", admission.Connect)); err != nil {
		t.Errorf("pods/proxy, which reaches the pod's ports only: %v", err)
	}

	nodeProxy := func(p string) error {
		return validate(t, g, attrs(&api.NodeProxyOptions{Path: p}, nil, "nodes", "proxy", "", "lent-1", admission.Connect))
	}
	for _, p := range []string{"/exec/kube-system/kube-proxy-x1/kube-proxy", "run/kube-system/kube-proxy-x1/kube-proxy", "//./attach/a/b/c",
		"/portForward/a/b", "/%65xec/a/b/c", "/%2565xec/a/b/c", "/x/../RUN/a/b/c", "/cri/exec/token", "/checkpoint/a/b/c", "/debug/pprof/heap", `\exec\a`} {
		wantRefused(t, "nodes/proxy "+p, nodeProxy(p), "nodes/proxy", "pods/exec")
	}
	for _, p := range []string{"/healthz", "/metrics", "/metrics/cadvisor", "/stats/summary", "/containerLogs/default/plain/app", "/pods", "/runningpods/", "/configz", ""} {
		if err := nodeProxy(p); err != nil {
			t.Errorf("nodes/proxy %s: %v", p, err)
		}
	}
	granted := newGuard(t, psapi.LevelPrivileged, pods)
	if err := validate(t, granted, attrs(&api.PodExecOptions{}, nil, "pods", "exec", "kube-system", "kube-proxy-x1", admission.Connect)); err != nil {
		t.Errorf("exec with privileged granted: %v", err)
	}
	if err := validate(t, granted, attrs(&api.NodeProxyOptions{Path: "/exec/a/b/c"}, nil, "nodes", "proxy", "", "lent-1", admission.Connect)); err != nil {
		t.Errorf("nodes/proxy exec with privileged granted: %v", err)
	}

	t.Run("a kubelet's own question, from a client that reached it directly", func(t *testing.T) {
		z := tenantguard.NodeProxyAuthorizer{Level: psapi.LevelBaseline, APIServerUser: controlplane.APIServerKubeletClient}
		ask := func(z tenantguard.NodeProxyAuthorizer, who *user.DefaultInfo, sub, path string) authorizer.Decision {
			d, _, err := z.Authorize(context.Background(), authorizer.AttributesRecord{User: who, Verb: "create", Resource: "nodes",
				Subresource: sub, Name: "lent-1", ResourceRequest: true, Path: path})
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
		admin := &user.DefaultInfo{Name: "kubernetes-admin", Groups: []string{"system:masters"}}
		// As a kubelet's x509 authenticator names it.
		x509ID := map[string][]string{user.CredentialIDKey: {"X509SHA256=8f1e"}}
		apiserver := &user.DefaultInfo{Name: controlplane.APIServerKubeletClient, Extra: x509ID}
		if d := ask(z, admin, "proxy", ""); d != authorizer.DecisionDeny {
			t.Errorf("the tenant's admin at a kubelet's proxy: %v, want denied", d)
		}
		if d := ask(z, apiserver, "proxy", ""); d != authorizer.DecisionNoOpinion {
			t.Errorf("the apiserver at a kubelet's proxy: %v, want no opinion", d)
		}
		// The same name in a certificate that also names a group (the portal's personal ones
		// do) is not the apiserver.
		named := &user.DefaultInfo{Name: controlplane.APIServerKubeletClient, Groups: []string{controlplane.PortalUsersGroup, user.AllAuthenticated}}
		if d := ask(z, named, "proxy", ""); d != authorizer.DecisionDeny {
			t.Errorf("the apiserver's name with the portal users' group at a kubelet's proxy: %v, want denied", d)
		}
		if d := ask(z, &user.DefaultInfo{Name: controlplane.APIServerKubeletClient, Groups: []string{user.AllAuthenticated}, Extra: x509ID}, "proxy", ""); d != authorizer.DecisionNoOpinion {
			t.Errorf("the apiserver, authenticated, at a kubelet's proxy: %v, want no opinion", d)
		}
		// The same name from a token of an authenticator the tenant added (an OIDC issuer in
		// extraArgs), with or without a token ID.
		for _, extra := range []map[string][]string{nil, {user.CredentialIDKey: {"JTI=abc"}}} {
			oidc := &user.DefaultInfo{Name: controlplane.APIServerKubeletClient, Groups: []string{user.AllAuthenticated}, Extra: extra}
			if d := ask(z, oidc, "proxy", ""); d != authorizer.DecisionDeny {
				t.Errorf("the apiserver's name from a token (extra %v) at a kubelet's proxy: %v, want denied", extra, d)
			}
		}
		if d := ask(z, admin, "metrics", ""); d != authorizer.DecisionNoOpinion {
			t.Errorf("the tenant's admin at a kubelet's metrics: %v, want no opinion", d)
		}
		if d := ask(z, admin, "proxy", "/api/v1/nodes/lent-1/proxy/healthz"); d != authorizer.DecisionNoOpinion {
			t.Errorf("nodes/proxy through the apiserver (checked in admission): %v, want no opinion", d)
		}
		granted := tenantguard.NodeProxyAuthorizer{Level: psapi.LevelPrivileged, APIServerUser: controlplane.APIServerKubeletClient}
		if d := ask(granted, admin, "proxy", ""); d != authorizer.DecisionNoOpinion {
			t.Errorf("with privileged granted: %v, want no opinion", d)
		}
	})
}

func TestKubeletDebugHandler(t *testing.T) {
	for p, want := range map[string]string{"/exec/a/b/c": "exec", "exec": "exec", "/portForward/a/b": "portforward", "/a/../run": "run",
		"/%2565xec": "exec", "/exec;x=y/a": "exec", "/healthz": "", "/runningpods/": "", "/execx": "", "": ""} {
		if got := tenantguard.KubeletDebugHandler(p); got != want {
			t.Errorf("%q: %q, want %q", p, got, want)
		}
	}
}
