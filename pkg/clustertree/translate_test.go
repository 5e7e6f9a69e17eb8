package clustertree

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/fieldpath"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/naming"
)

const (
	trVC      = "alpha"
	trNS      = "app"
	trHostNS  = "tenants"
	trNode    = "kubenest-shared"
	trAPIHost = "10.96.0.10"
	trAPIPort = 6443
	trUID     = types.UID("0b6f1c1e-5a3c-4f5e-9d2a-7c1e2f3a4b5c")
	trSA      = "runner"
)

func testTranslator() Translator {
	return Translator{VirtualCluster: trVC, HostNamespace: trHostNS, NodeName: trNode, APIServerHost: trAPIHost, APIServerPort: trAPIPort,
		ClusterDNS: "10.254.0.10", ServiceCIDR: netip.MustParsePrefix("10.254.0.0/24")}
}

// hn is the host name of the tenant object called name in trNS.
func hn(name string) string { return HostName(trVC, trNS, name) }

// testTenantPod is a tenant pod bound to the virtual node.
func testTenantPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: trNS, UID: trUID, Generation: 3,
			Labels:      map[string]string{"app": "web"},
			Annotations: map[string]string{"note": "hello"},
		},
		Spec: corev1.PodSpec{
			NodeName:           trNode,
			ServiceAccountName: trSA,
			Containers:         []corev1.Container{{Name: "main", Image: "nginx:1.27"}},
		},
	}
}

// apiEnv is what every container's environment starts with.
func apiEnv(host, port string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "KUBERNETES_SERVICE_HOST", Value: host},
		{Name: "KUBERNETES_SERVICE_PORT", Value: port},
		{Name: "KUBERNETES_SERVICE_PORT_HTTPS", Value: port},
		{Name: "KUBERNETES_PORT", Value: "tcp://" + host + ":" + port},
		{Name: "KUBERNETES_PORT_443_TCP", Value: "tcp://" + host + ":" + port},
		{Name: "KUBERNETES_PORT_443_TCP_PROTO", Value: "tcp"},
		{Name: "KUBERNETES_PORT_443_TCP_PORT", Value: port},
		{Name: "KUBERNETES_PORT_443_TCP_ADDR", Value: host},
	}
}

// effective is the environment a container sees: a later variable overrides an earlier one.
func effective(env []corev1.EnvVar) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range env {
		m[e.Name] = e
	}
	return m
}

// between returns the variables after the apiserver ones and before the container's own.
func between(t *testing.T, env []corev1.EnvVar, own int) map[string]string {
	t.Helper()
	n := len(apiEnv("", ""))
	if len(env) < n+own {
		t.Fatalf("env has %d variables, want at least %d", len(env), n+own)
	}
	m := map[string]string{}
	for _, e := range env[n : len(env)-own] {
		m[e.Name] = e.Value
	}
	return m
}

// resolveField is what a kubelet gives a downward-API field of pod p.
func resolveField(p *corev1.Pod, path string) (string, bool) {
	switch path {
	case "spec.nodeName":
		return p.Spec.NodeName, true
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, true
	}
	// The kubelet's own code for the object's metadata.
	v, err := fieldpath.ExtractFieldPathAsString(p, path)
	return v, err == nil
}

var hashed = regexp.MustCompile(`-[0-9a-f]{10}$`)

func TestHostName(t *testing.T) {
	long := strings.Repeat("a", 60)
	tests := []struct {
		name, vc, namespace, object string
		// want is the exact name; when empty the name must be the readable form cut and
		// hashed, starting with the first 40 characters of the readable form.
		want string
	}{
		{name: "short", vc: "alpha", namespace: "app", object: "web", want: "web-x-app-x-alpha"},
		{name: "dotted object name", vc: "alpha", namespace: "app", object: "kube-root-ca.crt", want: "kube-root-ca.crt-x-app-x-alpha"},
		{name: "exactly 63 characters", vc: "alpha", namespace: "app", object: strings.Repeat("b", 49), want: strings.Repeat("b", 49) + "-x-app-x-alpha"},
		{name: "64 characters", vc: "alpha", namespace: "app", object: strings.Repeat("b", 50)},
		{name: "long name", vc: "alpha", namespace: "app", object: long},
		{name: "long namespace", vc: "alpha", namespace: long, object: "web"},
		{name: "long virtual cluster", vc: long, namespace: "app", object: "web"},
		{name: "253-character name", vc: "alpha", namespace: "app", object: strings.Repeat("c", 253)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := HostName(tc.vc, tc.namespace, tc.object)
			if len(got) > naming.MaxLength {
				t.Errorf("HostName = %q, %d characters, want at most %d", got, len(got), naming.MaxLength)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("HostName = %q is not a valid object name: %v", got, errs)
			}
			if again := HostName(tc.vc, tc.namespace, tc.object); again != got {
				t.Errorf("HostName is not stable: %q, then %q", got, again)
			}
			readable := tc.object + "-x-" + tc.namespace + "-x-" + tc.vc
			if tc.want != "" {
				if got != tc.want {
					t.Errorf("HostName = %q, want %q", got, tc.want)
				}
				return
			}
			if len(got) != naming.MaxLength || !strings.HasPrefix(got, readable[:40]) || !hashed.MatchString(got) {
				t.Errorf("HostName = %q, want %q cut to %d characters and ending in a hash", got, readable, naming.MaxLength)
			}
		})
	}
}

func TestHostNameDistinct(t *testing.T) {
	long := strings.Repeat("a", 60)
	inputs := [][3]string{ // vc, namespace, name
		{"alpha", "app", "web"},
		{"alpha", "app", "web2"},
		{"alpha", "app2", "web"},
		{"beta", "app", "web"},
		{"alpha", "app", long + "1"},
		{"alpha", "app", long + "2"},
		{"alpha", long + "1", "web"},
		{"alpha", long + "2", "web"},
		// The separator inside a part must not make two objects read alike.
		{"v", "c", "a-x-b"}, {"v", "b-x-c", "a"}, // a-x-b-x-c-x-v
		{"x-v", "b", "a"}, {"v", "b-x", "a"}, // a-x-b-x-x-v
		{"v", "b", "a-x"}, {"v", "x-b", "a"}, // a-x-x-b-x-v
		{"x-v", "c", "a"}, {"v", "c-x", "a"}, {"v-x", "c", "a"}, // the last: a-x-c-x-v-x, not a-x-c-x-v
		{"alpha", "c", long + "-x-b"}, {"alpha", "b-x-c", long},
		{"beta-x-gamma", "app", "web"}, {"gamma", "app-x-beta", "web"}, {"gamma", "app", "web-x-beta"},
	}
	seen := map[string][3]string{}
	for _, in := range inputs {
		got := HostName(in[0], in[1], in[2])
		if prev, ok := seen[got]; ok {
			t.Errorf("HostName%v = HostName%v = %q", in, prev, got)
		}
		seen[got] = in
		if len(got) > naming.MaxLength {
			t.Errorf("HostName%v = %q, longer than %d", in, got, naming.MaxLength)
		}
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("HostName%v = %q is not a valid object name: %v", in, got, errs)
		}
	}
}

func TestTokenSecretNameAndKey(t *testing.T) {
	if got, want := TokenSecretName("web-x-app-x-alpha"), "web-x-app-x-alpha-x-token"; got != want {
		t.Errorf("TokenSecretName = %q, want %q", got, want)
	}
	// No copy of a tenant object takes a token Secret's name: not of VirtualCluster
	// "alpha-token" beside "alpha", nor of one named to look like it.
	for _, vc := range []string{"alpha-token", "alpha-x-token", "token"} {
		for _, ns := range []string{"app", "app-x-alpha"} {
			if got := HostName(vc, ns, "web"); got == TokenSecretName(HostName("alpha", "app", "web")) {
				t.Errorf("HostName(%q, %q, web) = %q, the token Secret of alpha's pod app/web", vc, ns, got)
			}
		}
	}
	a, b := hn(strings.Repeat("a", 100)), hn(strings.Repeat("a", 101))
	for _, pod := range []string{a, b} {
		got := TokenSecretName(pod)
		if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
			t.Errorf("TokenSecretName(%q) = %q is not a valid Secret name: %v", pod, got, errs)
		}
		if !strings.HasPrefix(got, pod) {
			t.Errorf("TokenSecretName(%q) = %q does not name its pod", pod, got)
		}
	}
	if TokenSecretName(a) == TokenSecretName(b) {
		t.Errorf("two host pods share the token Secret %q", TokenSecretName(a))
	}

	for _, tc := range []struct {
		index int
		want  string
	}{{0, "token-0"}, {1, "token-1"}, {12, "token-12"}} {
		got := TokenKey(tc.index)
		if got != tc.want {
			t.Errorf("TokenKey(%d) = %q, want %q", tc.index, got, tc.want)
		}
		if errs := validation.IsConfigMapKey(got); len(errs) > 0 {
			t.Errorf("TokenKey(%d) = %q is not a valid Secret key: %v", tc.index, got, errs)
		}
	}
}

