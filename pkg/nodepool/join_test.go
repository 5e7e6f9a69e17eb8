package nodepool

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

var tenantRef = &v1alpha1.TenantReference{Namespace: "team-a", Name: "dev", UID: "uid-1", Request: "workers"}

func poolNode(tenant *v1alpha1.TenantReference, joinSecret string, agent v1alpha1.AgentStatus) *v1alpha1.PoolNode {
	pn := &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	pn.Spec.Tenant = tenant
	pn.Spec.JoinSecretName = joinSecret
	pn.Status.Agent = agent
	return pn
}

func TestTenantKey(t *testing.T) {
	if got := TenantKey(tenantRef); got != "team-a/dev" {
		t.Errorf("TenantKey() = %q, want team-a/dev", got)
	}
}

func TestInTenant(t *testing.T) {
	tests := []struct {
		name   string
		tenant *v1alpha1.TenantReference
		agent  v1alpha1.AgentStatus
		want   bool
	}{
		{"serves the tenant, done", tenantRef, v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-1"}, true},
		{"no tenant asked about", nil, v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-1"}, false},
		{"still switching", tenantRef, v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-1", Step: "StartKubelet"}, false},
		{"another UID: a former tenant of the same name", tenantRef, v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-0"}, false},
		{"no UID reported", tenantRef, v1alpha1.AgentStatus{Cluster: "team-a/dev"}, false},
		{"another name", tenantRef, v1alpha1.AgentStatus{Cluster: "team-a/prod", TenantUID: "uid-1"}, false},
		{"another namespace", tenantRef, v1alpha1.AgentStatus{Cluster: "team-b/dev", TenantUID: "uid-1"}, false},
		{"name only, no namespace", tenantRef, v1alpha1.AgentStatus{Cluster: "dev", TenantUID: "uid-1"}, false},
		{"in the host", tenantRef, v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterHost}, false},
		{"never reported", tenantRef, v1alpha1.AgentStatus{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InTenant(poolNode(tenantRef, "", tt.agent), tt.tenant); got != tt.want {
				t.Errorf("InTenant() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInHost(t *testing.T) {
	tests := []struct {
		name  string
		agent v1alpha1.AgentStatus
		want  bool
	}{
		{"host, done", v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterHost}, true},
		{"never reported: a kubelet starts in the host", v1alpha1.AgentStatus{}, true},
		{"host, switching", v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterHost, Step: "Wipe"}, false},
		{"no cluster, switching", v1alpha1.AgentStatus{Step: "StopKubelet"}, false},
		{"in a tenant", v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := InHost(poolNode(nil, "", tt.agent)); got != tt.want {
				t.Errorf("InHost() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestReporting(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const timeout = time.Minute
	tests := []struct {
		name      string
		heartbeat metav1.Time
		want      bool
	}{
		{"never reported", metav1.Time{}, false},
		{"just now", metav1.NewTime(now), true},
		{"within the timeout", metav1.NewTime(now.Add(-30 * time.Second)), true},
		{"just within the timeout", metav1.NewTime(now.Add(-timeout + time.Second)), true},
		{"exactly the timeout ago", metav1.NewTime(now.Add(-timeout)), false},
		{"after the timeout", metav1.NewTime(now.Add(-2 * timeout)), false},
		{"long ago", metav1.NewTime(now.Add(-24 * time.Hour)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pn := poolNode(nil, "", v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterHost, HeartbeatTime: tt.heartbeat})
			if got := Reporting(pn, now, timeout); got != tt.want {
				t.Errorf("Reporting() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPhase(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	const timeout = time.Minute
	fresh := metav1.NewTime(now.Add(-10 * time.Second))
	stale := metav1.NewTime(now.Add(-5 * time.Minute))
	secret := JoinSecretName("node-1")

	inHost := v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterHost, HeartbeatTime: fresh}
	inTenant := v1alpha1.AgentStatus{Cluster: "team-a/dev", TenantUID: "uid-1", HeartbeatTime: fresh}
	with := func(a v1alpha1.AgentStatus, f func(*v1alpha1.AgentStatus)) v1alpha1.AgentStatus {
		f(&a)
		return a
	}

	tests := []struct {
		name    string
		tenant  *v1alpha1.TenantReference
		secret  string
		drained bool
		agent   v1alpha1.AgentStatus
		want    v1alpha1.PoolNodePhase
	}{
		// Unreachable wins over everything.
		{"stale heartbeat, in the host", nil, "", false, with(inHost, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = stale }), v1alpha1.PoolNodeUnreachable},
		{"stale heartbeat, in the tenant", tenantRef, secret, true, with(inTenant, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = stale }), v1alpha1.PoolNodeUnreachable},
		{"stale heartbeat, draining", tenantRef, "", false, with(inHost, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = stale }), v1alpha1.PoolNodeUnreachable},
		{"stale heartbeat, mid-switch", tenantRef, secret, true, with(inHost, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = stale; a.Step = "Wipe" }), v1alpha1.PoolNodeUnreachable},
		{"stale heartbeat, returning", nil, "", true, with(inTenant, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = stale }), v1alpha1.PoolNodeUnreachable},

		// InTenant.
		{"in the tenant", tenantRef, secret, true, inTenant, v1alpha1.PoolNodeInTenant},
		{"in the tenant, host pods no longer reported drained", tenantRef, secret, false, inTenant, v1alpha1.PoolNodeInTenant},
		{"in the tenant, no heartbeat time", tenantRef, secret, true, with(inTenant, func(a *v1alpha1.AgentStatus) { a.HeartbeatTime = metav1.Time{} }), v1alpha1.PoolNodeInTenant},

		// Draining.
		{"assigned, no join secret yet", tenantRef, "", false, inHost, v1alpha1.PoolNodeDraining},
		{"assigned, drained, no join secret yet", tenantRef, "", true, inHost, v1alpha1.PoolNodeDraining},
		{"assigned, join secret, not drained", tenantRef, secret, false, inHost, v1alpha1.PoolNodeDraining},
		{"assigned, agent never reported", tenantRef, "", false, v1alpha1.AgentStatus{}, v1alpha1.PoolNodeDraining},
		{"assigned, agent still in a former tenant of the same name", tenantRef, "", true, with(inTenant, func(a *v1alpha1.AgentStatus) { a.TenantUID = "uid-0" }), v1alpha1.PoolNodeDraining},

		// JoiningTenant.
		{"assigned, drained, join secret, agent in the host", tenantRef, secret, true, inHost, v1alpha1.PoolNodeJoiningTenant},
		{"assigned, drained, join secret, agent switching", tenantRef, secret, true, with(inHost, func(a *v1alpha1.AgentStatus) { a.Step = "Configure" }), v1alpha1.PoolNodeJoiningTenant},
		{"assigned, drained, join secret, agent starting the kubelet", tenantRef, secret, true, with(inHost, func(a *v1alpha1.AgentStatus) { a.Step = "StartKubelet" }), v1alpha1.PoolNodeJoiningTenant},

		// InHost.
		{"free, in the host", nil, "", true, inHost, v1alpha1.PoolNodeInHost},
		{"free, in the host, not drained", nil, "", false, inHost, v1alpha1.PoolNodeInHost},
		{"free, no agent ever reported", nil, "", false, v1alpha1.AgentStatus{}, v1alpha1.PoolNodeInHost},
		{"given back, back in the host, join secret not yet cleared", nil, secret, true, inHost, v1alpha1.PoolNodeInHost},

		// Returning.
		{"given back, agent still in the tenant", nil, secret, true, inTenant, v1alpha1.PoolNodeReturning},
		{"given back, agent still in the tenant, secret cleared", nil, "", true, inTenant, v1alpha1.PoolNodeReturning},
		{"given back, agent switching", nil, "", true, with(inTenant, func(a *v1alpha1.AgentStatus) { a.Step = "StopKubelet" }), v1alpha1.PoolNodeReturning},
		{"given back, agent starting the host kubelet", nil, "", true, with(inHost, func(a *v1alpha1.AgentStatus) { a.Step = "StartKubelet" }), v1alpha1.PoolNodeReturning},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pn := poolNode(tt.tenant, tt.secret, tt.agent)
			if got := Phase(pn, tt.drained, now, timeout); got != tt.want {
				t.Errorf("Phase() = %s, want %s", got, tt.want)
			}
		})
	}

	// A node lent to a tenant granted privileged pods: quarantined once it is out of the tenant.
	none := v1alpha1.AgentStatus{Cluster: v1alpha1.ClusterNone, HeartbeatTime: fresh}
	quarantine := &v1alpha1.Quarantine{Tenant: *tenantRef, Since: fresh}
	for _, tt := range []struct {
		name   string
		tenant *v1alpha1.TenantReference
		secret string
		agent  v1alpha1.AgentStatus
		want   v1alpha1.PoolNodePhase
	}{
		{"still lent", tenantRef, secret, inTenant, v1alpha1.PoolNodeInTenant},
		{"given back, agent still in the tenant", nil, "", inTenant, v1alpha1.PoolNodeReturning},
		{"given back, agent stopping the kubelet", nil, "", with(none, func(a *v1alpha1.AgentStatus) { a.Step = "Wipe" }), v1alpha1.PoolNodeReturning},
		{"given back, kubelet stopped", nil, "", none, v1alpha1.PoolNodeQuarantined},
		{"the agent says host (a machine reimaged before it was marked clean)", nil, "", inHost, v1alpha1.PoolNodeReturning},
	} {
		t.Run("quarantined: "+tt.name, func(t *testing.T) {
			pn := poolNode(tt.tenant, tt.secret, tt.agent)
			pn.Status.Quarantine = quarantine
			if got := Phase(pn, true, now, timeout); got != tt.want {
				t.Errorf("Phase() = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestJoinSecretName(t *testing.T) {
	long := strings.Repeat("a", 240) + ".example.com" // a 252-character node name
	tests := []struct {
		name string
		node string
		want string // "" when only the shape is checked
	}{
		{"short", "worker-1", "kubenest-join-worker-1"},
		{"dotted", "ip-10-0-0-1.ec2.internal", "kubenest-join-ip-10-0-0-1.ec2.internal"},
		{"longest node name", strings.Repeat("b", 253), ""},
		{"long, with dots", long, ""},
		{"long, a dot where it is cut", strings.Repeat("c", 227) + "." + strings.Repeat("d", 25), ""},
		{"long, a dash where it is cut", strings.Repeat("e", 227) + "-" + strings.Repeat("f", 25), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := JoinSecretName(tt.node)
			if tt.want != "" && got != tt.want {
				t.Errorf("JoinSecretName(%q) = %q, want %q", tt.node, got, tt.want)
			}
			if len(got) > 253 {
				t.Errorf("JoinSecretName(%q) is %d characters long, more than 253", tt.node, len(got))
			}
			if !strings.HasPrefix(got, "kubenest-join-") {
				t.Errorf("JoinSecretName(%q) = %q, want the prefix kubenest-join-", tt.node, got)
			}
			if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 {
				t.Errorf("JoinSecretName(%q) = %q is not a valid Secret name: %v", tt.node, got, errs)
			}
			if again := JoinSecretName(tt.node); again != got {
				t.Errorf("JoinSecretName is not stable: %q then %q", got, again)
			}
		})
	}

	// Long names that differ only where they are cut stay distinct.
	a, b := JoinSecretName(strings.Repeat("x", 252)+"1"), JoinSecretName(strings.Repeat("x", 252)+"2")
	if a == b {
		t.Errorf("two long node names got the same join Secret name %q", a)
	}
}
