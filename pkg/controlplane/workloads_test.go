package controlplane_test

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// flagMap reads "--name=value" arguments; it fails the test on anything else or a repeat.
func flagMap(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok || !strings.HasPrefix(a, "--") {
			t.Errorf("argument %q is not --name=value", a)
			continue
		}
		if _, dup := out[name]; dup {
			t.Errorf("flag --%s given twice", name)
		}
		out[name] = value
	}
	return out
}

// assertSortedArgs checks that args are sorted by flag name.
func assertSortedArgs(t *testing.T, container string, args []string) {
	t.Helper()
	names := make([]string, len(args))
	for i, a := range args {
		names[i], _, _ = strings.Cut(a, "=")
	}
	if !slices.IsSorted(names) {
		t.Errorf("%s args are not sorted by name: %q", container, names)
	}
}

// pkiFiles are the files under dir that args name, for checking they are all mounted.
func pkiFiles(args map[string]string, dir string) []string {
	var out []string
	for _, v := range args {
		if f, ok := strings.CutPrefix(v, dir+"/"); ok {
			out = append(out, f)
		}
	}
	return out
}

func etcdStatefulSet(modify ...func(*v1alpha1.VirtualCluster)) *appsv1.StatefulSet {
	return controlplane.EtcdStatefulSet(newVC(modify...), controlplane.DefaultSettings(), "etcd-hash")
}

func pvcStorage(size string) v1alpha1.EtcdStorage {
	return v1alpha1.EtcdStorage{PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimStorage{Size: resource.MustParse(size)}}
}

func TestEtcdStatefulSetMembers(t *testing.T) {
	tests := []struct {
		name        string
		replicas    int32
		legacy      bool
		want        int32
		wantCluster string
		wantPeerURL string
	}{
		{
			name: "default", replicas: 0, want: 1,
			wantCluster: "tenant-etcd-0=https://tenant-etcd-0.tenant-etcd-peer.kubenest-cp-tenants.svc:2380",
		},
		{
			name: "one", replicas: 1, want: 1,
			wantCluster: "tenant-etcd-0=https://tenant-etcd-0.tenant-etcd-peer.kubenest-cp-tenants.svc:2380",
		},
		{
			name: "three", replicas: 3, want: 3,
			wantCluster: "tenant-etcd-0=https://tenant-etcd-0.tenant-etcd-peer.kubenest-cp-tenants.svc:2380," +
				"tenant-etcd-1=https://tenant-etcd-1.tenant-etcd-peer.kubenest-cp-tenants.svc:2380," +
				"tenant-etcd-2=https://tenant-etcd-2.tenant-etcd-peer.kubenest-cp-tenants.svc:2380",
		},
		{
			name: "three of an earlier release's tenant, in its own namespace", replicas: 3, legacy: true, want: 3,
			wantCluster: "tenant-etcd-0=https://tenant-etcd-0.tenant-etcd-peer.tenants.svc:2380," +
				"tenant-etcd-1=https://tenant-etcd-1.tenant-etcd-peer.tenants.svc:2380," +
				"tenant-etcd-2=https://tenant-etcd-2.tenant-etcd-peer.tenants.svc:2380",
			wantPeerURL: "https://$(POD_NAME).tenant-etcd-peer.tenants.svc:2380",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := etcdStatefulSet(func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.Etcd.Replicas = tt.replicas
				if tt.legacy {
					legacy(vc)
				}
			})
			if got := ptr.Deref(sts.Spec.Replicas, -1); got != tt.want {
				t.Errorf("replicas = %d, want %d", got, tt.want)
			}
			if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
				t.Errorf("pod management %q, want Parallel", sts.Spec.PodManagementPolicy)
			}
			c := sts.Spec.Template.Spec.Containers[0]
			assertSortedArgs(t, c.Name, c.Args)
			args := flagMap(t, c.Args)
			if args["initial-cluster"] != tt.wantCluster {
				t.Errorf("initial-cluster = %q, want %q", args["initial-cluster"], tt.wantCluster)
			}
			// Each member advertises its own peer DNS name, which the peer certificate's
			// wildcard covers.
			wantPeerURL := cmp.Or(tt.wantPeerURL, "https://$(POD_NAME).tenant-etcd-peer.kubenest-cp-tenants.svc:2380")
			if got := args["initial-advertise-peer-urls"]; got != wantPeerURL {
				t.Errorf("initial-advertise-peer-urls = %q, want %q", got, wantPeerURL)
			}
			if args["name"] != "$(POD_NAME)" || args["initial-cluster-state"] != "new" || args["initial-cluster-token"] != "5f0c3d2e-uid" {
				t.Errorf("name %q, state %q, token %q", args["name"], args["initial-cluster-state"], args["initial-cluster-token"])
			}
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}) {
				t.Errorf("POD_NAME is not the pod's name: %+v", c.Env)
			}
		})
	}
}

