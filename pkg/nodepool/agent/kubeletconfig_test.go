package agent

import (
	"reflect"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// hostKubeletConfig is a kubeadm-style host kubelet configuration.
const hostKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock
cpuManagerReconcilePeriod: 0s
evictionHard:
  imagefs.available: 15%
  memory.available: 100Mi
  nodefs.available: 10%
evictionPressureTransitionPeriod: 0s
failSwapOn: false
featureGates:
  KubeletInUserNamespace: true
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageGCHighThresholdPercent: 85
imageMinimumGCAge: 0s
kubeReserved:
  cpu: 100m
  memory: 256Mi
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
  verbosity: 0
maxOpenFiles: 1000000
maxPods: 110
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
podPidsLimit: -1
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: false
runtimeRequestTimeout: 0s
serializeImagePulls: true
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
volumeStatsAggPeriod: 0s
`

const tenantCA = "/var/lib/kubenest/tenant/ca.crt"

// parse reads YAML into a generic map, the way a test compares configurations.
func parse(t *testing.T, data string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(data), &m); err != nil {
		t.Fatalf("parsing %q: %v", data, err)
	}
	return m
}

// edit returns a deep copy of m changed by f.
func edit(t *testing.T, m map[string]any, f func(map[string]any)) map[string]any {
	t.Helper()
	data, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, string(data))
	f(c)
	return c
}

func sub(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m = m[k].(map[string]any)
	}
	return m
}

func TestTenantKubeletConfig(t *testing.T) {
	host := parse(t, hostKubeletConfig)
	tests := []struct {
		name          string
		base          string
		clusterDNS    string
		clusterDomain string
		want          map[string]any
	}{
		{
			name:          "tenant CA, DNS and domain; everything else kept",
			base:          hostKubeletConfig,
			clusterDNS:    "10.32.0.10",
			clusterDomain: "dev.tenant.local",
			want: edit(t, host, func(m map[string]any) {
				sub(m, "authentication", "x509")["clientCAFile"] = tenantCA
				m["clusterDNS"] = []any{"10.32.0.10"}
				m["clusterDomain"] = "dev.tenant.local"
				m["rotateCertificates"] = true
				delete(m, "staticPodPath")
			}),
		},
		{
			name: "no DNS or domain given: the host's are kept",
			base: hostKubeletConfig,
			want: edit(t, host, func(m map[string]any) {
				sub(m, "authentication", "x509")["clientCAFile"] = tenantCA
				m["rotateCertificates"] = true
				delete(m, "staticPodPath")
			}),
		},
		{
			name:       "only DNS given",
			base:       hostKubeletConfig,
			clusterDNS: "10.32.0.10",
			want: edit(t, host, func(m map[string]any) {
				sub(m, "authentication", "x509")["clientCAFile"] = tenantCA
				m["clusterDNS"] = []any{"10.32.0.10"}
				m["rotateCertificates"] = true
				delete(m, "staticPodPath")
			}),
		},
		{
			name:          "only domain given",
			base:          hostKubeletConfig,
			clusterDomain: "dev.tenant.local",
			want: edit(t, host, func(m map[string]any) {
				sub(m, "authentication", "x509")["clientCAFile"] = tenantCA
				m["clusterDomain"] = "dev.tenant.local"
				m["rotateCertificates"] = true
				delete(m, "staticPodPath")
			}),
		},
		{
			name: "no authentication section",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
maxPods: 110
`,
			clusterDNS:    "10.32.0.10",
			clusterDomain: "dev.tenant.local",
			want: parse(t, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  x509:
    clientCAFile: `+tenantCA+`
cgroupDriver: systemd
clusterDNS: [10.32.0.10]
clusterDomain: dev.tenant.local
maxPods: 110
rotateCertificates: true
`),
		},
		{
			name: "authentication without x509; several host DNS servers replaced by the tenant's",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
clusterDNS: [10.96.0.10, 10.96.0.11]
rotateCertificates: true
`,
			clusterDNS: "10.32.0.10",
			want: parse(t, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
  x509:
    clientCAFile: `+tenantCA+`
clusterDNS: [10.32.0.10]
rotateCertificates: true
`),
		},
		{
			name: "empty authentication section",
			base: `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {}
`,
			want: parse(t, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  x509:
    clientCAFile: `+tenantCA+`
rotateCertificates: true
`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := TenantKubeletConfig([]byte(tt.base), tenantCA, tt.clusterDNS, tt.clusterDomain)
			if err != nil {
				t.Fatalf("TenantKubeletConfig() error = %v", err)
			}
			got := parse(t, string(out))
			// Whatever the host's says, a lent kubelet serves nothing of the machine's own to
			// the tenant: no system logs (nodes/proxy), no read-only port.
			tt.want["enableSystemLogHandler"], tt.want["enableSystemLogQuery"], tt.want["readOnlyPort"] = false, false, float64(0)
			if !reflect.DeepEqual(got, tt.want) {
				gotY, _ := yaml.Marshal(got)
				wantY, _ := yaml.Marshal(tt.want)
				t.Errorf("TenantKubeletConfig() =\n%s\nwant\n%s", gotY, wantY)
			}

			// The result is still a KubeletConfiguration the kubelet reads, field for field.
			var typed kubeletv1beta1.KubeletConfiguration
			if err := yaml.UnmarshalStrict(out, &typed); err != nil {
				t.Fatalf("the result is not a strict KubeletConfiguration: %v\n%s", err, out)
			}
			if typed.Kind != "KubeletConfiguration" || typed.APIVersion != "kubelet.config.k8s.io/v1beta1" {
				t.Errorf("apiVersion/kind = %s/%s", typed.APIVersion, typed.Kind)
			}
			if typed.Authentication.X509.ClientCAFile != tenantCA {
				t.Errorf("authentication.x509.clientCAFile = %q, want %q", typed.Authentication.X509.ClientCAFile, tenantCA)
			}
			if typed.RotateCertificates != true {
				t.Error("rotateCertificates is not true")
			}
		})
	}
}

