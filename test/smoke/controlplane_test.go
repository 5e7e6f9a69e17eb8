// Package smoke runs a tenant control plane as local processes, from exactly the certificates,
// kubeconfigs and flags the operator generates, and uses it: the tenant's controller-manager
// must turn a Deployment into a ReplicaSet and pods, and the scheduler must lead.
package smoke

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/testtenant"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

func TestControlPlaneProcesses(t *testing.T) {
	tenant, cfg, client, ctx := readyTenant(t, "smoke", "6b1f7a52-0000-4000-8000-000000000001")
	readyAfter := time.Since(tenant.Started)

	// What the apiserver creates for itself when it starts (bootstrap.go).
	if _, err := client.RbacV1().ClusterRoles().Get(ctx, "system:controller:deployment-controller", metav1.GetOptions{}); err != nil {
		t.Errorf("bootstrap ClusterRole: %v", err)
	}
	if _, err := client.RbacV1().RoleBindings("kube-system").Get(ctx, "system:controller:bootstrap-signer", metav1.GetOptions{}); err != nil {
		t.Errorf("bootstrap RoleBinding: %v", err)
	}
	if _, err := client.SchedulingV1().PriorityClasses().Get(ctx, "system-node-critical", metav1.GetOptions{}); err != nil {
		t.Errorf("system PriorityClass: %v", err)
	}
	// And KubeNest's users' roles: CoreDNS may read what it serves as soon as the tenant is ready.
	dns := rest.CopyConfig(cfg)
	dns.Impersonate.UserName = controlplane.DNSUser
	if _, err := kubernetes.NewForConfigOrDie(dns).CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("listing Services as the tenant's CoreDNS once the tenant is ready: %v", err)
	}
	checkOpenAPI(ctx, t, client)
	checkIssuerDiscovery(ctx, t, client)
	checkWebhookByEndpoints(ctx, t, client)

	// The apiserver's etcd clients (one per resource, compactor and health check: about 60)
	// share one connection (cmd/nest-controlplane/etcdclients.go); the health checks' status
	// calls may hold one more while they run.
	if n, err := tenant.Processes[1].ConnectionsTo(tenant.EtcdPort); err != nil {
		t.Errorf("counting the apiserver's connections to etcd: %v", err)
	} else if n < 1 || n > 2 {
		t.Errorf("the apiserver holds %d connections to etcd, want 1 (2 while a status call runs)", n)
	}
	checkListFromCache(ctx, t, client)

	// Use the tenant as a tenant would.
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "web"}
	_, err := client.AppsV1().Deployments("team-a").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "busybox"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		rs, err := client.AppsV1().ReplicaSets("team-a").List(ctx, metav1.ListOptions{})
		if err != nil || len(rs.Items) == 0 {
			return false, nil
		}
		pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 2, nil
	})
	if err != nil {
		t.Fatalf("the tenant's controller-manager did not create the ReplicaSet and its pods: %v\ncontrollers:\n%s", err, tenant.Processes[2].Tail())
	}
	// The scheduler, in the controller-manager's process, runs under the controller-manager's
	// lease: with no nodes it reports the pods unschedulable, and takes no lease of its own.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := client.CoreV1().Pods("team-a").List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) == 0 {
			return false, nil
		}
		for _, p := range pods.Items {
			if !slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
			}) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the tenant's scheduler did not report the pods unschedulable: %v\ncontrollers:\n%s", err, tenant.Processes[2].Tail())
	}
	leases, err := client.CoordinationV1().Leases("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, "apiserver-") { // the apiserver's identity
			names = append(names, l.Name)
		}
	}
	if !slices.Equal(names, []string{"kube-controller-manager"}) {
		t.Errorf("leader leases in kube-system: %v, want only kube-controller-manager's (the scheduler runs under it)", names)
	}

	checkPolicyTypeChecking(ctx, t, client, tenant)

	var total int64
	for _, p := range tenant.Processes {
		rss := p.RSSKiB()
		total += rss
		t.Logf("RSS %-18s %4d MiB", p.Name, rss/1024)
	}
	t.Logf("RSS total              %4d MiB", total/1024)
	t.Logf("process start to /readyz: %s", readyAfter.Round(10*time.Millisecond))
}