func TestEtcdStatefulSetTLS(t *testing.T) {
	vc := newVC()
	sts := controlplane.EtcdStatefulSet(vc, controlplane.DefaultSettings(), "h")
	args := flagMap(t, sts.Spec.Template.Spec.Containers[0].Args)
	for _, f := range []string{"client-cert-auth", "peer-client-cert-auth"} {
		if args[f] != "true" {
			t.Errorf("--%s = %q, want true", f, args[f])
		}
	}
	for _, f := range []string{"listen-client-urls", "listen-peer-urls", "advertise-client-urls", "initial-advertise-peer-urls"} {
		if !strings.HasPrefix(args[f], "https://") {
			t.Errorf("--%s = %q, want https", f, args[f])
		}
	}
	// Every certificate file a flag names is in the Secret mounted there.
	secret, err := controlplane.EtcdCertsSecret(vc, newAuthorities(t), mustLeaves(t, vc))
	if err != nil {
		t.Fatal(err)
	}
	files := pkiFiles(args, controlplane.EtcdPKIDir)
	if len(files) < 5 {
		t.Errorf("only %d files under %s in the flags: %q", len(files), controlplane.EtcdPKIDir, files)
	}
	for _, f := range files {
		if _, ok := secret.Data[f]; !ok {
			t.Errorf("flags name %s/%s, which the etcd Secret lacks", controlplane.EtcdPKIDir, f)
		}
	}
	vol := volume(sts.Spec.Template.Spec, "certs")
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret.Name {
		t.Errorf("certs volume %+v, want Secret %s", vol, secret.Name)
	}
	if m := mount(sts.Spec.Template.Spec.Containers[0], "certs"); m == nil || m.MountPath != controlplane.EtcdPKIDir || !m.ReadOnly {
		t.Errorf("certs mount %+v, want read-only at %s", m, controlplane.EtcdPKIDir)
	}
}

func TestEtcdStatefulSetStorage(t *testing.T) {
	const gi = int64(1) << 30
	tests := []struct {
		name      string
		storage   v1alpha1.EtcdStorage
		wantPVC   string // size of the claim template; empty for an emptyDir
		wantClass *string
		wantLimit string // emptyDir size limit
		wantQuota int64
	}{
		{name: "1Gi claim", storage: pvcStorage("1Gi"), wantPVC: "1Gi", wantQuota: gi * 4 / 5},
		{name: "500Mi claim", storage: pvcStorage("500Mi"), wantPVC: "500Mi", wantQuota: 500 << 20 * 4 / 5},
		{name: "2.5Gi claim hits the cap", storage: pvcStorage("2560Mi"), wantPVC: "2560Mi", wantQuota: 2 * gi},
		{name: "10Gi claim is capped", storage: pvcStorage("10Gi"), wantPVC: "10Gi", wantQuota: 2 * gi},
		{
			name: "storage class",
			storage: v1alpha1.EtcdStorage{PersistentVolumeClaim: &v1alpha1.PersistentVolumeClaimStorage{
				Size: resource.MustParse("2Gi"), StorageClassName: ptr.To("fast"),
			}},
			wantPVC: "2Gi", wantClass: ptr.To("fast"), wantQuota: 2 * gi * 4 / 5,
		},
		{
			name:      "ephemeral with a limit",
			storage:   v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{SizeLimit: ptr.To(resource.MustParse("512Mi"))}},
			wantLimit: "512Mi", wantQuota: 512 << 20 * 4 / 5,
		},
		{name: "ephemeral without a limit", storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}, wantQuota: 2 * gi},
		{name: "nothing set", wantQuota: 2 * gi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sts := etcdStatefulSet(func(vc *v1alpha1.VirtualCluster) { vc.Spec.Etcd.Storage = tt.storage })
			spec := sts.Spec.Template.Spec
			data := volume(spec, "data")
			if tt.wantPVC != "" {
				if len(sts.Spec.VolumeClaimTemplates) != 1 {
					t.Fatalf("%d claim templates, want 1", len(sts.Spec.VolumeClaimTemplates))
				}
				pvc := sts.Spec.VolumeClaimTemplates[0]
				if pvc.Name != "data" {
					t.Errorf("claim template %q, want data", pvc.Name)
				}
				if got := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse(tt.wantPVC)) != 0 {
					t.Errorf("claim size %s, want %s", got.String(), tt.wantPVC)
				}
				if !ptr.Equal(pvc.Spec.StorageClassName, tt.wantClass) {
					t.Errorf("storage class %v, want %v", ptr.Deref(pvc.Spec.StorageClassName, "<nil>"), ptr.Deref(tt.wantClass, "<nil>"))
				}
				if !slices.Equal(pvc.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
					t.Errorf("access modes %v", pvc.Spec.AccessModes)
				}
				if data != nil {
					t.Errorf("pod has a data volume %+v besides the claim", data)
				}
			} else {
				if len(sts.Spec.VolumeClaimTemplates) != 0 {
					t.Errorf("claim templates %v, want none", sts.Spec.VolumeClaimTemplates)
				}
				if data == nil || data.EmptyDir == nil {
					t.Fatalf("data volume %+v, want an emptyDir", data)
				}
				if tt.wantLimit == "" && data.EmptyDir.SizeLimit != nil {
					t.Errorf("emptyDir size limit %s, want none", data.EmptyDir.SizeLimit)
				}
				if tt.wantLimit != "" && (data.EmptyDir.SizeLimit == nil || data.EmptyDir.SizeLimit.Cmp(resource.MustParse(tt.wantLimit)) != 0) {
					t.Errorf("emptyDir size limit %v, want %s", data.EmptyDir.SizeLimit, tt.wantLimit)
				}
			}
			c := spec.Containers[0]
			if m := mount(c, "data"); m == nil || m.MountPath != controlplane.EtcdDataDir {
				t.Errorf("data mount %+v, want %s", m, controlplane.EtcdDataDir)
			}
			args := flagMap(t, c.Args)
			if got, want := args["quota-backend-bytes"], fmt.Sprint(tt.wantQuota); got != want {
				t.Errorf("quota-backend-bytes = %s, want %s", got, want)
			}
			if !strings.HasPrefix(args["data-dir"], controlplane.EtcdDataDir+"/") {
				t.Errorf("data-dir %q is not on the data volume", args["data-dir"])
			}
		})
	}
}