func TestPod(t *testing.T) {
	apiVars := apiEnv(trAPIHost, "6443")
	svc := func(namespace, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec:       corev1.ServiceSpec{ClusterIP: clusterIP, Ports: ports},
		}
	}
	services := []*corev1.Service{
		svc(trNS, "redis", "10.0.0.11", corev1.ServicePort{Port: 6379}),
		svc(trNS, "my-api", "10.0.0.12", corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
			corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}),
		svc("other", "db", "10.0.0.13", corev1.ServicePort{Port: 5432}),
		svc(trNS, "headless", corev1.ClusterIPNone, corev1.ServicePort{Port: 80}),
		svc(trNS, "pending", "", corev1.ServicePort{Port: 80}),
		svc(trNS, "kubernetes", "10.0.0.1", corev1.ServicePort{Name: "https", Port: 443}),
		svc(metav1.NamespaceDefault, "kubernetes", "10.0.0.1", corev1.ServicePort{Name: "https", Port: 443}),
	}
	serviceLinks := map[string]string{
		"REDIS_SERVICE_HOST":        "10.0.0.11",
		"REDIS_SERVICE_PORT":        "6379",
		"REDIS_PORT":                "tcp://10.0.0.11:6379",
		"REDIS_PORT_6379_TCP":       "tcp://10.0.0.11:6379",
		"REDIS_PORT_6379_TCP_PROTO": "tcp",
		"REDIS_PORT_6379_TCP_PORT":  "6379",
		"REDIS_PORT_6379_TCP_ADDR":  "10.0.0.11",
		"MY_API_SERVICE_HOST":       "10.0.0.12",
		"MY_API_SERVICE_PORT":       "80",
		"MY_API_SERVICE_PORT_HTTP":  "80",
		"MY_API_SERVICE_PORT_DNS":   "53",
		"MY_API_PORT":               "tcp://10.0.0.12:80",
		"MY_API_PORT_80_TCP":        "tcp://10.0.0.12:80",
		"MY_API_PORT_80_TCP_PROTO":  "tcp",
		"MY_API_PORT_80_TCP_PORT":   "80",
		"MY_API_PORT_80_TCP_ADDR":   "10.0.0.12",
		"MY_API_PORT_53_UDP":        "udp://10.0.0.12:53",
		"MY_API_PORT_53_UDP_PROTO":  "udp",
		"MY_API_PORT_53_UDP_PORT":   "53",
		"MY_API_PORT_53_UDP_ADDR":   "10.0.0.12",
	}
	ownEnv := []corev1.EnvVar{{Name: "REDIS_SERVICE_HOST", Value: "redis.example"}, {Name: "GREETING", Value: "hi"}}

	tests := []struct {
		name       string
		translator func(*Translator)
		pod        func(*corev1.Pod)
		services   []*corev1.Service
		check      func(t *testing.T, tenant, host *corev1.Pod, refs Refs)
	}{
		{
			name: "metadata",
			pod: func(p *corev1.Pod) {
				p.Labels = map[string]string{
					"app": "web", "app.kubernetes.io/name": "shop", "example.com/keep": "1", "notkubenest.io/keep": "2",
					naming.LabelVirtualCluster: "beta", LabelOrigin: "spoofed", "team.kubenest.io/x": "y",
					longPrefix + "/too-long": "z",
				}
				p.Annotations = map[string]string{
					"note": "hello", AnnotationTenantName: "spoofed", AnnotationTenantUID: "spoofed",
					"kubenest.io/config-hash": "x", "sub.kubenest.io/a": "b",
					// What host components act on: never on the host pod.
					"k8s.v1.cni.cncf.io/networks": "host-network", "cni.projectcalico.org/ipAddrs": `["10.244.1.250"]`,
					"sidecar.istio.io/inject": "true",
				}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				if host.Name != "web-x-app-x-alpha" || host.Namespace != trHostNS {
					t.Errorf("host pod is %s/%s, want %s/web-x-app-x-alpha", host.Namespace, host.Name, trHostNS)
				}
				// The tenant's labels, each under tenant.kubenest.io, but for its own kubenest.io
				// ones and one whose host key would be too long; and the host's selector.
				wantLabels := map[string]string{
					"tenant.kubenest.io/app": "web", "app.kubernetes.io.tenant.kubenest.io/name": "shop",
					"example.com.tenant.kubenest.io/keep": "1", "notkubenest.io.tenant.kubenest.io/keep": "2",
					naming.LabelVirtualCluster: trVC, LabelOrigin: OriginClusterTree,
				}
				if !reflect.DeepEqual(host.Labels, wantLabels) {
					t.Errorf("labels = %v, want %v", host.Labels, wantLabels)
				}
				if !labels.SelectorFromSet(HostSelector(trVC)).Matches(labels.Set(host.Labels)) {
					t.Errorf("HostSelector(%q) does not select the host pod (labels %v)", trVC, host.Labels)
				}
				if labels.SelectorFromSet(HostSelector("beta")).Matches(labels.Set(host.Labels)) {
					t.Errorf("HostSelector(beta) selects a host pod of %s", trVC)
				}
				// KubeNest's only: none of the tenant's annotations.
				wantAnnotations := map[string]string{
					AnnotationTenantName:           "web",
					AnnotationTenantNamespace:      trNS,
					AnnotationTenantUID:            string(trUID),
					AnnotationTenantNode:           trNode,
					AnnotationTenantServiceAccount: trSA,
					AnnotationTenantMetadata:       MetadataDigest(tenant),
					AnnotationTenantGeneration:     "3",
				}
				if !reflect.DeepEqual(host.Annotations, wantAnnotations) {
					t.Errorf("annotations = %v, want %v", host.Annotations, wantAnnotations)
				}
			},
		},
		{
			name: "tenant pod without labels or annotations",
			pod:  func(p *corev1.Pod) { p.Labels, p.Annotations = nil, nil },
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if !reflect.DeepEqual(host.Labels, HostSelector(trVC)) {
					t.Errorf("labels = %v, want %v", host.Labels, HostSelector(trVC))
				}
				if host.Annotations[AnnotationTenantName] != "web" || len(host.Annotations) != 7 {
					t.Errorf("annotations = %v, want KubeNest's seven", host.Annotations)
				}
			},
		},
		{
			name: "host aliases and pod-level resources are carried over",
			pod: func(p *corev1.Pod) {
				p.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"foo.local", "bar.local"}}}
				p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				if !reflect.DeepEqual(host.Spec.HostAliases, tenant.Spec.HostAliases) || !reflect.DeepEqual(host.Spec.Resources, tenant.Spec.Resources) {
					t.Errorf("hostAliases %v, resources %v: want the tenant's", host.Spec.HostAliases, host.Spec.Resources)
				}
			},
		},
		{
			name: "scheduling, identity and host settings are not carried over",
			pod: func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{"disk": "ssd"}
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}},
					}}},
				}}
				p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
				p.Spec.PriorityClassName = "system-node-critical"
				p.Spec.Priority = ptr.To[int32](2000001000)
				p.Spec.SchedulerName = "tenant-scheduler"
				p.Spec.AutomountServiceAccountToken = ptr.To(true)
				p.Spec.EnableServiceLinks = ptr.To(true)
				p.Spec.DNSPolicy = corev1.DNSClusterFirst
				p.Spec.DNSConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.10"}}
				p.Spec.DeprecatedServiceAccount = trSA
			},
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				s := host.Spec
				if s.NodeName != "" || s.NodeSelector != nil || s.Affinity != nil || s.Tolerations != nil ||
					s.PriorityClassName != "" || s.Priority != nil || s.SchedulerName != "" {
					t.Errorf("scheduling carried over: nodeName %q, nodeSelector %v, affinity %v, tolerations %v, priorityClassName %q, priority %v, schedulerName %q",
						s.NodeName, s.NodeSelector, s.Affinity, s.Tolerations, s.PriorityClassName, s.Priority, s.SchedulerName)
				}
				if s.ServiceAccountName != HostServiceAccount || s.DeprecatedServiceAccount != "" {
					t.Errorf("service account = %q/%q, want %s, KubeNest's, without the pull Secrets of the host namespace's default", s.ServiceAccountName, s.DeprecatedServiceAccount, HostServiceAccount)
				}
				if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
					t.Errorf("automountServiceAccountToken = %v, want false", s.AutomountServiceAccountToken)
				}
				if s.EnableServiceLinks == nil || *s.EnableServiceLinks {
					t.Errorf("enableServiceLinks = %v, want false", s.EnableServiceLinks)
				}
				// The tenant's cluster DNS first, with a tenant node's search path; the pod's own
				// settings after it.
				if s.DNSPolicy != corev1.DNSNone || s.DNSConfig == nil ||
					!slices.Equal(s.DNSConfig.Nameservers, []string{"10.254.0.10", "10.0.0.10"}) ||
					len(s.DNSConfig.Searches) != 3 || s.DNSConfig.Searches[0] != testTenantPod().Namespace+".svc.cluster.local" {
					t.Errorf("dnsPolicy = %q, dnsConfig = %v, want None with the tenant's DNS", s.DNSPolicy, s.DNSConfig)
				}
			},
		},
		{
			name: "the pod's run settings are kept",
			pod: func(p *corev1.Pod) {
				p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
				p.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
				p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsNonRoot: ptr.To(true)}
				p.Spec.ShareProcessNamespace = ptr.To(true)
				p.Spec.OS = &corev1.PodOS{Name: corev1.Linux}
				p.Spec.HostUsers = ptr.To(false)
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				s, want := host.Spec, tenant.Spec
				if s.RestartPolicy != want.RestartPolicy ||
					!reflect.DeepEqual(s.TerminationGracePeriodSeconds, want.TerminationGracePeriodSeconds) ||
					!reflect.DeepEqual(s.ActiveDeadlineSeconds, want.ActiveDeadlineSeconds) ||
					!reflect.DeepEqual(s.SecurityContext, want.SecurityContext) ||
					!reflect.DeepEqual(s.ShareProcessNamespace, want.ShareProcessNamespace) ||
					!reflect.DeepEqual(s.OS, want.OS) || !reflect.DeepEqual(s.HostUsers, want.HostUsers) {
					t.Errorf("host spec %+v does not keep the tenant's run settings %+v", s, want)
				}
			},
		},
		{
			name: "a grace period of years is the host's at most",
			pod: func(p *corev1.Pod) {
				p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](3_000_000_000)
			},
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if g := host.Spec.TerminationGracePeriodSeconds; g == nil || *g != MaxGracePeriodSeconds {
					t.Errorf("terminationGracePeriodSeconds %v, want %d: a tenant's pod would hold a drain of the host's node", g, MaxGracePeriodSeconds)
				}
			},
		},
		{
			name: "containers are kept apart from their environment",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers = []corev1.Container{{
					Name: "main", Image: "nginx:1.27", Command: []string{"nginx"}, Args: []string{"-g", "daemon off;"},
					WorkingDir: "/srv",
					Ports:      []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")},
					},
					VolumeMounts:   []corev1.VolumeMount{{Name: "cache", MountPath: "/cache"}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready"}}},
					SecurityContext: &corev1.SecurityContext{
						AllowPrivilegeEscalation: ptr.To(false),
						Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
					},
				}, {Name: "sidecar", Image: "busybox"}}
				p.Spec.Volumes = []corev1.Volume{{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				if len(host.Spec.Containers) != len(tenant.Spec.Containers) {
					t.Fatalf("%d host containers, want %d", len(host.Spec.Containers), len(tenant.Spec.Containers))
				}
				for i := range host.Spec.Containers {
					got, want := host.Spec.Containers[i], tenant.Spec.Containers[i]
					got.Env, want.Env = nil, nil
					if !reflect.DeepEqual(got, want) {
						t.Errorf("container %d = %+v, want %+v", i, got, want)
					}
				}
			},
		},
		{
			name: "hostname is the tenant pod's name",
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if host.Spec.Hostname != "web" {
					t.Errorf("hostname = %q, want web", host.Spec.Hostname)
				}
			},
		},
		{
			name: "hostname is the tenant's spec.hostname when set",
			pod:  func(p *corev1.Pod) { p.Spec.Hostname = "db-0"; p.Spec.Subdomain = "db" },
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if host.Spec.Hostname != "db-0" {
					t.Errorf("hostname = %q, want db-0", host.Spec.Hostname)
				}
			},
		},
		{
			name: "long pod name gives a 63-character hostname",
			pod:  func(p *corev1.Pod) { p.Name = strings.Repeat("web", 30) },
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				if len(host.Spec.Hostname) > 63 || !strings.HasPrefix(host.Spec.Hostname, tenant.Name[:40]) {
					t.Errorf("hostname = %q, want %q shortened to 63 characters", host.Spec.Hostname, tenant.Name)
				}
			},
		},
		{
			name: "dotted pod name gives a valid hostname",
			pod:  func(p *corev1.Pod) { p.Name = "web.v2-7d9f8b6c5d-x2x4z" },
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if host.Spec.Hostname != "web-v2-7d9f8b6c5d-x2x4z" {
					t.Errorf("hostname = %q, want web-v2-7d9f8b6c5d-x2x4z", host.Spec.Hostname)
				}
			},
		},
		{
			name: "long dotted pod name",
			pod:  func(p *corev1.Pod) { p.Name = strings.Repeat("a", 50) + "." + strings.Repeat("b", 50) },
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if len(host.Spec.Hostname) > 63 || !strings.HasPrefix(host.Spec.Hostname, strings.Repeat("a", 50)+"-b") {
					t.Errorf("hostname = %q, want the pod name with dashes, shortened to 63 characters", host.Spec.Hostname)
				}
			},
		},
		{
			name: "apiserver variables come first, the container's own after",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "KUBERNETES_SERVICE_HOST", Value: "override"}, {Name: "GREETING", Value: "hi"}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				want := append(apiEnv(trAPIHost, "6443"), tenant.Spec.Containers[0].Env...)
				env := host.Spec.Containers[0].Env
				if !reflect.DeepEqual(env, want) {
					t.Errorf("env = %v, want %v", env, want)
				}
				if got := effective(env)["KUBERNETES_SERVICE_HOST"].Value; got != "override" {
					t.Errorf("KUBERNETES_SERVICE_HOST = %q, want the container's override", got)
				}
			},
		},
		{
			name:       "IPv6 apiserver address",
			translator: func(tr *Translator) { tr.APIServerHost = "fd00:10:96::1"; tr.APIServerPort = 443 },
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				env := effective(host.Spec.Containers[0].Env)
				for name, want := range map[string]string{
					"KUBERNETES_SERVICE_HOST":      "fd00:10:96::1",
					"KUBERNETES_SERVICE_PORT":      "443",
					"KUBERNETES_PORT":              "tcp://[fd00:10:96::1]:443",
					"KUBERNETES_PORT_443_TCP":      "tcp://[fd00:10:96::1]:443",
					"KUBERNETES_PORT_443_TCP_ADDR": "fd00:10:96::1",
				} {
					if got := env[name].Value; got != want {
						t.Errorf("%s = %q, want %q", name, got, want)
					}
				}
			},
		},
		{
			name: "configMapKeyRef and secretKeyRef",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{
					{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "color"}}},
					{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password", Optional: ptr.To(true)}}},
				}
			},
			check: func(t *testing.T, _, host *corev1.Pod, refs Refs) {
				env := effective(host.Spec.Containers[0].Env)
				wantCM := &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: hn("settings")}, Key: "color"}
				if got := env["COLOR"].ValueFrom; got == nil || !reflect.DeepEqual(got.ConfigMapKeyRef, wantCM) {
					t.Errorf("COLOR comes from %+v, want %+v", got, wantCM)
				}
				wantSecret := &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: hn("creds")}, Key: "password", Optional: ptr.To(true)}
				if got := env["PASSWORD"].ValueFrom; got == nil || !reflect.DeepEqual(got.SecretKeyRef, wantSecret) {
					t.Errorf("PASSWORD comes from %+v, want %+v", got, wantSecret)
				}
				want := Refs{ConfigMaps: []string{"settings"}, Secrets: []string{"creds"}}
				if !reflect.DeepEqual(refs, want) {
					t.Errorf("refs = %+v, want %+v", refs, want)
				}
			},
		},
		{
			name: "fieldRefs to values the host pod does not share read the tenant's",
			pod: func(p *corev1.Pod) {
				p.Labels["tier"] = "front"
				for i, path := range []string{"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
					"spec.serviceAccountName", "status.podIP", "status.hostIP", "metadata.labels['tier']", "metadata.annotations['note']"} {
					p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{
						Name:      fmt.Sprintf("FIELD_%d", i),
						ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}},
					})
				}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				rewritten := map[string]string{
					"metadata.name":                "metadata.annotations['kubenest.io/tenant-name']",
					"metadata.namespace":           "metadata.annotations['kubenest.io/tenant-namespace']",
					"metadata.uid":                 "metadata.annotations['kubenest.io/tenant-uid']",
					"spec.nodeName":                "metadata.annotations['kubenest.io/tenant-node']",
					"spec.serviceAccountName":      "metadata.annotations['kubenest.io/tenant-service-account']",
					"metadata.labels['tier']":      "metadata.labels['tenant.kubenest.io/tier']",
					"metadata.annotations['note']": "metadata.annotations['tenant.kubenest.io/note']",
				}
				hostEnv := effective(host.Spec.Containers[0].Env)
				for _, e := range tenant.Spec.Containers[0].Env {
					from, to := e.ValueFrom.FieldRef, hostEnv[e.Name].ValueFrom
					if to == nil || to.FieldRef == nil {
						t.Errorf("%s: host env has no fieldRef", from.FieldPath)
						continue
					}
					want, ok := rewritten[from.FieldPath]
					if !ok {
						want = from.FieldPath
					}
					if to.FieldRef.FieldPath != want || to.FieldRef.APIVersion != from.APIVersion {
						t.Errorf("%s: host fieldRef = %+v, want path %q", from.FieldPath, to.FieldRef, want)
					}
					// What the host kubelet gives is what the tenant's would.
					if tenantValue, ok := resolveField(tenant, from.FieldPath); ok {
						if hostValue, _ := resolveField(host, to.FieldRef.FieldPath); hostValue != tenantValue || tenantValue == "" {
							t.Errorf("%s: the host pod gives %q, the tenant pod %q", from.FieldPath, hostValue, tenantValue)
						}
					}
				}
			},
		},
		{
			name: "envFrom",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
					{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Optional: ptr.To(true)}},
				}
			},
			check: func(t *testing.T, _, host *corev1.Pod, refs Refs) {
				want := []corev1.EnvFromSource{
					{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: hn("settings")}}},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: hn("creds")}, Optional: ptr.To(true)}},
				}
				if got := host.Spec.Containers[0].EnvFrom; !reflect.DeepEqual(got, want) {
					t.Errorf("envFrom = %+v, want %+v", got, want)
				}
				wantRefs := Refs{ConfigMaps: []string{"settings"}, Secrets: []string{"creds"}}
				if !reflect.DeepEqual(refs, wantRefs) {
					t.Errorf("refs = %+v, want %+v", refs, wantRefs)
				}
			},
		},
		{
			name: "init containers are translated like containers",
			pod: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{
					Name: "setup", Image: "busybox",
					Env: []corev1.EnvVar{
						{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
						{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: "init-settings"}, Key: "color"}}},
					},
					EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "init-creds"}}}},
				}}
			},
			services: services,
			check: func(t *testing.T, _, host *corev1.Pod, refs Refs) {
				if len(host.Spec.InitContainers) != 1 {
					t.Fatalf("%d init containers, want 1", len(host.Spec.InitContainers))
				}
				c := host.Spec.InitContainers[0]
				if !reflect.DeepEqual(c.Env[:len(apiVars)], apiVars) {
					t.Errorf("init container env starts with %v, want %v", c.Env[:len(apiVars)], apiVars)
				}
				if got := between(t, c.Env, 2); !reflect.DeepEqual(got, serviceLinks) {
					t.Errorf("init container service links = %v, want %v", got, serviceLinks)
				}
				env := effective(c.Env)
				if got := env["POD"].ValueFrom.FieldRef.FieldPath; got != "metadata.annotations['"+AnnotationTenantName+"']" {
					t.Errorf("POD comes from %q, want the tenant-name annotation", got)
				}
				if got := env["COLOR"].ValueFrom.ConfigMapKeyRef.Name; got != hn("init-settings") {
					t.Errorf("COLOR comes from ConfigMap %q, want %q", got, hn("init-settings"))
				}
				if got := c.EnvFrom[0].SecretRef.Name; got != hn("init-creds") {
					t.Errorf("envFrom Secret = %q, want %q", got, hn("init-creds"))
				}
				want := Refs{ConfigMaps: []string{"init-settings"}, Secrets: []string{"init-creds"}}
				if !reflect.DeepEqual(refs, want) {
					t.Errorf("refs = %+v, want %+v", refs, want)
				}
			},
		},
		{
			name:     "service links when enableServiceLinks is unset",
			pod:      func(p *corev1.Pod) { p.Spec.Containers[0].Env = ownEnv },
			services: services,
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				env := host.Spec.Containers[0].Env
				if !reflect.DeepEqual(env[:len(apiVars)], apiVars) {
					t.Errorf("env starts with %v, want %v", env[:len(apiVars)], apiVars)
				}
				if got := between(t, env, len(ownEnv)); !reflect.DeepEqual(got, serviceLinks) {
					t.Errorf("service links = %v, want %v", got, serviceLinks)
				}
				if !reflect.DeepEqual(env[len(env)-len(ownEnv):], ownEnv) {
					t.Errorf("env ends with %v, want the container's own %v", env[len(env)-len(ownEnv):], ownEnv)
				}
				if got := effective(env)["REDIS_SERVICE_HOST"].Value; got != "redis.example" {
					t.Errorf("REDIS_SERVICE_HOST = %q, want the container's override", got)
				}
				if got := effective(env)["KUBERNETES_SERVICE_HOST"].Value; got != trAPIHost {
					t.Errorf("KUBERNETES_SERVICE_HOST = %q, want %q (not the tenant's kubernetes Service)", got, trAPIHost)
				}
			},
		},
		{
			name:     "service links when enableServiceLinks is true",
			pod:      func(p *corev1.Pod) { p.Spec.EnableServiceLinks = ptr.To(true) },
			services: services,
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				if got := between(t, host.Spec.Containers[0].Env, 0); !reflect.DeepEqual(got, serviceLinks) {
					t.Errorf("service links = %v, want %v", got, serviceLinks)
				}
			},
		},
		{
			name:     "no service links when enableServiceLinks is false",
			pod:      func(p *corev1.Pod) { p.Spec.EnableServiceLinks = ptr.To(false); p.Spec.Containers[0].Env = ownEnv },
			services: services,
			check: func(t *testing.T, _, host *corev1.Pod, _ Refs) {
				want := append(apiEnv(trAPIHost, "6443"), ownEnv...)
				if got := host.Spec.Containers[0].Env; !reflect.DeepEqual(got, want) {
					t.Errorf("env = %v, want %v", got, want)
				}
			},
		},
		{
			name: "configMap and secret volumes",
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{
					{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "settings"},
						Items:                []corev1.KeyToPath{{Key: "color", Path: "color.txt"}}, DefaultMode: ptr.To[int32](0o440)}}},
					{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
						SecretName: "creds", Optional: ptr.To(true)}}},
				}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, refs Refs) {
				want := tenant.DeepCopy().Spec.Volumes
				want[0].ConfigMap.Name = hn("settings")
				want[1].Secret.SecretName = hn("creds")
				if !reflect.DeepEqual(host.Spec.Volumes, want) {
					t.Errorf("volumes = %+v, want %+v", host.Spec.Volumes, want)
				}
				wantRefs := Refs{ConfigMaps: []string{"settings"}, Secrets: []string{"creds"}}
				if !reflect.DeepEqual(refs, wantRefs) {
					t.Errorf("refs = %+v, want %+v", refs, wantRefs)
				}
			},
		},
		{
			name: "downwardAPI volume",
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{
					Items: []corev1.DownwardAPIVolumeFile{
						{Path: "name", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}},
						{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}},
						{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.labels"}},
						{Path: "cpu", ResourceFieldRef: &corev1.ResourceFieldSelector{ContainerName: "main", Resource: "limits.cpu"}},
					},
				}}}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				want := tenant.DeepCopy().Spec.Volumes
				want[0].DownwardAPI.Items[0].FieldRef.FieldPath = "metadata.annotations['" + AnnotationTenantName + "']"
				want[0].DownwardAPI.Items[1].FieldRef.FieldPath = "metadata.annotations['" + AnnotationTenantNamespace + "']"
				want[0].DownwardAPI.Items[2].FieldRef.FieldPath = "metadata.annotations['" + AnnotationTenantLabels + "']"
				if !reflect.DeepEqual(host.Spec.Volumes, want) {
					t.Errorf("volumes = %+v, want %+v", host.Spec.Volumes, want)
				}
				// Each file the host kubelet writes is the one the tenant's would.
				for i, item := range host.Spec.Volumes[0].DownwardAPI.Items[:3] {
					tenantValue, _ := resolveField(tenant, tenant.Spec.Volumes[0].DownwardAPI.Items[i].FieldRef.FieldPath)
					if v, _ := resolveField(host, item.FieldRef.FieldPath); v != tenantValue || v == "" {
						t.Errorf("%s: the host pod gives %q, the tenant pod %q", item.Path, v, tenantValue)
					}
				}
			},
		},
		{
			name: "downward API of annotations: only those read are on the host pod",
			pod: func(p *corev1.Pod) {
				p.Annotations = map[string]string{"note": "hello", "k8s.v1.cni.cncf.io/networks": "host-network"}
				p.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
						{Path: "annotations", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations"}},
						{Path: "network", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations['k8s.v1.cni.cncf.io/networks']"}},
					}}}},
				}}}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				items := host.Spec.Volumes[0].Projected.Sources[0].DownwardAPI.Items
				for i, item := range items {
					tenantValue, _ := resolveField(tenant, tenant.Spec.Volumes[0].Projected.Sources[0].DownwardAPI.Items[i].FieldRef.FieldPath)
					if v, _ := resolveField(host, item.FieldRef.FieldPath); v != tenantValue || v == "" {
						t.Errorf("%s: the host pod gives %q, the tenant pod %q", item.Path, v, tenantValue)
					}
				}
				if _, ok := host.Annotations["k8s.v1.cni.cncf.io/networks"]; ok {
					t.Errorf("the CNI annotation reached the host pod: %v", host.Annotations)
				}
			},
		},
		{
			name: "downward API of labels and annotations the host pod does not carry as is",
			pod: func(p *corev1.Pod) {
				p.Labels = map[string]string{"app": "web", "app.kubernetes.io/name": "shop", "kubenest.io/mine": "label",
					longPrefix + "/x": "long label", "both": "as label"}
				p.Annotations = map[string]string{"note": "hello", "kubenest.io/mine": "annotation", longPrefix + "/x": "long annotation",
					"both": "as annotation", "cni.projectcalico.org/ipAddrs": `["10.244.1.250"]`}
				var items []corev1.DownwardAPIVolumeFile
				for i, path := range []string{
					"metadata.labels", "metadata.annotations",
					"metadata.labels['app.kubernetes.io/name']", "metadata.labels['kubenest.io/mine']", "metadata.annotations['kubenest.io/mine']",
					"metadata.labels['" + longPrefix + "/x']", "metadata.annotations['" + longPrefix + "/x']",
					"metadata.labels['both']", "metadata.annotations['both']",
					"metadata.labels['missing']", "metadata.annotations['missing']",
				} {
					items = append(items, corev1.DownwardAPIVolumeFile{Path: fmt.Sprint(i), FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: path}})
				}
				p.Spec.Volumes = []corev1.Volume{{Name: "info", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: items}}}}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, _ Refs) {
				// Each file the host kubelet writes is the one the tenant's would, to the byte.
				for i, item := range host.Spec.Volumes[0].DownwardAPI.Items {
					path := tenant.Spec.Volumes[0].DownwardAPI.Items[i].FieldRef.FieldPath
					tenantValue, ok := resolveField(tenant, path)
					hostValue, hostOK := resolveField(host, item.FieldRef.FieldPath)
					if !ok || !hostOK || hostValue != tenantValue {
						t.Errorf("%s (as %s): the host pod gives %q, the tenant pod %q", path, item.FieldRef.FieldPath, hostValue, tenantValue)
					}
				}
				if v := host.Annotations[AnnotationTenantLabels]; v != fieldpath.FormatMap(tenant.Labels) {
					t.Errorf("%s = %q, want all the tenant's labels as the kubelet writes them", AnnotationTenantLabels, v)
				}
				for k := range host.Annotations {
					if errs := validation.IsQualifiedName(k); len(errs) > 0 || !strings.Contains(k, "kubenest.io/") {
						t.Errorf("host pod annotation %q: not one of KubeNest's valid keys %v", k, errs)
					}
				}
				for _, k := range []string{"cni.projectcalico.org/ipAddrs", "kubenest.io/mine"} {
					if _, ok := host.Annotations[k]; ok {
						t.Errorf("the tenant's annotation %s reached the host pod as is", k)
					}
				}
				wantLabels := map[string]string{"tenant.kubenest.io/app": "web", "app.kubernetes.io.tenant.kubenest.io/name": "shop",
					"tenant.kubenest.io/both": "as label", naming.LabelVirtualCluster: trVC, LabelOrigin: OriginClusterTree}
				if !reflect.DeepEqual(host.Labels, wantLabels) {
					t.Errorf("host pod labels %v, want %v", host.Labels, wantLabels)
				}
			},
		},
		{
			name: "projected volumes: tenant tokens instead of host tokens",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{
					{Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true},
					{Name: "vault", MountPath: "/var/run/secrets/vault"},
				}
				p.Spec.Volumes = []corev1.Volume{
					{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						DefaultMode: ptr.To[int32](0o644),
						Sources: []corev1.VolumeProjection{
							{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
							{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
								Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
							{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
								{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
						},
					}}},
					{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
					{Name: "vault", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
						Sources: []corev1.VolumeProjection{
							{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "vault-ca"}, Optional: ptr.To(true)}},
							{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "vault-token"}},
						},
					}}},
				}
			},
			check: func(t *testing.T, tenant, host *corev1.Pod, refs Refs) {
				tokenSecret := TokenSecretName(host.Name)
				token := func(i int, path string) corev1.VolumeProjection {
					return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
						LocalObjectReference: corev1.LocalObjectReference{Name: tokenSecret},
						Items:                []corev1.KeyToPath{{Key: TokenKey(i), Path: path}},
					}}
				}
				want := tenant.DeepCopy().Spec.Volumes
				want[0].Projected.Sources[0] = token(0, "token")
				want[0].Projected.Sources[1].ConfigMap.Name = hn("kube-root-ca.crt")
				want[0].Projected.Sources[2].DownwardAPI.Items[0].FieldRef.FieldPath = "metadata.annotations['" + AnnotationTenantNamespace + "']"
				want[2].Projected.Sources[0].Secret.Name = hn("vault-ca")
				want[2].Projected.Sources[1] = token(1, "vault-token")
				if !reflect.DeepEqual(host.Spec.Volumes, want) {
					t.Errorf("volumes = %+v, want %+v", host.Spec.Volumes, want)
				}
				for _, v := range host.Spec.Volumes {
					if v.Projected == nil {
						continue
					}
					for _, s := range v.Projected.Sources {
						if s.ServiceAccountToken != nil {
							t.Errorf("volume %s asks the host for a service-account token", v.Name)
						}
					}
				}
				if !reflect.DeepEqual(host.Spec.Containers[0].VolumeMounts, tenant.Spec.Containers[0].VolumeMounts) {
					t.Errorf("volume mounts = %+v, want %+v", host.Spec.Containers[0].VolumeMounts, tenant.Spec.Containers[0].VolumeMounts)
				}
				wantRefs := Refs{
					ConfigMaps: []string{"kube-root-ca.crt"},
					Secrets:    []string{"vault-ca"},
					TokenSources: []corev1.ServiceAccountTokenProjection{
						{Path: "token", ExpirationSeconds: ptr.To[int64](3607)},
						{Audience: "vault", Path: "vault-token"},
					},
				}
				if !reflect.DeepEqual(refs, wantRefs) {
					t.Errorf("refs = %+v, want %+v", refs, wantRefs)
				}
			},
		},
		{
			name: "refs are deduplicated and sorted",
			pod: func(p *corev1.Pod) {
				cmEnv := func(name, cm string, optional bool) corev1.EnvVar {
					return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: "k", Optional: ptr.To(optional)}}}
				}
				secretEnv := func(name, s string, optional *bool) corev1.EnvVar {
					return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: "k", Optional: optional}}}
				}
				p.Spec.Containers[0].Env = []corev1.EnvVar{
					cmEnv("A", "zeta", false), cmEnv("B", "mid", true), cmEnv("C", "both-optional", true),
					secretEnv("D", "s-b", ptr.To(true)), secretEnv("E", "s-a", nil),
				}
				p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "both-optional"}, Optional: ptr.To(true)}},
					{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s-a"}, Optional: ptr.To(true)}},
				}
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Env: []corev1.EnvVar{cmEnv("F", "zeta", true)}}}
				p.Spec.Volumes = []corev1.Volume{
					{Name: "mid", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "mid"}}}},
					{Name: "sb", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s-b", Optional: ptr.To(true)}}},
				}
				p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "s-a"}}
			},
			check: func(t *testing.T, _, _ *corev1.Pod, refs Refs) {
				want := Refs{
					ConfigMaps: []string{"both-optional", "mid", "zeta"},
					Secrets:    []string{"regcred", "s-a", "s-b"},
				}
				if !reflect.DeepEqual(refs, want) {
					t.Errorf("refs = %+v, want %+v", refs, want)
				}
			},
		},
		{
			name: "imagePullSecrets",
			pod: func(p *corev1.Pod) {
				p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}
			},
			check: func(t *testing.T, _, host *corev1.Pod, refs Refs) {
				want := []corev1.LocalObjectReference{{Name: hn("regcred")}, {Name: hn("mirror")}}
				if !reflect.DeepEqual(host.Spec.ImagePullSecrets, want) {
					t.Errorf("imagePullSecrets = %v, want %v", host.Spec.ImagePullSecrets, want)
				}
				wantRefs := Refs{Secrets: []string{"mirror", "regcred"}}
				if !reflect.DeepEqual(refs, wantRefs) {
					t.Errorf("refs = %+v, want %+v", refs, wantRefs)
				}
			},
		},
		{
			name: "a pod that refers to nothing needs nothing",
			check: func(t *testing.T, _, host *corev1.Pod, refs Refs) {
				if len(refs.ConfigMaps)+len(refs.Secrets)+len(refs.TokenSources) != 0 {
					t.Errorf("refs = %+v, want none", refs)
				}
				if len(host.Spec.Volumes) != 0 || len(host.Spec.ImagePullSecrets) != 0 {
					t.Errorf("volumes %v, imagePullSecrets %v, want none", host.Spec.Volumes, host.Spec.ImagePullSecrets)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := testTranslator()
			if tc.translator != nil {
				tc.translator(&tr)
			}
			tenant := testTenantPod()
			if tc.pod != nil {
				tc.pod(tenant)
			}
			host, refs, err := tr.Pod(tenant, tc.services)
			if err != nil {
				t.Fatalf("Pod: %v", err)
			}
			// What holds for every host pod.
			if want := HostName(trVC, tenant.Namespace, tenant.Name); host.Name != want || host.Namespace != trHostNS {
				t.Errorf("host pod is %s/%s, want %s/%s", host.Namespace, host.Name, trHostNS, want)
			}
			if errs := validation.IsDNS1123Label(host.Spec.Hostname); len(errs) > 0 {
				t.Errorf("hostname %q is not a DNS label: %v", host.Spec.Hostname, errs)
			}
			if host.Spec.AutomountServiceAccountToken == nil || *host.Spec.AutomountServiceAccountToken {
				t.Errorf("automountServiceAccountToken = %v, want false", host.Spec.AutomountServiceAccountToken)
			}
			tc.check(t, tenant, host, refs)
		})
	}
}

