package naming_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// hashed matches a name that was cut: a prefix, "-" and ten hex characters.
var hashed = regexp.MustCompile(`^(.*)-[0-9a-f]{10}$`)

func TestShorten(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		// want is the exact result when the name fits; empty when it must be hashed.
		want string
		// prefix is what a hashed result must start with.
		prefix string
	}{
		{name: "empty", in: "", max: 63, want: ""},
		{name: "short", in: "tenant-a", max: 63, want: "tenant-a"},
		{name: "exactly max", in: strings.Repeat("a", 63), max: 63, want: strings.Repeat("a", 63)},
		{name: "one over max", in: strings.Repeat("a", 64), max: 63, prefix: strings.Repeat("a", 52)},
		{name: "much longer", in: strings.Repeat("b", 300), max: 63, prefix: strings.Repeat("b", 52)},
		{name: "smaller max", in: strings.Repeat("c", 40), max: 20, prefix: strings.Repeat("c", 9)},
		{
			name: "dash at the cut", in: strings.Repeat("d", 51) + "-" + strings.Repeat("e", 20), max: 63,
			prefix: strings.Repeat("d", 51),
		},
		{
			name: "dashes and dots at the cut", in: strings.Repeat("f", 48) + "x.-.-" + strings.Repeat("g", 20), max: 63,
			prefix: strings.Repeat("f", 48) + "x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := naming.Shorten(tt.in, tt.max)
			if len(got) > tt.max {
				t.Errorf("Shorten(%q, %d) = %q, %d characters; want at most %d", tt.in, tt.max, got, len(got), tt.max)
			}
			if tt.prefix == "" {
				if got != tt.want {
					t.Errorf("Shorten(%q, %d) = %q, want %q unchanged", tt.in, tt.max, got, tt.want)
				}
				return
			}
			m := hashed.FindStringSubmatch(got)
			if m == nil {
				t.Fatalf("Shorten(%q, %d) = %q, want a prefix followed by -<10 hex>", tt.in, tt.max, got)
			}
			if m[1] != tt.prefix {
				t.Errorf("Shorten(%q, %d) prefix = %q, want %q", tt.in, tt.max, m[1], tt.prefix)
			}
			if strings.HasSuffix(m[1], "-") || strings.HasSuffix(m[1], ".") {
				t.Errorf("Shorten(%q, %d) = %q: '-' or '.' right before the hash", tt.in, tt.max, got)
			}
			if again := naming.Shorten(tt.in, tt.max); again != got {
				t.Errorf("Shorten is not stable: %q then %q", got, again)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	long := strings.Repeat("x", 60)
	tests := []struct {
		name   string
		parts  []string
		want   string
		hashed bool
	}{
		{name: "one part", parts: []string{"tenant"}, want: "tenant"},
		{name: "several parts", parts: []string{"tenant", "etcd", "peer"}, want: "tenant-etcd-peer"},
		{name: "exactly 63", parts: []string{strings.Repeat("a", 58), "etcd"}, want: strings.Repeat("a", 58) + "-etcd"},
		{name: "too long", parts: []string{long, "controlplane"}, hashed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := naming.Join(tt.parts...)
			if len(got) > naming.MaxLength {
				t.Errorf("Join(%q) = %q, %d characters; want at most %d", tt.parts, got, len(got), naming.MaxLength)
			}
			if tt.hashed {
				if !hashed.MatchString(got) || !strings.HasPrefix(got, long[:20]) {
					t.Errorf("Join(%q) = %q, want a cut name with a hash suffix", tt.parts, got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("Join(%q) = %q, want %q", tt.parts, got, tt.want)
			}
		})
	}
}

func TestJoinDistinctLongInputs(t *testing.T) {
	// Names that only differ after the cut still get distinct results.
	base := strings.Repeat("t", 60)
	inputs := [][]string{
		{base, "etcd"},
		{base, "etcd", "peer"},
		{base, "controlplane"},
		{base, "controlplane-certs"},
		{base + "a", "etcd"},
		{base + "b", "etcd"},
	}
	seen := map[string][]string{}
	for _, in := range inputs {
		got := naming.Join(in...)
		if len(got) > naming.MaxLength {
			t.Errorf("Join(%q) = %q is longer than %d", in, got, naming.MaxLength)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("Join(%q) and Join(%q) both give %q", prev, in, got)
		}
		seen[got] = in
	}
}

func TestNamesOfLongestVirtualCluster(t *testing.T) {
	vc := "a" + strings.Repeat("b", v1alpha1.MaxNameLength-1)
	if len(vc) != v1alpha1.MaxNameLength {
		t.Fatalf("test name has %d characters, want %d", len(vc), v1alpha1.MaxNameLength)
	}
	n := naming.For(vc)
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"EtcdStatefulSet", n.EtcdStatefulSet(), vc + "-etcd"},
		{"EtcdPeerService", n.EtcdPeerService(), vc + "-etcd-peer"},
		{"EtcdClientService", n.EtcdClientService(), vc + "-etcd"},
		{"ControlPlaneDeployment", n.ControlPlaneDeployment(), vc + "-controlplane"},
		{"APIServerService", n.APIServerService(), vc + "-apiserver"},
		{"CASecret", n.CASecret(), vc + "-ca"},
		{"EtcdCertsSecret", n.EtcdCertsSecret(), vc + "-etcd-certs"},
		{"ControlPlaneCertsSecret", n.ControlPlaneCertsSecret(), vc + "-controlplane-certs"},
		{"KubeconfigSecret", n.KubeconfigSecret(), vc + "-kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
			}
			if len(tt.got) > naming.MaxLength {
				t.Errorf("%s = %q has %d characters, more than %d", tt.name, tt.got, len(tt.got), naming.MaxLength)
			}
		})
	}
	// The etcd pods are <statefulset>-<ordinal>, and each needs a DNS label too.
	if pod := n.EtcdStatefulSet() + "-2"; len(pod) > naming.MaxLength {
		t.Errorf("etcd pod name %q has %d characters, more than %d", pod, len(pod), naming.MaxLength)
	}
}

func TestLabels(t *testing.T) {
	tests := []struct {
		name      string
		component string
		want      map[string]string
	}{
		{
			name: "without component",
			want: map[string]string{naming.LabelVirtualCluster: "tenant", naming.LabelManagedBy: naming.ManagedByValue},
		},
		{
			name: "with component", component: naming.ComponentEtcd,
			want: map[string]string{
				naming.LabelVirtualCluster: "tenant", naming.LabelManagedBy: naming.ManagedByValue,
				naming.LabelComponent: naming.ComponentEtcd,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := naming.For("tenant").Labels(tt.component)
			if len(got) != len(tt.want) {
				t.Errorf("Labels(%q) = %v, want %v", tt.component, got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("Labels(%q)[%q] = %q, want %q", tt.component, k, got[k], v)
				}
			}
		})
	}
}