func TestEtcdStatefulSetPod(t *testing.T) {
	sts := etcdStatefulSet(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.Etcd.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}
	})
	if sts.Name != "tenant-etcd" || sts.Spec.Template.Annotations[naming.AnnotationConfigHash] != "etcd-hash" {
		t.Errorf("name %q, config hash %q", sts.Name, sts.Spec.Template.Annotations[naming.AnnotationConfigHash])
	}
	assertSecurePod(t, sts.Spec.Template.Spec)
	assertSelectsTemplate(t, sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels, naming.ComponentEtcd)
	c := sts.Spec.Template.Spec.Containers[0]
	if _, ok := c.Resources.Requests[corev1.ResourceMemory]; ok {
		t.Errorf("memory request %v set although the tenant set a memory limit", c.Resources.Requests)
	}
	if _, ok := c.Resources.Requests[corev1.ResourceCPU]; !ok {
		t.Error("no default CPU request")
	}
	if c.Image != controlplane.DefaultSettings().Image || !slices.Equal(c.Command, []string{controlplane.EtcdBinaryPath}) {
		t.Errorf("image %q command %q", c.Image, c.Command)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s probe %+v, want an HTTP probe", name, p)
		}
	}
}

func controlPlaneDeployment(t *testing.T, modify ...func(*v1alpha1.VirtualCluster)) *appsv1.Deployment {
	t.Helper()
	d, err := controlplane.ControlPlaneDeployment(newVC(modify...), controlplane.DefaultSettings(), "cp-hash")
	if err != nil {
		t.Fatalf("ControlPlaneDeployment: %v", err)
	}
	return d
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

// componentArgs are one component's flags: the apiserver's container's arguments, or the
// controller-manager's or the scheduler's side of the "--" in the controllers container.
func componentArgs(t *testing.T, spec corev1.PodSpec, component string) []string {
	t.Helper()
	if component == "apiserver" {
		return container(t, spec, controlplane.ContainerAPIServer).Args
	}
	args := container(t, spec, controlplane.ContainerControllers).Args
	cm, sched, ok := controlplane.SplitControllersArgs(args)
	if !ok {
		t.Fatalf("controllers arguments %q, want one \"--\"", args)
	}
	if component == "controller-manager" {
		return cm
	}
	return sched
}

func TestControlPlaneDeploymentContainers(t *testing.T) {
	vc := newVC()
	d := controlPlaneDeployment(t)
	var names []string
	for _, c := range d.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
	}
	if want := []string{controlplane.ContainerAPIServer, controlplane.ContainerControllers, controlplane.ContainerDNS}; !slices.Equal(names, want) {
		t.Fatalf("containers %q, want %q", names, want)
	}
	secret, err := controlplane.ControlPlaneCertsSecret(vc, newAuthorities(t), mustLeaves(t, vc))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		component string
		container string
		command   string
		want      map[string]string
	}{
		{
			component: "apiserver", container: controlplane.ContainerAPIServer, command: "apiserver",
			want: map[string]string{
				"etcd-servers":             "https://tenant-etcd.kubenest-cp-tenants.svc:2379,https://tenant-etcd-0.tenant-etcd-peer.kubenest-cp-tenants.svc:2379",
				"secure-port":              "6443",
				"service-cluster-ip-range": "10.254.0.0/16",
				"client-ca-file":           controlplane.PKIDir + "/client-ca.crt",
				"tls-cert-file":            controlplane.PKIDir + "/apiserver.crt",
				"enable-admission-plugins": "NodeRestriction",
				"advertise-address":        "$(POD_IP)",
				// It serves until the controllers of its pod handed back their lease.
				"kubenest-controllers-lease": "kube-system/kube-controller-manager",
			},
		},
		{
			component: "controller-manager", container: controlplane.ContainerControllers, command: "controllers",
			want: map[string]string{
				"kubeconfig":                controlplane.PKIDir + "/" + controlplane.KeyControllerManagerKubeconfig,
				"leader-elect":              "true",
				"cluster-name":              vcName,
				"cluster-signing-cert-file": "",
				"cluster-signing-key-file":  "",
			},
		},
		{
			component: "scheduler", container: controlplane.ContainerControllers, command: "controllers",
			want: map[string]string{
				"kubeconfig": controlplane.PKIDir + "/" + controlplane.KeySchedulerKubeconfig,
				// It runs under the controller-manager's lease (nest-controlplane controllers).
				"leader-elect": "false",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.component, func(t *testing.T) {
			c := container(t, d.Spec.Template.Spec, tt.container)
			own := componentArgs(t, d.Spec.Template.Spec, tt.component)
			assertSortedArgs(t, tt.component, own)
			args := flagMap(t, own)
			for k, v := range tt.want {
				if got, ok := args[k]; !ok || got != v {
					t.Errorf("--%s = %q (set %v), want %q", k, got, ok, v)
				}
			}
			if !slices.Equal(c.Command, []string{controlplane.BinaryPath, tt.command}) {
				t.Errorf("command %q", c.Command)
			}
			// Every file a flag names is in the mounted Secret.
			for _, f := range pkiFiles(args, controlplane.PKIDir) {
				if _, ok := secret.Data[f]; !ok {
					t.Errorf("flags name %s/%s, which the control-plane Secret lacks", controlplane.PKIDir, f)
				}
			}
			if m := mount(c, "certs"); m == nil || m.MountPath != controlplane.PKIDir || !m.ReadOnly {
				t.Errorf("certs mount %+v, want read-only at %s", m, controlplane.PKIDir)
			}
			if c.LivenessProbe == nil {
				t.Error("no liveness probe")
			}
			// Only the apiserver decides when the pod is Ready (behind the apiserver Service).
			if gates := c.StartupProbe != nil || c.ReadinessProbe != nil; gates != (c.Name == controlplane.ContainerAPIServer) {
				t.Errorf("startup probe %v, readiness probe %v: only the apiserver's gate the pod's readiness", c.StartupProbe, c.ReadinessProbe)
			}
		})
	}
	if vol := volume(d.Spec.Template.Spec, "certs"); vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret.Name {
		t.Errorf("certs volume %+v, want Secret %s", vol, secret.Name)
	}
}