// TestPodStable: the host pod does not depend on the order the tenant's Services are listed in.
func TestPodStable(t *testing.T) {
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: trNS},
			Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	a, b, c := svc("a", "10.0.0.1"), svc("b", "10.0.0.2"), svc("c", "10.0.0.3")
	first, _, err := testTranslator().Pod(testTenantPod(), []*corev1.Service{a, b, c})
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := testTranslator().Pod(testTenantPod(), []*corev1.Service{c, a, b})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, second) {
		t.Errorf("the host pod changes with the order of the Services:\n%+v\n%+v", first.Spec.Containers[0].Env, second.Spec.Containers[0].Env)
	}
}

func TestPodRefused(t *testing.T) {
	volume := func(v corev1.VolumeSource) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.Volumes = []corev1.Volume{{Name: "v", VolumeSource: v}} }
	}
	tests := []struct {
		name  string
		pod   func(*corev1.Pod)
		field string
		// reason, when set, is something the reason must say.
		reason string
	}{
		{name: "hostNetwork", pod: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, field: "spec.hostNetwork"},
		{name: "hostPID", pod: func(p *corev1.Pod) { p.Spec.HostPID = true }, field: "spec.hostPID"},
		{name: "hostIPC", pod: func(p *corev1.Pod) { p.Spec.HostIPC = true }, field: "spec.hostIPC"},
		{
			name: "privileged ephemeral container",
			pod: func(p *corev1.Pod) {
				p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
			},
			field: "spec.ephemeralContainers[0].securityContext.privileged",
		},
		{
			name: "hostPort",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 443, HostPort: 8443}}
			},
			field: "spec.containers[0].ports[1].hostPort",
		},
		{
			name: "privileged container",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "root", Image: "busybox",
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}})
			},
			field: "spec.containers[1].securityContext.privileged",
		},
		{
			name: "capability outside the baseline",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Add: []corev1.Capability{"NET_BIND_SERVICE", "SYS_ADMIN"}}}
			},
			field:  "spec.containers[0].securityContext.capabilities.add",
			reason: "SYS_ADMIN",
		},
		{
			name: "all capabilities",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"ALL"}}}
			},
			field: "spec.containers[0].securityContext.capabilities.add",
		},
		{
			name: "init container hostPort",
			pod: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", Ports: []corev1.ContainerPort{{ContainerPort: 53, HostPort: 53}}}}
			},
			field: "spec.initContainers[0].ports[0].hostPort",
		},
		{
			name: "privileged init container",
			pod: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "ok", Image: "busybox"},
					{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
			},
			field: "spec.initContainers[1].securityContext.privileged",
		},
		{
			name: "init container capability outside the baseline",
			pod: func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}}}
			},
			field:  "spec.initContainers[0].securityContext.capabilities.add",
			reason: "NET_ADMIN",
		},
		{
			name:  "hostPath volume",
			pod:   volume(corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}),
			field: "spec.volumes[0].hostPath",
		},
		{
			name: "persistentVolumeClaim volume after an allowed one",
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{
					{Name: "cache", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				}
			},
			field: "spec.volumes[1].persistentVolumeClaim",
		},
		{
			name:  "nfs volume",
			pod:   volume(corev1.VolumeSource{NFS: &corev1.NFSVolumeSource{Server: "nfs.example", Path: "/export"}}),
			field: "spec.volumes[0]",
		},
		{
			name: "generic ephemeral volume",
			pod: volume(corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}}}}),
			field: "spec.volumes[0]",
		},
		{
			name: "unconfined seccomp profile (past Pod Security baseline)",
			pod: func(p *corev1.Pod) {
				p.Spec.SecurityContext = &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}}
			},
			field:  "spec",
			reason: "Unconfined",
		},
		{
			name: "unsupported projected source",
			pod: volume(corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
				{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Name: ptr.To("bundle"), Path: "ca.crt"}},
			}}}),
			field: "spec.volumes[0].projected.sources[1]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant := testTenantPod()
			tc.pod(tenant)
			host, refs, err := testTranslator().Pod(tenant, nil)
			var forbidden *ForbiddenError
			if !errors.As(err, &forbidden) {
				t.Fatalf("Pod: error %v, want a *ForbiddenError", err)
			}
			if forbidden.Field != tc.field {
				t.Errorf("Field = %q, want %q", forbidden.Field, tc.field)
			}
			if forbidden.Reason == "" || !strings.Contains(forbidden.Reason, tc.reason) {
				t.Errorf("Reason = %q, want a reason that says %q", forbidden.Reason, tc.reason)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, forbidden.Reason) {
				t.Errorf("error %q does not name the field %q and the reason", msg, tc.field)
			}
			if host != nil || !reflect.DeepEqual(refs, Refs{}) {
				t.Errorf("a refused pod gave host pod %v and refs %+v", host, refs)
			}
		})
	}
}