// checkListFromCache checks that a consistent LIST (no resourceVersion, as kubectl sends) is
// served by the apiserver's watch cache, not read from etcd: the cache serves it once etcd is
// known to answer progress requests, which the apiserver checks when it connects.
func checkListFromCache(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	const metric = `apiserver_watch_cache_consistent_read_total{fallback="false",group="",resource="namespaces",success="true"}`
	var lastMetrics string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
			return false, err
		}
		body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return false, err
		}
		lastMetrics = string(body)
		return strings.Contains(lastMetrics, metric+" "), nil
	})
	if err != nil {
		var reads []string
		for _, line := range strings.Split(lastMetrics, "\n") {
			if strings.HasPrefix(line, "apiserver_watch_cache_consistent_read_total") {
				reads = append(reads, line)
			}
		}
		t.Errorf("consistent LISTs of namespaces are not served by the watch cache (%v); the apiserver's counts:\n%s", err, strings.Join(reads, "\n"))
	}
}

// checkPolicyTypeChecking checks the controller-manager's ValidatingAdmissionPolicy status
// controller, which the controllers process starts with the tenant's first policy: it reports
// a policy's type errors in its status.
func checkPolicyTypeChecking(ctx context.Context, t *testing.T, client kubernetes.Interface, tenant *testtenant.Tenant) {
	t.Helper()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "replicas"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				},
			}}},
			// spec.replicas is an integer: comparing it with a string is a type error.
			Validations: []admissionregistrationv1.Validation{{Expression: "object.spec.replicas > 'five'"}},
		},
	}
	if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var warnings []admissionregistrationv1.ExpressionWarning
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil || got.Status.TypeChecking == nil {
			return false, nil
		}
		warnings = got.Status.TypeChecking.ExpressionWarnings
		return true, nil
	})
	if err != nil {
		t.Fatalf("the policy's type checking was not reported: %v\ncontrollers:\n%s", err, tenant.Processes[2].Tail())
	}
	if len(warnings) != 1 || warnings[0].FieldRef != "spec.validations[0].expression" || !strings.Contains(warnings[0].Warning, "no matching overload") {
		t.Errorf("type-checking warnings %+v, want one for spec.validations[0].expression: no matching overload", warnings)
	}
}

// checkOpenAPI reads the tenant's OpenAPI documents as kubectl does (openapi.go builds them on
// the first request): the v3 index through the aggregator, a group-version's document from
// the URL the index gives, and v2.
func checkOpenAPI(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	paths, err := client.Discovery().OpenAPIV3().Paths()
	if err != nil {
		t.Fatalf("OpenAPI v3 index: %v", err)
	}
	for _, gv := range []string{"api/v1", "apis/apps/v1", "apis/apiextensions.k8s.io/v1", "apis/apiregistration.k8s.io/v1"} {
		if _, ok := paths[gv]; !ok {
			t.Errorf("OpenAPI v3 index has no %s", gv)
		}
	}
	for gv, kind := range map[string]string{"apis/apps/v1": "io.k8s.api.apps.v1.Deployment", "api/v1": "io.k8s.api.core.v1.Pod"} {
		for _, contentType := range []string{"application/json", "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"} {
			doc, err := paths[gv].Schema(contentType)
			if err != nil {
				t.Fatalf("OpenAPI v3 %s as %s: %v", gv, contentType, err)
			}
			if !strings.Contains(string(doc), kind) {
				t.Errorf("OpenAPI v3 %s as %s (%d bytes) does not describe %s", gv, contentType, len(doc), kind)
			}
		}
	}
	// A document asked for under a hash this server did not give is found at the current one.
	body, err := client.Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/apps/v1").Param("hash", "0123").DoRaw(ctx)
	if err != nil || !strings.Contains(string(body), "io.k8s.api.apps.v1.Deployment") {
		t.Errorf("OpenAPI v3 apps/v1 under an old hash: %v (%d bytes)", err, len(body))
	}
	v2, err := client.Discovery().OpenAPISchema()
	if err != nil {
		t.Fatalf("OpenAPI v2: %v", err)
	}
	if len(v2.GetDefinitions().GetAdditionalProperties()) < 100 {
		t.Errorf("OpenAPI v2 has %d definitions", len(v2.GetDefinitions().GetAdditionalProperties()))
	}
}

// checkIssuerDiscovery checks that the service-account issuer's OIDC discovery document points
// at its keys by the issuer's name, which tenant pods resolve and the serving certificate
// holds (not the apiserver pod's IP), and that the keys are served there.
func checkIssuerDiscovery(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		t.Errorf("OIDC discovery document: %v", err)
		return
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Errorf("OIDC discovery document %s: %v", body, err)
		return
	}
	if doc.JWKSURI != doc.Issuer+"/openid/v1/jwks" {
		t.Errorf("jwks_uri %q, want the issuer's %q", doc.JWKSURI, doc.Issuer+"/openid/v1/jwks")
	}
	if _, err := client.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx); err != nil {
		t.Errorf("the issuer's keys: %v", err)
	}
}