func TestControlPlaneDeploymentExtraArgs(t *testing.T) {
	d := controlPlaneDeployment(t, func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{
			"v": "2", "enable-admission-plugins": "NodeRestriction,AlwaysPullImages", "audit-log-maxage": "3",
		}
		vc.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"controllers": "*", "v": "4"}
		vc.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"profiling": "true", "feature-gates": "SchedulerQueueingHints=false"}
	})
	tests := []struct {
		component string
		want      map[string]string
	}{
		// The apiserver keeps its own default gates, not the controllers process's.
		{"apiserver", map[string]string{"v": "2", "enable-admission-plugins": "NodeRestriction,AlwaysPullImages", "audit-log-maxage": "3", "profiling": "false", "feature-gates": "DetectCacheInconsistency=false,UnknownVersionInteroperabilityProxy=false"}},
		// The controller-manager and the scheduler share their process's flags (--v,
		// --feature-gates), each keeps its own (--profiling).
		{"controller-manager", map[string]string{"controllers": "*", "v": "4", "profiling": "false", "feature-gates": "SchedulerQueueingHints=false"}},
		{"scheduler", map[string]string{"profiling": "true", "v": "4", "feature-gates": "SchedulerQueueingHints=false", "controllers": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.component, func(t *testing.T) {
			args := componentArgs(t, d.Spec.Template.Spec, tt.component)
			assertSortedArgs(t, tt.component, args)
			got := flagMap(t, args)
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("--%s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

// A lone apiserver renews its address in the kubernetes Service's endpoints once a minute;
// several keep upstream's interval; a tenant's extraArgs decide over either.
func TestControlPlaneDeploymentEndpointReconcileInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas *int32
		extra    map[string]string
		want     string // "" when the flag is not set
	}{
		{"replicas unset", nil, nil, "1m"},
		{"one replica", ptr.To[int32](1), nil, "1m"},
		{"three replicas", ptr.To[int32](3), nil, ""},
		{"the tenant's value", ptr.To[int32](1), map[string]string{"kubenest-endpoint-reconcile-interval": "20s"}, "20s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := controlPlaneDeployment(t, func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.Replicas = tc.replicas
				vc.Spec.ControlPlane.APIServer.ExtraArgs = tc.extra
			})
			got, set := flagMap(t, componentArgs(t, d.Spec.Template.Spec, "apiserver"))["kubenest-endpoint-reconcile-interval"]
			if got != tc.want || set != (tc.want != "") {
				t.Errorf("--kubenest-endpoint-reconcile-interval = %q (set %v), want %q", got, set, tc.want)
			}
		})
	}
}