func TestPodAllowed(t *testing.T) {
	tests := []struct {
		name string
		pod  func(*corev1.Pod)
	}{
		{
			name: "NET_BIND_SERVICE and other baseline capabilities",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{
					Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE", "CHOWN", "SETUID", "SETGID"}}}
				p.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox", SecurityContext: &corev1.SecurityContext{
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}}}}}
			},
		},
		{
			name: "privileged false",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(false)}
			},
		},
		{
			name: "container ports without host ports",
			pod: func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 53, Protocol: corev1.ProtocolUDP}}
			},
		},
		{
			name: "emptyDir, configMap, secret, downwardAPI, projected and image volumes",
			pod: func(p *corev1.Pod) {
				p.Spec.Volumes = []corev1.Volume{
					{Name: "a", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "b"}}}},
					{Name: "c", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "c"}}},
					{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
					{Name: "e", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
					{Name: "f", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: "kubenest.io/busybox:1.35", PullPolicy: corev1.PullIfNotPresent}}},
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tenant := testTenantPod()
			tc.pod(tenant)
			if _, _, err := testTranslator().Pod(tenant, nil); err != nil {
				t.Errorf("Pod: %v, want the pod allowed", err)
			}
		})
	}
}

// TestPodLeavesTenantAlone: translating reads the tenant pod and shares nothing with the host
// pod it returns.
func TestPodLeavesTenantAlone(t *testing.T) {
	rich := func() *corev1.Pod {
		p := testTenantPod()
		p.Labels["kubenest.io/mine"] = "x"
		p.Annotations["kubenest.io/mine"] = "x"
		p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000)}
		p.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
		c := corev1.Container{
			Name: "main", Image: "nginx",
			Env: []corev1.EnvVar{
				{Name: "A", Value: "1"},
				{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}, Key: "k"}}},
				{Name: "C", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}},
				{Name: "D", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
			},
			EnvFrom: []corev1.EnvFromSource{
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm2"}}},
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s2"}}},
			},
			SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true)},
		}
		initContainer := *c.DeepCopy()
		initContainer.Name = "init"
		p.Spec.Containers = []corev1.Container{c}
		p.Spec.InitContainers = []corev1.Container{initContainer}
		p.Spec.Volumes = []corev1.Volume{
			{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}},
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s"}}},
			{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
				{Path: "uid", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.uid"}}}}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3600)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "ca"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s3"}}},
				{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "ns", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
			}}}},
		}
		return p
	}
	services := []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: trNS},
		Spec: corev1.ServiceSpec{ClusterIP: "10.0.0.11", Ports: []corev1.ServicePort{{Port: 6379}}}}}
	refused := rich()
	refused.Spec.Volumes = append(refused.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})

	for name, tenant := range map[string]*corev1.Pod{"translated": rich(), "refused": refused} {
		t.Run(name, func(t *testing.T) {
			before := tenant.DeepCopy()
			servicesBefore := services[0].DeepCopy()
			host, refs, err := testTranslator().Pod(tenant, services)
			if !reflect.DeepEqual(tenant, before) {
				t.Fatalf("Pod modified the tenant pod:\n got %+v\nwant %+v", tenant, before)
			}
			if !reflect.DeepEqual(services[0], servicesBefore) {
				t.Fatalf("Pod modified a tenant Service")
			}
			if err != nil {
				return
			}
			// Changing what Pod returned changes nothing in the tenant pod.
			host.Labels["app"], host.Annotations["note"] = "changed", "changed"
			host.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
			for _, cs := range [][]corev1.Container{host.Spec.Containers, host.Spec.InitContainers} {
				for i := range cs {
					cs[i].SecurityContext.RunAsNonRoot = ptr.To(false)
					for j := range cs[i].Env {
						if vf := cs[i].Env[j].ValueFrom; vf != nil {
							switch {
							case vf.ConfigMapKeyRef != nil:
								vf.ConfigMapKeyRef.Key = "changed"
							case vf.SecretKeyRef != nil:
								vf.SecretKeyRef.Key = "changed"
							case vf.FieldRef != nil:
								vf.FieldRef.FieldPath = "changed"
							}
						}
					}
					cs[i].EnvFrom[0].ConfigMapRef.Optional = ptr.To(true)
				}
			}
			for _, v := range host.Spec.Volumes {
				switch {
				case v.ConfigMap != nil:
					v.ConfigMap.Optional = ptr.To(true)
				case v.Secret != nil:
					v.Secret.Optional = ptr.To(true)
				case v.DownwardAPI != nil:
					v.DownwardAPI.Items[0].Path = "changed"
				case v.Projected != nil:
					v.Projected.Sources[1].ConfigMap.Optional = ptr.To(true)
					v.Projected.Sources[3].DownwardAPI.Items[0].Path = "changed"
				}
			}
			refs.TokenSources[0].Path = "changed"
			*refs.TokenSources[0].ExpirationSeconds = 1
			if !reflect.DeepEqual(tenant, before) {
				t.Errorf("the host pod shares state with the tenant pod:\n got %+v\nwant %+v", tenant, before)
			}
		})
	}
}

