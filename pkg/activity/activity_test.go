package activity

import (
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// TestComponent: the tenant's own components do not count as activity; people and their
// tools do, whatever groups they are in.
func TestComponent(t *testing.T) {
	for _, c := range []struct {
		user      user.Info
		component bool
	}{
		{&user.DefaultInfo{Name: controlplane.AdminUser, Groups: []string{"system:masters", user.AllAuthenticated}}, false},
		{&user.DefaultInfo{Name: "alice@example.com", Groups: []string{controlplane.PortalUsersGroup, user.AllAuthenticated}}, false},
		{&user.DefaultInfo{Name: controlplane.ControllerManagerUser}, true},
		{&user.DefaultInfo{Name: controlplane.SchedulerUser}, true},
		{&user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}}, true},
		{&user.DefaultInfo{Name: "system:node:worker-1", Groups: []string{user.NodesGroup}}, true},
		{&user.DefaultInfo{Name: "system:serviceaccount:cert-manager:cert-manager", Groups: []string{"system:serviceaccounts"}}, true},
		{&user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}, true},
		{&user.DefaultInfo{Name: "bootstrap", Groups: []string{user.NodesGroup}}, true},
		{&user.DefaultInfo{Name: tenantclient.User, Groups: []string{"system:masters"}}, true},
		{&user.DefaultInfo{Name: controlplane.ClusterTreeUser}, true},
		{&user.DefaultInfo{Name: controlplane.DNSUser}, true},
		{nil, true},
	} {
		if got := Component(c.user); got != c.component {
			t.Errorf("Component(%v) = %v, want %v", c.user, got, c.component)
		}
	}
	for _, u := range []string{tenantclient.User, controlplane.ClusterTreeUser, controlplane.DNSUser} {
		if !slices.Contains(ComponentUsers, u) {
			t.Errorf("ComponentUsers lacks %q, a KubeNest identity in every tenant", u)
		}
	}
}
