package controlplane

import (
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// The tenant's RBAC for KubeNest's own users: the apiserver calling kubelets, the shared
// node's sync, CoreDNS and the nodes lent to the tenant. The tenant's apiserver creates these
// when it starts, with Kubernetes' bootstrap roles (see cmd/nest-controlplane), so they are in
// place before /readyz passes: CoreDNS, which starts with the apiserver, lists its API on its
// first retries instead of backing off for tens of seconds while it is forbidden.

// TenantClusterRoles are the roles of KubeNest's users in every tenant.
func TenantClusterRoles() []rbacv1.ClusterRole {
	return []rbacv1.ClusterRole{
		// What the shared node's sync does in the tenant, and no more: run the pods bound to
		// its node, keep its Node and Lease, read what those pods refer to, request their
		// tokens, and check who calls its kubelet API.
		clusterRole("kubenest:clustertree",
			rule("", []string{"pods"}, "get", "list", "watch", "update", "patch", "delete"),
			rule("", []string{"pods/status"}, "update", "patch"),
			rule("", []string{"nodes"}, "get", "list", "watch", "create", "update", "patch", "delete"),
			rule("", []string{"nodes/status"}, "update", "patch"),
			rule("coordination.k8s.io", []string{"leases"}, "get", "create", "update", "patch"),
			rule("", []string{"configmaps", "secrets", "services"}, "get", "list", "watch"),
			rule("", []string{"serviceaccounts/token"}, "create"),
			rule("", []string{"events"}, "create", "patch", "update"),
			rule("authentication.k8s.io", []string{"tokenreviews"}, "create"),
			rule("authorization.k8s.io", []string{"subjectaccessreviews"}, "create"),
			rule("discovery.k8s.io", []string{"endpointslices"}, "get", "list", "watch"),
			// The Service that holds the shared node's address, and its EndpointSlices
			// (clustertree's nodeaddress.go); a create cannot be limited to a name.
			rule("", []string{"services"}, "create"),
			named("", "services", []string{sharednode.AddressService}, "update", "delete"),
			rule("discovery.k8s.io", []string{"endpointslices"}, "create"),
			named("discovery.k8s.io", "endpointslices", []string{sharednode.AddressSliceKubelet, sharednode.AddressSliceNodePorts}, "update", "delete"),
		),
		// What the tenant's CoreDNS reads.
		clusterRole("kubenest:dns",
			rule("", []string{"services", "namespaces"}, "list", "watch"),
			rule("discovery.k8s.io", []string{"endpointslices"}, "list", "watch"),
		),
	}
}

// TenantClusterRoleBindings bind KubeNest's users in every tenant.
func TenantClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	user := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}
	}
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: name}
	}
	return []rbacv1.ClusterRoleBinding{
		// The apiserver calls kubelets (logs, exec) as a user bound to the built-in role
		// rather than put in system:masters.
		clusterRoleBinding("kubenest:apiserver-kubelet-client", "system:kubelet-api-admin", user(APIServerKubeletClient)),
		clusterRoleBinding("kubenest:clustertree", "kubenest:clustertree", user(ClusterTreeUser)),
		clusterRoleBinding("kubenest:dns", "kubenest:dns", user(DNSUser)),
		// Lent host nodes join with a bootstrap token: it may ask for a node client
		// certificate, which is approved at once; joined nodes renew their own.
		clusterRoleBinding("kubenest:kubelet-bootstrap", "system:node-bootstrapper", group(nodepool.BootstrapGroup)),
		clusterRoleBinding("kubenest:node-autoapprove-bootstrap", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", group(nodepool.BootstrapGroup)),
		clusterRoleBinding("kubenest:node-autoapprove-certificate-rotation", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", group("system:nodes")),
	}
}

func rule(group string, resources []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: resources, Verbs: verbs}
}

func named(group, resource string, names []string, verbs ...string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{group}, Resources: []string{resource}, ResourceNames: names, Verbs: verbs}
}

func rbacMeta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Labels: map[string]string{naming.LabelManagedBy: naming.ManagedByValue}}
}

func clusterRole(name string, rules ...rbacv1.PolicyRule) rbacv1.ClusterRole {
	return rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"), ObjectMeta: rbacMeta(name), Rules: rules}
}

func clusterRoleBinding(name, role string, subject rbacv1.Subject) rbacv1.ClusterRoleBinding {
	return rbacv1.ClusterRoleBinding{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: rbacMeta(name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{subject},
	}
}