func TestObject(t *testing.T) {
	tenant := metav1.ObjectMeta{
		Name: "settings", Namespace: trNS, UID: "uid", ResourceVersion: "42", Generation: 3,
		Labels:          map[string]string{"app": "web", LabelOrigin: "spoofed"},
		Annotations:     map[string]string{"note": "x", AnnotationTenantName: "spoofed"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "web", UID: "p"}},
		Finalizers:      []string{"example.com/keep"},
	}
	want := metav1.ObjectMeta{
		Name:        hn("settings"),
		Namespace:   trHostNS,
		Labels:      HostSelector(trVC),
		Annotations: map[string]string{AnnotationTenantName: "settings", AnnotationTenantNamespace: trNS},
	}
	if got := testTranslator().Object(tenant); !reflect.DeepEqual(got, want) {
		t.Errorf("Object = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(HostSelector(trVC), map[string]string{naming.LabelVirtualCluster: trVC, LabelOrigin: OriginClusterTree}) {
		t.Errorf("HostSelector = %v", HostSelector(trVC))
	}
}

func hostRunningStatus() corev1.PodStatus {
	start := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	return corev1.PodStatus{
		Phase:             corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		HostIP:            "192.168.1.20",
		PodIP:             "10.244.1.7",
		PodIPs:            []corev1.PodIP{{IP: "10.244.1.7"}},
		StartTime:         &start,
		NominatedNodeName: "host-node-2",
		QOSClass:          corev1.PodQOSBurstable,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name: "main", Image: "nginx:1.27", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}},
		}},
	}
}