// A lone controllers process renews its lease every 8 s; a control plane of several
// replicas keeps the 3 s that lets a standby take over as soon as upstream's would.
func TestControlPlaneDeploymentControllersLease(t *testing.T) {
	lone := [3]string{"30s", "20s", "8s"}
	for _, tc := range []struct {
		name     string
		replicas *int32
		extra    map[string]string
		want     [3]string // lease duration, renew deadline, retry period
	}{
		{"replicas unset", nil, nil, lone},
		{"one replica", ptr.To[int32](1), nil, lone},
		{"three replicas", ptr.To[int32](3), nil, [3]string{"13s", "10s", "3s"}},
		{"the tenant's values", ptr.To[int32](1), map[string]string{"leader-elect-retry-period": "2s", "leader-elect-renew-deadline": "10s", "leader-elect-lease-duration": "15s"}, [3]string{"15s", "10s", "2s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := controlPlaneDeployment(t, func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.Replicas = tc.replicas
				vc.Spec.ControlPlane.ControllerManager.ExtraArgs = tc.extra
			})
			args := flagMap(t, componentArgs(t, d.Spec.Template.Spec, "controller-manager"))
			for i, flag := range []string{"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-retry-period"} {
				if got := args[flag]; got != tc.want[i] {
					t.Errorf("--%s = %q, want %q", flag, got, tc.want[i])
				}
			}
		})
	}
}

// The controller-manager and the scheduler run in one process: a process flag set to two
// values is refused, naming both fields, and the VirtualCluster is left as it was.
func TestControlPlaneDeploymentProcessFlagsDiffer(t *testing.T) {
	vc := newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"v": "4"}
		vc.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"v": "2", "profiling": "true"}
	})
	_, err := controlplane.ControlPlaneDeployment(vc, controlplane.DefaultSettings(), "")
	if err == nil {
		t.Fatal("no error for --v=4 and --v=2")
	}
	for _, want := range []string{"spec.controlPlane.scheduler.extraArgs", "spec.controlPlane.controllerManager.extraArgs", "--v=2", "--v=4", "one process"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The same value on both sides is fine, and neither map is changed by sharing.
	vc.Spec.ControlPlane.Scheduler.ExtraArgs["v"] = "4"
	if _, err := controlplane.ControlPlaneDeployment(vc, controlplane.DefaultSettings(), ""); err != nil {
		t.Fatal(err)
	}
	if len(vc.Spec.ControlPlane.ControllerManager.ExtraArgs) != 1 || len(vc.Spec.ControlPlane.Scheduler.ExtraArgs) != 2 {
		t.Errorf("extraArgs changed: %v, %v", vc.Spec.ControlPlane.ControllerManager.ExtraArgs, vc.Spec.ControlPlane.Scheduler.ExtraArgs)
	}
}

func TestControlPlaneDeploymentOwnedFlags(t *testing.T) {
	tests := []struct {
		name    string
		modify  func(*v1alpha1.VirtualCluster)
		wantErr string
	}{
		{
			name: "apiserver etcd-servers",
			modify: func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"v": "2", "etcd-servers": "x"}
			},
			wantErr: "spec.controlPlane.apiServer.extraArgs: flag --etcd-servers ",
		},
		{
			name: "controller-manager root-ca-file",
			modify: func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"root-ca-file": "/x"}
			},
			wantErr: "spec.controlPlane.controllerManager.extraArgs: flag --root-ca-file ",
		},
		{
			name: "controller-manager cluster-signing-key-file",
			modify: func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"cluster-signing-key-file": controlplane.PKIDir + "/sa.key"}
			},
			wantErr: "spec.controlPlane.controllerManager.extraArgs: flag --cluster-signing-key-file ",
		},
		{
			name: "scheduler kubeconfig",
			modify: func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"kubeconfig": "/x"}
			},
			wantErr: "spec.controlPlane.scheduler.extraArgs: flag --kubeconfig ",
		},
		{
			name: "several: the first component, the first flag by name",
			modify: func(vc *v1alpha1.VirtualCluster) {
				vc.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"tls-cert-file": "/x", "secure-port": "1"}
				vc.Spec.ControlPlane.ControllerManager.ExtraArgs = map[string]string{"kubeconfig": "/x"}
				vc.Spec.ControlPlane.Scheduler.ExtraArgs = map[string]string{"kubeconfig": "/x"}
			},
			wantErr: "spec.controlPlane.apiServer.extraArgs: flag --secure-port ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vc := newVC(tt.modify)
			var first string
			// The message ends up in a condition, so it is the same every time.
			for i := range 20 {
				d, err := controlplane.ControlPlaneDeployment(vc, controlplane.DefaultSettings(), "")
				if err == nil {
					t.Fatalf("ControlPlaneDeployment succeeded: %d containers", len(d.Spec.Template.Spec.Containers))
				}
				if !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("error %q, want it to start with %q", err, tt.wantErr)
				}
				if i == 0 {
					first = err.Error()
				} else if err.Error() != first {
					t.Fatalf("error changed between calls: %q then %q", first, err)
				}
			}
		})
	}
}