// Numbers and quoted strings survive the round trip as they were written: no floats, no
// exponents, no strings turned into numbers.
func TestTenantKubeletConfigKeepsScalars(t *testing.T) {
	out, err := TenantKubeletConfig([]byte(hostKubeletConfig), tenantCA, "10.32.0.10", "dev.tenant.local")
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, want := range []string{
		"maxPods: 110\n",
		"maxOpenFiles: 1000000\n",
		"podPidsLimit: -1\n",
		"healthzPort: 10248\n",
		"imageGCHighThresholdPercent: 85\n",
		`infoBufferSize: "0"` + "\n",
		"memory.available: 100Mi\n",
		"nodefs.available: 10%\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the result does not contain %q:\n%s", want, text)
		}
	}
	var typed kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(out, &typed); err != nil {
		t.Fatal(err)
	}
	if typed.MaxPods != 110 || typed.MaxOpenFiles != 1000000 || typed.PodPidsLimit == nil || *typed.PodPidsLimit != -1 {
		t.Errorf("maxPods/maxOpenFiles/podPidsLimit = %d/%d/%v", typed.MaxPods, typed.MaxOpenFiles, typed.PodPidsLimit)
	}
	if typed.Authentication.Webhook.Enabled == nil || !*typed.Authentication.Webhook.Enabled {
		t.Error("authentication.webhook.enabled is not kept true")
	}
	if typed.Authentication.Anonymous.Enabled == nil || *typed.Authentication.Anonymous.Enabled {
		t.Error("authentication.anonymous.enabled is not kept false")
	}
	if typed.CgroupDriver != "systemd" || typed.StaticPodPath != "" {
		t.Errorf("cgroupDriver/staticPodPath = %q/%q, want the host's driver and no static pods", typed.CgroupDriver, typed.StaticPodPath)
	}
}

// The host's file is not changed by deriving the tenant's from it.
func TestTenantKubeletConfigDoesNotModifyBase(t *testing.T) {
	base := []byte(hostKubeletConfig)
	if _, err := TenantKubeletConfig(base, tenantCA, "10.32.0.10", "dev.tenant.local"); err != nil {
		t.Fatal(err)
	}
	if string(base) != hostKubeletConfig {
		t.Error("TenantKubeletConfig changed its input")
	}
}

func TestTenantKubeletConfigErrors(t *testing.T) {
	for name, base := range map[string]string{
		"invalid YAML":    "authentication: [unclosed\n",
		"tab indentation": "kind: KubeletConfiguration\n\tmaxPods: 110\n",
		"a list":          "- a\n- b\n",
		"a scalar":        "just a string\n",
	} {
		t.Run(name, func(t *testing.T) {
			out, err := TenantKubeletConfig([]byte(base), tenantCA, "10.32.0.10", "dev.tenant.local")
			if err == nil {
				t.Errorf("TenantKubeletConfig(%q) = %s, want an error", base, out)
			}
		})
	}
}