func TestTenantStatusGeneration(t *testing.T) {
	host := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Generation: 4, Annotations: map[string]string{AnnotationTenantGeneration: "7"}},
		Status: hostRunningStatus()}
	host.Status.ObservedGeneration = 4
	for i := range host.Status.Conditions {
		host.Status.Conditions[i].ObservedGeneration = 4
	}
	got := TenantStatus(host)
	if got.ObservedGeneration != 7 || got.Conditions[0].ObservedGeneration != 7 {
		t.Errorf("the host's kubelet saw the host pod made from tenant generation 7: observed %d, condition %d, want 7",
			got.ObservedGeneration, got.Conditions[0].ObservedGeneration)
	}
	host.Generation = 5 // updated, not yet seen by the host's kubelet
	if got := TenantStatus(host); got.ObservedGeneration != 0 || got.Conditions[0].ObservedGeneration != 0 {
		t.Errorf("the host's kubelet has not seen the host pod's generation 5: observed %d, want 0 (unknown)", got.ObservedGeneration)
	}
}

func TestTenantStatus(t *testing.T) {
	host := &corev1.Pod{Status: hostRunningStatus()}
	got := TenantStatus(host)
	want := hostRunningStatus()
	want.NominatedNodeName = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("TenantStatus = %+v, want %+v", got, want)
	}
	got.ContainerStatuses[0].Ready = false
	got.Conditions[0].Status = corev1.ConditionFalse
	if !reflect.DeepEqual(host.Status, hostRunningStatus()) {
		t.Errorf("TenantStatus shares state with the host pod, or changed it")
	}
}

// longPrefix is a valid label prefix too long to carry under tenant.kubenest.io.
var longPrefix = strings.Repeat("p", 240) + ".example.com"