func TestControlPlaneDeploymentSpec(t *testing.T) {
	tests := []struct {
		name     string
		replicas *int32
		want     int32
	}{
		{"default", nil, 1},
		{"three", ptr.To[int32](3), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := controlPlaneDeployment(t, func(vc *v1alpha1.VirtualCluster) { vc.Spec.ControlPlane.Replicas = tt.replicas })
			if got := ptr.Deref(d.Spec.Replicas, -1); got != tt.want {
				t.Errorf("replicas = %d, want %d", got, tt.want)
			}
			if d.Name != "tenant-controlplane" {
				t.Errorf("name %q", d.Name)
			}
			ru := d.Spec.Strategy.RollingUpdate
			if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
				t.Errorf("strategy %+v, want a rolling update with maxUnavailable 0", d.Spec.Strategy)
			}
			if ru != nil && (ru.MaxSurge == nil || ru.MaxSurge.IntValue() < 1) {
				t.Errorf("maxSurge %v, want at least 1 so a roll can proceed", ru.MaxSurge)
			}
			if got := d.Spec.Template.Annotations[naming.AnnotationConfigHash]; got != "cp-hash" {
				t.Errorf("config hash annotation %q, want cp-hash", got)
			}
			assertSecurePod(t, d.Spec.Template.Spec)
			assertSelectsTemplate(t, d.Spec.Selector.MatchLabels, d.Spec.Template.Labels, naming.ComponentControlPlane)
		})
	}
	// The config hash follows what the caller passes, so pods roll when it changes.
	a, _ := controlplane.ControlPlaneDeployment(newVC(), controlplane.DefaultSettings(), "one")
	b, _ := controlplane.ControlPlaneDeployment(newVC(), controlplane.DefaultSettings(), "two")
	if a.Spec.Template.Annotations[naming.AnnotationConfigHash] == b.Spec.Template.Annotations[naming.AnnotationConfigHash] {
		t.Error("config hash annotation does not follow the hash")
	}
}

func TestControlPlaneDeploymentResources(t *testing.T) {
	q := resource.MustParse
	tests := []struct {
		name      string
		resources corev1.ResourceRequirements
		// wantCPU and wantMem are the requests; empty means no request.
		wantCPU, wantMem string
	}{
		{name: "unset gets defaults", wantCPU: "20m", wantMem: "160Mi"},
		{
			name:      "CPU request kept, memory defaulted",
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("1")}},
			wantCPU:   "1", wantMem: "160Mi",
		},
		{
			name:      "both requests kept",
			resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: q("200m"), corev1.ResourceMemory: q("1Gi")}},
			wantCPU:   "200m", wantMem: "1Gi",
		},
		{
			name:      "a limit without a request is left to the host's defaulting",
			resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
			wantCPU:   "20m",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vc := newVC(func(vc *v1alpha1.VirtualCluster) { vc.Spec.ControlPlane.APIServer.Resources = tt.resources })
			before := vc.DeepCopy()
			d, err := controlplane.ControlPlaneDeployment(vc, controlplane.DefaultSettings(), "")
			if err != nil {
				t.Fatal(err)
			}
			r := container(t, d.Spec.Template.Spec, controlplane.ContainerAPIServer).Resources
			for name, want := range map[corev1.ResourceName]string{corev1.ResourceCPU: tt.wantCPU, corev1.ResourceMemory: tt.wantMem} {
				got, ok := r.Requests[name]
				switch {
				case want == "" && ok:
					t.Errorf("%s request %s, want none", name, got.String())
				case want != "" && (!ok || got.Cmp(q(want)) != 0):
					t.Errorf("%s request %s, want %s", name, got.String(), want)
				}
			}
			for name, want := range tt.resources.Limits {
				if got := r.Limits[name]; got.Cmp(want) != 0 {
					t.Errorf("%s limit %s, want %s", name, got.String(), want.String())
				}
			}
			// The other containers get their own defaults, and the VirtualCluster is untouched.
			if res := container(t, d.Spec.Template.Spec, controlplane.ContainerControllers).Resources; len(res.Requests) != 2 || len(res.Limits) != 0 {
				t.Errorf("controllers resources %+v, want default requests only", res)
			}
			if len(vc.Spec.ControlPlane.APIServer.Resources.Requests) != len(before.Spec.ControlPlane.APIServer.Resources.Requests) {
				t.Error("ControlPlaneDeployment changed the VirtualCluster's resources")
			}
		})
	}
}