func TestHostKey(t *testing.T) {
	tests := []struct {
		tenant    string
		want      string // "": not carried
		wantLabel bool   // carried as a host label
	}{
		{"app", "tenant.kubenest.io/app", true},
		{"app.kubernetes.io/name", "app.kubernetes.io.tenant.kubenest.io/name", true},
		{"k8s.v1.cni.cncf.io/networks", "k8s.v1.cni.cncf.io.tenant.kubenest.io/networks", true},
		{"cni.projectcalico.org/ipAddrs", "cni.projectcalico.org.tenant.kubenest.io/ipAddrs", true},
		// Keys that read like host keys: carried under their own, distinct ones.
		{"tenant.kubenest.io/app", "tenant.kubenest.io.tenant.kubenest.io/app", false},
		{"a.tenant.kubenest.io/b", "a.tenant.kubenest.io.tenant.kubenest.io/b", false},
		{"a/b", "a.tenant.kubenest.io/b", true},
		{"k-0123456789abcdef", "tenant.kubenest.io/k-0123456789abcdef", true},
		// A tenant's own kubenest.io labels are not carried on the host pod.
		{"kubenest.io/component", "kubenest.io.tenant.kubenest.io/component", false},
		{"team.kubenest.io/x", "team.kubenest.io.tenant.kubenest.io/x", false},
		{"notkubenest.io/x", "notkubenest.io.tenant.kubenest.io/x", true},
		{longPrefix + "/name", "", false},
		{strings.Repeat("p", 234) + "/name", strings.Repeat("p", 234) + ".tenant.kubenest.io/name", true},
		{strings.Repeat("p", 235) + "/name", "", false},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		got, ok := HostKey(tt.tenant)
		if ok != (tt.want != "") || (ok && got != tt.want) {
			t.Errorf("HostKey(%q) = %q, %v; want %q", tt.tenant, got, ok, tt.want)
		}
		if _, label := hostLabelKey(tt.tenant); label != tt.wantLabel {
			t.Errorf("hostLabelKey(%q) carried %v, want %v", tt.tenant, label, tt.wantLabel)
		}
		if !ok {
			continue
		}
		if errs := validation.IsQualifiedName(got); len(errs) > 0 {
			t.Errorf("HostKey(%q) = %q is not a valid key: %v", tt.tenant, got, errs)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("HostKey(%q) = HostKey(%q) = %q", tt.tenant, other, got)
		}
		seen[got] = tt.tenant
	}
	// The annotations that carry what the host pod cannot carry as is: valid, KubeNest's, and
	// apart from each other and from the carried keys.
	for _, k := range []string{"app", "kubenest.io/component", longPrefix + "/name"} {
		for _, key := range []string{labelCopyKey(k), annotationCopyKey(k)} {
			if errs := validation.IsQualifiedName(key); len(errs) > 0 {
				t.Errorf("%q: copy key %q is not a valid key: %v", k, key, errs)
			}
			if other, dup := seen[key]; dup && key != annotationCopyKey(other) {
				t.Errorf("%q and %q share the key %q", k, other, key)
			}
			seen[key] = k
		}
		if labelCopyKey(k) == annotationCopyKey(k) || !strings.HasPrefix(labelCopyKey(k), "kubenest.io/tenant-label-") {
			t.Errorf("%q: a label's copy %q is not apart from an annotation's %q", k, labelCopyKey(k), annotationCopyKey(k))
		}
	}
}

func TestTenantView(t *testing.T) {
	tenant := testTenantPod()
	tenant.Labels = map[string]string{"app": "web", "kubenest.io/mine": "label"}
	tenant.Annotations = map[string]string{"note": "hello", "kubenest.io/mine": "annotation"}
	tenant.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.36"}}
	tenant.Spec.Containers = append(tenant.Spec.Containers, corev1.Container{Name: "sidecar", Image: "envoy:1"})
	tenant.Spec.ActiveDeadlineSeconds = ptr.To[int64](600)
	tenant.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: corev1.PodQOSBurstable}

	host, _, err := testTranslator().Pod(tenant, nil)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("round trip", func(t *testing.T) {
		host := host.DeepCopy()
		host.Status = hostRunningStatus()
		got := (&provider{}).tenantView(tenant, host)
		want := tenant.DeepCopy()
		want.Status = hostRunningStatus()
		want.Status.NominatedNodeName = ""
		SetObservedGeneration(&want.Status, tenant.Generation)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("tenantView of a fresh host pod = %+v,\nwant the tenant pod with the host's status %+v", got, want)
		}
	})

	t.Run("what the host pod runs", func(t *testing.T) {
		before := tenant.DeepCopy()
		host := host.DeepCopy()
		host.Status = hostRunningStatus()
		host.Spec.Containers[0].Image = "nginx:1.26"
		host.Spec.InitContainers[0].Image = "busybox:1.35"
		host.Spec.Containers = host.Spec.Containers[:1] // fewer than the tenant's
		host.Spec.ActiveDeadlineSeconds = ptr.To[int64](300)
		// Made from other labels than the tenant pod has now.
		host.Annotations[AnnotationTenantMetadata] = "0123456789abcdef"
		host.Status.QOSClass = corev1.PodQOSGuaranteed // its resources differ from the tenant's
		hostBefore := host.DeepCopy()

		got := (&provider{}).tenantView(tenant, host)
		if got.Spec.Containers[0].Image != "nginx:1.26" || got.Spec.InitContainers[0].Image != "busybox:1.35" {
			t.Errorf("images = %q, %q, want the host pod's", got.Spec.Containers[0].Image, got.Spec.InitContainers[0].Image)
		}
		if got.Spec.Containers[1].Image != "envoy:1" {
			t.Errorf("a container the host pod lacks has image %q, want the tenant's", got.Spec.Containers[1].Image)
		}
		if got.Spec.ActiveDeadlineSeconds == nil || *got.Spec.ActiveDeadlineSeconds != 300 {
			t.Errorf("activeDeadlineSeconds = %v, want the host pod's 300", got.Spec.ActiveDeadlineSeconds)
		}
		// The host pod's metadata is out of date: the view says so, so virtual-kubelet updates.
		if reflect.DeepEqual(got.Annotations, tenant.Annotations) || got.Annotations[AnnotationTenantMetadata] != "host:0123456789abcdef" {
			t.Errorf("annotations = %v: want the tenant's, marked as made from other metadata", got.Annotations)
		}
		if !reflect.DeepEqual(got.Labels, tenant.Labels) {
			t.Errorf("labels = %v, want the tenant's %v", got.Labels, tenant.Labels)
		}
		want := TenantStatus(host)
		want.QOSClass = tenant.Status.QOSClass // immutable: the tenant's
		if !reflect.DeepEqual(got.Status, want) {
			t.Errorf("status = %+v, want the host's with the tenant's QoS class %+v", got.Status, want)
		}
		if got.Name != tenant.Name || got.Namespace != tenant.Namespace || got.UID != tenant.UID || got.Spec.NodeName != trNode {
			t.Errorf("tenantView is %s/%s (%s) on %q, want the tenant pod", got.Namespace, got.Name, got.UID, got.Spec.NodeName)
		}
		if !reflect.DeepEqual(tenant, before) || !reflect.DeepEqual(host, hostBefore) {
			t.Errorf("tenantView changed its arguments")
		}
	})

	t.Run("out of date, whatever the tenant's annotations say", func(t *testing.T) {
		old := host.DeepCopy()
		for name, annotations := range map[string]map[string]string{
			"none": nil, "others": {"note": "hello"},
			// A tenant writing the mark itself does not make the view equal.
			"the mark": {AnnotationTenantMetadata: "host:" + old.Annotations[AnnotationTenantMetadata]},
		} {
			tenant := tenant.DeepCopy()
			tenant.Labels["app"] = "web-v2"
			tenant.Annotations = annotations
			got := (&provider{}).tenantView(tenant, old)
			if reflect.DeepEqual(got.Annotations, tenant.Annotations) {
				t.Errorf("%s: the view of a host pod made from other metadata has the tenant's annotations %v", name, got.Annotations)
			}
			if !reflect.DeepEqual(got.Labels, tenant.Labels) {
				t.Errorf("%s: labels = %v, want the tenant's", name, got.Labels)
			}
			now, _, err := testTranslator().Pod(tenant, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := (&provider{}).tenantView(tenant, now); !reflect.DeepEqual(got.Annotations, tenant.Annotations) {
				t.Errorf("%s: once the host pod is made again, annotations = %v, want the tenant's %v", name, got.Annotations, tenant.Annotations)
			}
		}
	})
}

func TestMinimalTenantPod(t *testing.T) {
	host, _, err := testTranslator().Pod(testTenantPod(), nil)
	if err != nil {
		t.Fatal(err)
	}
	host.Status = hostRunningStatus()
	got := minimalTenantPod(host)
	if got.Name != "web" || got.Namespace != trNS || got.UID != trUID {
		t.Errorf("minimalTenantPod is %s/%s (%s), want %s/web (%s)", got.Namespace, got.Name, got.UID, trNS, trUID)
	}
	if want := TenantStatus(host); !reflect.DeepEqual(got.Status, want) {
		t.Errorf("status = %+v, want %+v", got.Status, want)
	}
}

func TestDeletedOnHost(t *testing.T) {
	pod := testTenantPod()
	pod.Status = hostRunningStatus()
	before := pod.DeepCopy()
	start := time.Now()
	got := deletedOnHost(pod)
	if got.DeletionTimestamp == nil || !got.DeletionTimestamp.Time.Before(start) {
		t.Errorf("deletionTimestamp = %v, want one in the past (before %v)", got.DeletionTimestamp, start)
	}
	if got.DeletionGracePeriodSeconds == nil || *got.DeletionGracePeriodSeconds != 0 {
		t.Errorf("deletionGracePeriodSeconds = %v, want 0", got.DeletionGracePeriodSeconds)
	}
	if !reflect.DeepEqual(got.Status, before.Status) {
		t.Errorf("status = %+v, want it unchanged %+v", got.Status, before.Status)
	}
	rest := got.DeepCopy()
	rest.DeletionTimestamp, rest.DeletionGracePeriodSeconds = nil, nil
	if !reflect.DeepEqual(rest, before) {
		t.Errorf("deletedOnHost changed more than the deletion fields")
	}
	if !reflect.DeepEqual(pod, before) {
		t.Errorf("deletedOnHost changed its argument")
	}
}

func TestTerminated(t *testing.T) {
	finished := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	pod := testTenantPod()
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		ContainerStatuses: []corev1.ContainerStatus{
			{Name: "running", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: finished}}},
			{Name: "waiting", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}},
			{Name: "done", Ready: true, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", FinishedAt: finished}}},
		},
	}
	before := pod.DeepCopy()
	got := terminated(pod, "deleted")

	if len(got.Status.ContainerStatuses) != 3 {
		t.Fatalf("%d container statuses, want 3", len(got.Status.ContainerStatuses))
	}
	for _, cs := range got.Status.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Running != nil || cs.State.Waiting != nil {
			t.Errorf("container %s is %+v, want terminated", cs.Name, cs.State)
		}
		if cs.Ready {
			t.Errorf("container %s is ready", cs.Name)
		}
	}
	for _, cs := range got.Status.ContainerStatuses[:2] {
		if term := cs.State.Terminated; term != nil && (term.ExitCode == 0 || term.Reason != ReasonHostPodGone || term.Message != "deleted") {
			t.Errorf("container %s ended %+v, want a failure saying the host pod is gone", cs.Name, term)
		}
	}
	if done := got.Status.ContainerStatuses[2].State.Terminated; !reflect.DeepEqual(done, before.Status.ContainerStatuses[2].State.Terminated) {
		t.Errorf("a container that had ended is now %+v, want it unchanged", done)
	}
	if !reflect.DeepEqual(pod, before) {
		t.Errorf("terminated changed its argument")
	}
}

// TestExtendedResources: a host pod asks the host only for the extended resources the host has;
// the others are the tenant's own accounting, which the tenant's view of the pod keeps.
func TestExtendedResources(t *testing.T) {
	const gpu, foo = corev1.ResourceName("example.com/gpu"), corev1.ResourceName("example.com/foo")
	tr := testTranslator()
	tr.HostHas = func(name corev1.ResourceName) bool { return name == gpu || name == corev1.ResourceCPU }
	tenant := testTenantPod()
	tenant.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{gpu: resource.MustParse("1"), foo: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{gpu: resource.MustParse("1"), foo: resource.MustParse("2")},
	}
	host, _, err := tr.Pod(tenant, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := corev1.ResourceRequirements{
		// Memory is no extended resource: asked for, whatever HostHas says.
		Requests: corev1.ResourceList{gpu: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{gpu: resource.MustParse("1")},
	}
	if got := host.Spec.Containers[0].Resources; !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("host pod resources %v, want %v", got, want)
	}
	if got := withTenantOnly(host.Spec.Containers[0].Resources, tenant.Spec.Containers[0].Resources); !equality.Semantic.DeepEqual(got, tenant.Spec.Containers[0].Resources) {
		t.Errorf("tenant view's resources %v, want the tenant's %v", got, tenant.Spec.Containers[0].Resources)
	}
	if _, asked := tenant.Spec.Containers[0].Resources.Requests[foo]; !asked {
		t.Error("translating changed the tenant pod")
	}
}

// TestEtcHosts: the host pod of a tenant pod with a subdomain writes the tenant's /etc/hosts
// first, and every container that has no /etc/hosts of its own mounts it; the writer stays
// out of the tenant's view.
func TestEtcHosts(t *testing.T) {
	tr := testTranslator()
	tr.HostsImage, tr.HostsImagePullPolicy = "kubenest.io/kubenest:test", corev1.PullNever
	tenant := testTenantPod()
	tenant.Spec.Hostname, tenant.Spec.Subdomain = "web-0", "web"
	tenant.Spec.HostAliases = []corev1.HostAlias{{IP: "10.1.2.3", Hostnames: []string{"db"}}}
	tenant.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "busybox"}}
	tenant.Spec.Containers = append(tenant.Spec.Containers, corev1.Container{Name: "own", Image: "busybox",
		VolumeMounts: []corev1.VolumeMount{{Name: "hosts", MountPath: "/etc/hosts", SubPath: "hosts"}}})
	tenant.Spec.Volumes = []corev1.Volume{{Name: "hosts", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "hosts"}}}}}

	host, _, err := tr.Pod(tenant, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(host.Spec.InitContainers) != 2 || host.Spec.InitContainers[1].Name != "setup" {
		t.Fatalf("init containers %v, want the writer, then setup", host.Spec.InitContainers)
	}
	w := host.Spec.InitContainers[0]
	wantArgs := []string{"--file=/kubenest-etc-hosts/hosts", "--hostname=web-0", "--domain=web." + trNS + ".svc.cluster.local",
		"--pod-ips=$(KUBENEST_POD_IPS)", `--host-aliases=[{"ip":"10.1.2.3","hostnames":["db"]}]`}
	if w.Name != EtcHostsName || w.Image != tr.HostsImage || w.ImagePullPolicy != corev1.PullNever || !slices.Equal(w.Command, []string{HostsBinaryPath}) || !slices.Equal(w.Args, wantArgs) {
		t.Errorf("writer %s %s %s %v %v, want args %v", w.Name, w.Image, w.ImagePullPolicy, w.Command, w.Args, wantArgs)
	}
	if len(w.Env) != 1 || w.Env[0].ValueFrom.FieldRef.FieldPath != "status.podIPs" {
		t.Errorf("writer env %+v", w.Env)
	}
	if sc := w.SecurityContext; sc == nil || !*sc.RunAsNonRoot || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("writer security context %+v, want Pod Security's restricted", sc)
	}
	hostsMount := corev1.VolumeMount{Name: EtcHostsName, MountPath: "/etc/hosts", SubPath: "hosts"}
	for _, c := range []corev1.Container{host.Spec.Containers[0], host.Spec.InitContainers[1]} {
		if !slices.Contains(c.VolumeMounts, hostsMount) {
			t.Errorf("container %s mounts %v, want the tenant's /etc/hosts", c.Name, c.VolumeMounts)
		}
	}
	if own := host.Spec.Containers[1].VolumeMounts; len(own) != 1 || own[0].Name != "hosts" {
		t.Errorf("container own mounts %v, want its own /etc/hosts only", own)
	}
	if !slices.ContainsFunc(host.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == EtcHostsName && v.EmptyDir != nil }) {
		t.Errorf("volumes %v, want %s", host.Spec.Volumes, EtcHostsName)
	}

	// The tenant sees its own init containers and their statuses only.
	if got := tenantInitContainers(host); len(got) != 1 || got[0].Name != "setup" {
		t.Errorf("tenant init containers %v", got)
	}
	host.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: EtcHostsName}, {Name: "setup"}}
	host.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodInitialized, Status: corev1.ConditionFalse, Message: "containers with incomplete status: [kubenest-etc-hosts setup]"},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, Message: "containers with unknown status: [kubenest-etc-hosts], containers with unready status: [main own]"},
	}
	got := TenantStatus(host)
	if len(got.InitContainerStatuses) != 1 || got.InitContainerStatuses[0].Name != "setup" {
		t.Errorf("tenant init container statuses %v", got.InitContainerStatuses)
	}
	if m0, m1 := got.Conditions[0].Message, got.Conditions[1].Message; m0 != "containers with incomplete status: [setup]" || m1 != "containers with unready status: [main own]" {
		t.Errorf("condition messages %q, %q: want them without the writer", m0, m1)
	}

	// The host pod has the tenant pod's QoS class, whatever it is.
	for _, res := range []corev1.ResourceRequirements{
		{},
		{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
		{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}},
	} {
		qosPod := tenant.DeepCopy()
		for i := range qosPod.Spec.Containers {
			qosPod.Spec.Containers[i].Resources = res
		}
		qosPod.Spec.InitContainers[0].Resources = res
		host, _, _ := tr.Pod(qosPod, nil)
		if want, got := v1qos.ComputePodQOS(qosPod), v1qos.ComputePodQOS(host); got != want || len(host.Spec.InitContainers) != 2 {
			t.Errorf("host pod QoS %s, the tenant pod's %s", got, want)
		}
	}

	// A host pod made before KubeNest wrote /etc/hosts: the tenant's init containers still
	// pair by their place.
	withoutWriter := tr
	withoutWriter.HostsImage = ""
	old, _, _ := withoutWriter.Pod(tenant, nil)
	resized := tenant.DeepCopy()
	resized.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m")}
	want, _, _ := tr.Pod(resized, nil)
	if !withResources(old, want) || len(old.Spec.InitContainers) != 1 || old.Spec.InitContainers[0].Resources.Requests.Cpu().String() != "200m" {
		t.Errorf("resizing a host pod without the writer: init containers %+v", old.Spec.InitContainers)
	}

	// No subdomain: the host kubelet's /etc/hosts is the tenant's already.
	tenant.Spec.Subdomain = ""
	if host, _, _ := tr.Pod(tenant, nil); len(host.Spec.InitContainers) != 1 || host.Annotations[AnnotationEtcHosts] != "" {
		t.Errorf("without a subdomain: init containers %v", host.Spec.InitContainers)
	}
	// A tenant init container of that name is the tenant's own, and no writer is added.
	tenant.Spec.Subdomain = "web"
	tenant.Spec.InitContainers[0].Name = EtcHostsName
	host, _, _ = tr.Pod(tenant, nil)
	if got := tenantInitContainers(host); len(host.Spec.InitContainers) != 1 || len(got) != 1 || got[0].Image != "busybox" {
		t.Errorf("with a tenant container named %s: host %v, tenant's %v", EtcHostsName, host.Spec.InitContainers, got)
	}
}