// controlPlaneSchema is the schema of spec.controlPlane in the VirtualCluster CRD.
func controlPlaneSchema(t *testing.T) apiextensionsv1.JSONSchemaProps {
	t.Helper()
	raw, err := os.ReadFile("../../charts/kubenest/crds/kubenest.io_virtualclusters.yaml")
	if err != nil {
		t.Fatalf("reading the CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(raw, crd); err != nil {
		t.Fatalf("parsing the CRD: %v", err)
	}
	if len(crd.Spec.Versions) == 0 || crd.Spec.Versions[0].Schema == nil {
		t.Fatal("CRD has no schema")
	}
	return crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["controlPlane"]
}

// listedNames are the names of a CEL list's text between its brackets: 'a','b'.
func listedNames(list string) []string {
	var names []string
	for _, s := range strings.Split(list, ",") {
		names = append(names, strings.Trim(strings.TrimSpace(s), `'"`))
	}
	return names
}

// TestOwnedFlagNamesMatchCRD keeps the flags the builders own and the flags the CRD's rules
// forbid in extraArgs the same lists.
func TestOwnedFlagNamesMatchCRD(t *testing.T) {
	cp := controlPlaneSchema(t)
	owned := controlplane.OwnedFlagNames()
	fields := []string{"apiServer", "controllerManager", "scheduler"}
	list := regexp.MustCompile(`k in \[([^\]]*)\]`)
	for _, field := range fields {
		t.Run(field, func(t *testing.T) {
			schema, ok := cp.Properties[field]
			if !ok {
				t.Fatalf("CRD has no spec.controlPlane.%s", field)
			}
			var found [][]string
			for _, v := range schema.XValidations {
				for _, text := range []string{v.Rule, v.MessageExpression} {
					m := list.FindStringSubmatch(text)
					if m == nil {
						continue
					}
					found = append(found, listedNames(m[1]))
				}
			}
			if len(found) == 0 {
				t.Fatalf("no rule of spec.controlPlane.%s lists flags", field)
			}
			want := owned[field]
			if len(want) == 0 {
				t.Fatalf("OwnedFlagNames has nothing for %s", field)
			}
			for _, names := range found {
				if !sameSet(names, want) {
					t.Errorf("CRD rule on spec.controlPlane.%s lists %q\nbut the operator owns %q\nonly in the CRD: %q\nonly in Go: %q",
						field, names, want, minus(names, want), minus(want, names))
				}
			}
		})
	}
	if len(owned) != len(fields) {
		t.Errorf("OwnedFlagNames covers %d fields, want %d", len(owned), len(fields))
	}
}

// TestProcessFlagNamesMatchCRD keeps the process flags the builder shares and the flags the
// CRD's rule on spec.controlPlane compares the same list.
func TestProcessFlagNamesMatchCRD(t *testing.T) {
	cp := controlPlaneSchema(t)
	list := regexp.MustCompile(`\[('[^\]]*')\]`) // a list of quoted flag names
	want := controlplane.ProcessFlagNames()
	found := 0
	for _, v := range cp.XValidations {
		for _, text := range []string{v.Rule, v.MessageExpression} {
			for _, m := range list.FindAllStringSubmatch(text, -1) {
				names := listedNames(m[1])
				found++
				if !sameSet(names, want) {
					t.Errorf("CRD rule on spec.controlPlane lists %q\nbut the builder shares %q", names, want)
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("no rule of spec.controlPlane lists the process flags")
	}
}

func minus(a, b []string) []string {
	var out []string
	for _, s := range a {
		if !slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func mustLeaves(t *testing.T, vc *v1alpha1.VirtualCluster) controlplane.Leaves {
	t.Helper()
	leaves, _ := ensure(t, newAuthorities(t), leafSpecs(t, vc, controlplane.DefaultSettings(), controlplane.Exposure{}), nil, now)
	return leaves
}

func volume(spec corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

func mount(c corev1.Container, name string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == name {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// assertSecurePod checks what every tenant pod must be: no host API token, not root, no
// privilege escalation, and every mount backed by a volume.
func assertSecurePod(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("service account token is mounted")
	}
	psc := spec.SecurityContext
	if psc == nil || !ptr.Deref(psc.RunAsNonRoot, false) || ptr.Deref(psc.RunAsUser, 0) == 0 {
		t.Errorf("pod security context %+v, want non-root", psc)
	}
	for _, c := range spec.Containers {
		sc := c.SecurityContext
		if sc == nil || ptr.Deref(sc.AllowPrivilegeEscalation, true) || ptr.Deref(sc.Privileged, false) {
			t.Errorf("%s security context %+v allows escalation", c.Name, sc)
		}
		if sc != nil && ptr.Deref(sc.RunAsUser, 1) == 0 {
			t.Errorf("%s runs as root", c.Name)
		}
		for _, m := range c.VolumeMounts {
			if volume(spec, m.Name) == nil {
				t.Errorf("%s mounts %s, which is not a volume", c.Name, m.Name)
			}
		}
	}
}

func assertSelectsTemplate(t *testing.T, selector, labels map[string]string, component string) {
	t.Helper()
	if len(selector) == 0 || selector[naming.LabelComponent] != component || selector[naming.LabelVirtualCluster] != vcName {
		t.Errorf("selector %v, want the tenant's %s pods", selector, component)
	}
	for k, v := range selector {
		if labels[k] != v {
			t.Errorf("template labels %v do not match selector %v", labels, selector)
			return
		}
	}
}

// Every Go component's runtime knows its memory limit: GOMEMLIMIT is the limit, through the
// Downward API, so a tenant's own resources set it. And each collects at GOGC=50.
func TestGoRuntimeSettings(t *testing.T) {
	d := controlPlaneDeployment(t)
	containers := d.Spec.Template.Spec.Containers
	containers = append(containers, controlplane.EtcdStatefulSet(newVC(), controlplane.DefaultSettings(), "").Spec.Template.Spec.Containers...)
	for _, c := range containers {
		if c.Name == controlplane.ContainerDNS {
			continue // CoreDNS: its default (BENCHMARKS.md)
		}
		var ref *corev1.ResourceFieldSelector
		gogc := ""
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" && e.ValueFrom != nil {
				ref = e.ValueFrom.ResourceFieldRef
			}
			if e.Name == "GOGC" {
				gogc = e.Value
			}
		}
		if gogc != "50" {
			t.Errorf("%s: GOGC=%q, want 50", c.Name, gogc)
		}
		if ref == nil || ref.ContainerName != c.Name || ref.Resource != "limits.memory" {
			t.Errorf("%s: GOMEMLIMIT from %+v, want its own limits.memory", c.Name, ref)
		}
	}
}

// The controllers container has the sums of the controller-manager's and the scheduler's
// resources; a limit on one bounds the container at that limit plus the other's request.
func TestControlPlaneDeploymentControllersResources(t *testing.T) {
	q := resource.MustParse
	d := controlPlaneDeployment(t, func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.ControlPlane.ControllerManager.Resources = corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: q("256Mi")},
		}
		vc.Spec.ControlPlane.Scheduler.Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: q("40Mi")},
		}
	})
	res := container(t, d.Spec.Template.Spec, controlplane.ContainerControllers).Resources
	for _, c := range []struct {
		what string
		list corev1.ResourceList
		name corev1.ResourceName
		want string
	}{
		{"cpu request (defaults 5m + 2m)", res.Requests, corev1.ResourceCPU, "7m"},
		{"memory request (limit 256Mi as request + 40Mi)", res.Requests, corev1.ResourceMemory, "296Mi"},
		{"memory limit (256Mi + the scheduler's request)", res.Limits, corev1.ResourceMemory, "296Mi"},
	} {
		if got, ok := c.list[c.name]; !ok || got.Cmp(q(c.want)) != 0 {
			t.Errorf("%s: %s, want %s", c.what, got.String(), c.want)
		}
	}
	if _, ok := res.Limits[corev1.ResourceCPU]; ok {
		t.Errorf("cpu limit %v, want none: neither component has one", res.Limits)
	}
}

// An operator upgrade changes the etcd pod template (the image): members with volume claims
// roll; an ephemeral member stays, and is replaced only for a new etcd CA.
func TestEtcdUpdates(t *testing.T) {
	s := controlplane.DefaultSettings()
	pvc := controlplane.EtcdStatefulSet(newVC(func(vc *v1alpha1.VirtualCluster) { vc.Spec.Etcd.Storage = pvcStorage("1Gi") }), s, "ca-1")
	if pvc.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("members with volume claims update %s, want RollingUpdate", pvc.Spec.UpdateStrategy.Type)
	}
	ephemeral := controlplane.EtcdStatefulSet(newVC(func(vc *v1alpha1.VirtualCluster) {
		vc.Spec.Etcd.Storage = v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}
	}), s, "ca-1")
	if ephemeral.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("an ephemeral member updates %s, want OnDelete", ephemeral.Spec.UpdateStrategy.Type)
	}
	pod := func(name, hash string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{naming.AnnotationConfigHash: hash}}}
	}
	pods := []corev1.Pod{pod("same-ca", "ca-1"), pod("old-ca", "ca-0")}
	if got := controlplane.EtcdPodsToReplace(ephemeral, pods); len(got) != 1 || got[0].Name != "old-ca" {
		t.Errorf("ephemeral: replace %v, want old-ca only", got)
	}
	if got := controlplane.EtcdPodsToReplace(pvc, pods); len(got) != 0 {
		t.Errorf("with volume claims: replace %v, want none (the StatefulSet rolls them)", got)
	}
}

// TestMemberLabels: the pods (and etcd's volume claims) of a control plane in the
// control-plane namespace name the VirtualCluster's namespace, which the operator's watch
// needs to find it; the selectors stay the tenant's labels alone, as an earlier release's
// (a selector cannot change).
func TestMemberLabels(t *testing.T) {
	for _, tt := range []struct {
		name   string
		vc     *v1alpha1.VirtualCluster
		wantNS bool
	}{
		{"new", newVC(func(vc *v1alpha1.VirtualCluster) { vc.Spec.Etcd.Storage = pvcStorage("1Gi") }), true},
		{"an earlier release's", newVC(legacy, func(vc *v1alpha1.VirtualCluster) { vc.Spec.Etcd.Storage = pvcStorage("1Gi") }), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sts := controlplane.EtcdStatefulSet(tt.vc, controlplane.DefaultSettings(), "")
			deploy, err := controlplane.ControlPlaneDeployment(tt.vc, controlplane.DefaultSettings(), "")
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range []struct {
				what      string
				component string
				selector  map[string]string
				labels    []map[string]string
			}{
				{"etcd", naming.ComponentEtcd, sts.Spec.Selector.MatchLabels, []map[string]string{
					sts.Spec.Template.Labels, sts.Spec.VolumeClaimTemplates[0].Labels}},
				{"control plane", naming.ComponentControlPlane, deploy.Spec.Selector.MatchLabels, []map[string]string{deploy.Spec.Template.Labels}},
			} {
				if want := naming.For(vcName).Labels(it.component); !maps.Equal(it.selector, want) {
					t.Errorf("%s selector %v, want %v", it.what, it.selector, want)
				}
				for _, l := range it.labels {
					for k, v := range it.selector {
						if l[k] != v {
							t.Errorf("%s labels %v do not match its selector %v", it.what, l, it.selector)
						}
					}
					if got, ok := l[naming.LabelVirtualClusterNamespace]; ok != tt.wantNS || (ok && got != vcNS) {
						t.Errorf("%s labels %v: %s = %q (set %v), want set %v", it.what, l, naming.LabelVirtualClusterNamespace, got, ok, tt.wantNS)
					}
				}
			}
		})
	}
}
