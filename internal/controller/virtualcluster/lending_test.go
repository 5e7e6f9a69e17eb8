package virtualcluster_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/internal/testtenant"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/nodepool"
	"github.com/kubenest-io/kubenest/pkg/nodepool/agent"
)

const lendable = "worker-9"

// TestNodeLending lends a host node to a tenant and takes it back, with the operator's
// controllers, the real node agent (acting as the node, held by the chart's admission policy)
// and a real tenant control plane; the test plays the kubelet, which it replaces by a recorder.
func TestNodeLending(t *testing.T) {
	// RBAC and the Node authorizer as in a real host: what the agent may do is what the chart grants.
	env, ctx := startEnv(t, testenv.Options{
		Controllers:    []string{"garbagecollector"},
		APIServerFlags: []string{"--authorization-mode=Node,RBAC"},
	}, 4*time.Minute, "kubenest-system")
	c := env.Client
	// No controller-manager makes the default ServiceAccount here; pods need it to be admitted.
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	testenv.CreateFromChartFile(t, ctx, c, "node-agent.yaml")
	routes := &tenantRoutes{}
	startOperator(t, env, routes, func(r *virtualcluster.Reconciler) { r.MaxLentNodes = 2 })

	// Lending needs an endpoint outside the host's Service network: a NodePort, published on a
	// node that stays in the host.
	createReadyNode(t, ctx, c, "stays", nil)
	vc := &v1alpha1.VirtualCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "lender", Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{
			ControlPlane: v1alpha1.ControlPlaneSpec{Exposure: v1alpha1.ExposureSpec{Type: v1alpha1.ExposureNodePort}},
			Etcd:         v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}},
		},
	}
	if err := c.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	tenant := runTenant(t, ctx, c, vc, routes)

	// A lendable host node, Ready, as its kubelet would make it.
	createReadyNode(t, ctx, c, lendable, map[string]string{v1alpha1.LabelLendable: "true"})
	pn := waitPool(t, ctx, c, "the PoolNode is made for the lendable node", func(pn *v1alpha1.PoolNode) bool { return true })
	if owner := metav1.GetControllerOf(pn); owner != nil || len(pn.OwnerReferences) != 1 || pn.OwnerReferences[0].Kind != "Node" {
		t.Errorf("PoolNode owners %+v, want the Node", pn.OwnerReferences)
	}

	// The node agent, as the node, with a kubelet that only records how it is run.
	kubelet := &recordingKubelet{}
	startAgent(t, env.Config, kubelet)
	waitPool(t, ctx, c, "the agent reports from the host", func(pn *v1alpha1.PoolNode) bool {
		return pn.Status.Agent.Cluster == v1alpha1.ClusterHost && meta.IsStatusConditionTrue(pn.Status.Conditions, v1alpha1.PoolNodeConditionAgentReporting)
	})

	t.Run("the node agent may only write its own PoolNode's agent status", func(t *testing.T) {
		node := nodeClient(t, env.Config, lendable)
		other := &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}
		if err := c.Create(ctx, other); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name, pool, patch, want string
		}{
			{"another node's PoolNode", "someone-else", `{"status":{"agent":{"message":"hi"}}}`, "a node may only update its own PoolNode"},
			{"its own phase", lendable, `{"status":{"phase":"InTenant"}}`, "a node may only change status.agent"},
		} {
			err := node.Status().Patch(ctx, &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: tc.pool}}, client.RawPatch(types.MergePatchType, []byte(tc.patch)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
			}
		}
		err := node.Patch(ctx, &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: lendable}}, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"joinSecretName":"x"}}`)))
		if !apierrors.IsForbidden(err) {
			t.Errorf("the node changed its PoolNode's spec: %v", err)
		}
		_ = c.Delete(ctx, other)
	})

	// A host pod on the node, held by a PodDisruptionBudget.
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "held"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}},
	}
	mustCreateObj(t, ctx, c, rs)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "default", Labels: map[string]string{"app": "held"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: corev1.PodSpec{NodeName: lendable, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	mustCreateObj(t, ctx, c, pod)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "held"}}},
	}
	mustCreateObj(t, ctx, c, pdb)
	markPodReady(t, ctx, c, pod)

	patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) {
		v.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{{Name: "workers", Count: 1}}
	})

	t.Run("the node is lent, cordoned, and drained as PodDisruptionBudgets allow", func(t *testing.T) {
		pn := waitPool(t, ctx, c, "a PodDisruptionBudget holds the drain", func(pn *v1alpha1.PoolNode) bool {
			d := meta.FindStatusCondition(pn.Status.Conditions, v1alpha1.PoolNodeConditionDrained)
			return d != nil && strings.Contains(d.Message, "PodDisruptionBudget")
		})
		if pn.Spec.Tenant == nil || pn.Spec.Tenant.Name != vc.Name || pn.Spec.JoinSecretName != "" || pn.Status.Phase != v1alpha1.PoolNodeDraining {
			t.Errorf("PoolNode spec %+v, phase %s", pn.Spec, pn.Status.Phase)
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: lendable}, node); err != nil || !node.Spec.Unschedulable {
			t.Errorf("the lent node is not cordoned: %v", err)
		}
		if err := c.Delete(ctx, pdb); err != nil {
			t.Fatal(err)
		}
		// Evicted; with no kubelet to finish the pod, the test does.
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			p := &corev1.Pod{}
			return c.Get(ctx, client.ObjectKeyFromObject(pod), p) == nil && p.DeletionTimestamp != nil, nil
		})
		if err != nil {
			t.Fatalf("the pod was not evicted: %v", err)
		}
		if err := c.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	})

	t.Run("the agent joins the node to the tenant with a bootstrap token", func(t *testing.T) {
		pn := waitPool(t, ctx, c, "the agent reports the kubelet in the tenant", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInTenant
		})
		join := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kubenest-system", Name: pn.Spec.JoinSecretName}, join); err != nil {
			t.Fatalf("join Secret: %v", err)
		}
		kc, err := clientcmd.Load(join.Data[nodepool.JoinKeyBootstrapKubeconfig])
		if err != nil {
			t.Fatal(err)
		}
		var token, server string
		for _, u := range kc.AuthInfos {
			token = u.Token
		}
		for _, cl := range kc.Clusters {
			server = cl.Server
		}
		svc := &corev1.Service{}
		if err := c.Get(ctx, cpKey(naming.For(vc.Name).APIServerService()), svc); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("https://10.9.9.9:%d", svc.Spec.Ports[0].NodePort); server != want {
			t.Errorf("bootstrap server %s, want the apiserver's NodePort endpoint %s", server, want)
		}
		id, _, _ := strings.Cut(token, ".")
		bt, err := tenant.CoreV1().Secrets("kube-system").Get(ctx, "bootstrap-token-"+id, metav1.GetOptions{})
		if err != nil || string(bt.Data["auth-extra-groups"]) != nodepool.BootstrapGroup {
			t.Errorf("the bootstrap token is not in the tenant: %v", err)
		}
		args := kubelet.lastArgs()
		if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--bootstrap-kubeconfig=") }) {
			t.Errorf("the kubelet was started with %v, not for the tenant", args)
		}
		// The tenant's kube-proxy runs on the nodes with the label the kubelet registers with,
		// and reaches the apiserver where the kubelet does.
		if !slices.Contains(args, "--node-labels="+v1alpha1.LabelLent+"=true") {
			t.Errorf("the kubelet was started with %v: no %s label", args, v1alpha1.LabelLent)
		}
		ds, err := tenant.AppsV1().DaemonSets("kube-system").Get(ctx, "kube-proxy", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the tenant's kube-proxy: %v", err)
		}
		if sel := ds.Spec.Template.Spec.NodeSelector; sel[v1alpha1.LabelLent] != "true" {
			t.Errorf("the tenant's kube-proxy runs on nodes %v", sel)
		}
		env := map[string]string{}
		for _, e := range ds.Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if got := "https://" + net.JoinHostPort(env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]); got != server {
			t.Errorf("the tenant's kube-proxy reaches the apiserver at %s, its kubelet at %s", got, server)
		}
		// The kubelet registers in the tenant; the test plays it.
		createReadyNode(t, ctx, tenantClientFor(t, ctx, c, vc, routes), lendable, nil)
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			return isTrue(v, v1alpha1.ConditionNodesReady)
		})
		if len(got.Status.Nodes) != 1 || got.Status.Nodes[0].Name != lendable || got.Status.Nodes[0].Phase != v1alpha1.PoolNodeInTenant {
			t.Errorf("status.nodes %+v", got.Status.Nodes)
		}
	})

	t.Run("given back, the node returns to the host and the tenant forgets it", func(t *testing.T) {
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 0 })
		pn := waitPool(t, ctx, c, "the node is back in the host", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInHost && pn.Spec.Tenant == nil && pn.Spec.JoinSecretName == ""
		})
		_ = pn
		node := &corev1.Node{}
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			return c.Get(ctx, client.ObjectKey{Name: lendable}, node) == nil && !node.Spec.Unschedulable, nil
		})
		if err != nil {
			t.Errorf("the node was not uncordoned: %v", err)
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			_, err := tenant.CoreV1().Nodes().Get(ctx, lendable, metav1.GetOptions{})
			joinErr := c.Get(ctx, client.ObjectKey{Namespace: "kubenest-system", Name: nodepool.JoinSecretName(lendable)}, &corev1.Secret{})
			return apierrors.IsNotFound(err) && apierrors.IsNotFound(joinErr), nil
		})
		if err != nil {
			t.Errorf("the tenant still has the node, or its join Secret remains: %v", err)
		}
		if args := kubelet.lastArgs(); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--bootstrap-kubeconfig=") }) {
			t.Errorf("the kubelet still runs for the tenant: %v", args)
		}
	})

	t.Run("more nodes than the platform lends a tenant: none", func(t *testing.T) {
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 3 })
		waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionNodesReady)
			return cond != nil && cond.Reason == virtualcluster.ReasonOverNodeLimit &&
				strings.Contains(cond.Message, "ask for 3 nodes, and the platform lends at most 2")
		})
		if pn := waitPool(t, ctx, c, "the PoolNode", func(*v1alpha1.PoolNode) bool { return true }); pn.Spec.Tenant != nil {
			t.Errorf("a node was lent past the limit: %+v", pn.Spec.Tenant)
		}
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 0 })
	})

	t.Run("a node that runs a tenant's control plane is not lent", func(t *testing.T) {
		// Another namespace's tenant's etcd, in its control-plane namespace; and a pod of a
		// namespace's user with the same labels, which is no tenant's and must not count.
		mustCreateObj(t, ctx, c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: naming.ControlPlaneNamespace("others")}})
		mustCreateObj(t, ctx, c, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: naming.ControlPlaneNamespace("others")}})
		labels := map[string]string{naming.LabelVirtualCluster: "other", naming.LabelVirtualClusterNamespace: "others", naming.LabelComponent: naming.ComponentEtcd}
		forged := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "aaa-forged-etcd", Namespace: "default", Labels: labels},
			Spec:       corev1.PodSpec{NodeName: lendable, Containers: []corev1.Container{{Name: "etcd", Image: "kubenest"}}},
		}
		etcd := forged.DeepCopy()
		etcd.Name, etcd.Namespace = "other-etcd-0", naming.ControlPlaneNamespace("others")
		for _, p := range []*corev1.Pod{forged, etcd} {
			mustCreateObj(t, ctx, c, p)
			markPodReady(t, ctx, c, p)
		}
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 1 })
		got := waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionNodesReady)
			return cond != nil && strings.Contains(cond.Message, "runs pod "+etcd.Namespace+"/other-etcd-0")
		})
		if pn := waitPool(t, ctx, c, "the PoolNode", func(*v1alpha1.PoolNode) bool { return true }); pn.Spec.Tenant != nil {
			t.Errorf("the node was lent anyway: %+v (status.nodes %+v)", pn.Spec.Tenant, got.Status.Nodes)
		}
		for _, p := range []*corev1.Pod{forged, etcd} {
			if err := c.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("a node lent with privileged pods granted is quarantined when it returns", func(t *testing.T) {
		waitPool(t, ctx, c, "the node is lent to the tenant", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInTenant && pn.Status.Quarantine == nil
		})
		// The tenant breaks the operator's setup of its cluster (its DNS Service at another
		// address, which the operator refuses to take over), so that every pass fails there
		// before it looks at the lent nodes: the node is marked all the same, before the
		// grant takes effect.
		dns, err := tenant.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := netip.MustParseAddr(dns.Spec.ClusterIP).Next()
		moved := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: "kube-system"},
			Spec: corev1.ServiceSpec{ClusterIP: ip.String(), Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
		// The operator may put its Service back between the deletion and the creation: again.
		for try := 0; ; try++ {
			err := tenant.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			_, err = tenant.CoreV1().Services("kube-system").Create(ctx, moved, metav1.CreateOptions{})
			if err == nil {
				break
			}
			if !apierrors.IsAlreadyExists(err) || try == 10 {
				t.Fatal(err)
			}
		}
		waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionAPIServerReady)
			return cond != nil && cond.Reason == virtualcluster.ReasonSetupFailed
		})
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.PodSecurity = v1alpha1.NodePodSecurityPrivileged })
		pn := waitPool(t, ctx, c, "the node is lent to the privileged tenant and quarantined", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInTenant && pn.Status.Quarantine != nil
		})
		if err := tenant.CoreV1().Services("kube-system").Delete(ctx, "kube-dns", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if q := pn.Status.Quarantine; q.Tenant.UID != vc.UID || !meta.IsStatusConditionFalse(pn.Status.Conditions, v1alpha1.PoolNodeConditionClean) {
			t.Errorf("quarantine %+v, conditions %+v", q, pn.Status.Conditions)
		}
		// What a privileged pod on the node could take, the node's own credential, cannot
		// lift the quarantine.
		err = nodeClient(t, env.Config, lendable).Status().Patch(ctx, &v1alpha1.PoolNode{ObjectMeta: metav1.ObjectMeta{Name: lendable}},
			client.RawPatch(types.MergePatchType, []byte(`{"status":{"quarantine":null}}`)))
		if err == nil || !strings.Contains(err.Error(), "a node may only change status.agent") {
			t.Errorf("the node cleared its own quarantine: %v", err)
		}

		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 0 })
		waitPool(t, ctx, c, "back from the tenant, the node serves no cluster", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeQuarantined && pn.Status.Agent.Cluster == v1alpha1.ClusterNone
		})
		if args := kubelet.lastArgs(); args != nil {
			t.Errorf("the kubelet of a quarantined node runs, with %v", args)
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: lendable}, node); err != nil || !node.Spec.Unschedulable {
			t.Errorf("a quarantined node is schedulable: %v", err)
		}
		// Lent to nobody, even the tenant that asks again.
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) { v.Spec.Nodes.Promotions[0].Count = 1 })
		waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionNodesReady)
			return cond != nil && strings.Contains(cond.Message, "quarantined")
		})
		patchVC(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) {
			v.Spec.Nodes.Promotions[0].Count = 0
			v.Spec.Nodes.PodSecurity = ""
		})

		// The platform reimages the node, then marks it clean.
		patch := client.MergeFrom(pn.DeepCopy())
		pn.Annotations = map[string]string{v1alpha1.AnnotationMarkClean: "reimaged"}
		if err := c.Patch(ctx, pn, patch); err != nil {
			t.Fatal(err)
		}
		pn = waitPool(t, ctx, c, "marked clean, the node is back in the host", func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInHost && pn.Status.Quarantine == nil && pn.Annotations[v1alpha1.AnnotationMarkClean] == ""
		})
		if !meta.IsStatusConditionTrue(pn.Status.Conditions, v1alpha1.PoolNodeConditionClean) {
			t.Errorf("conditions %+v: want Clean", pn.Status.Conditions)
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			return c.Get(ctx, client.ObjectKey{Name: lendable}, node) == nil && !node.Spec.Unschedulable && slices.Contains(kubelet.lastArgs(), "--kubeconfig=host.kubeconfig"), nil
		})
		if err != nil {
			t.Errorf("the node was not uncordoned, or its kubelet not started for the host (%v): %v", kubelet.lastArgs(), err)
		}
	})
}

// runTenant runs the VirtualCluster's control plane as local processes from the Secrets the
// operator wrote, plays the kubelet for its pods, and returns an admin client of it once the
// VirtualCluster is Ready.
func runTenant(t *testing.T, ctx context.Context, c client.Client, vc *v1alpha1.VirtualCluster, routes *tenantRoutes) kubernetes.Interface {
	t.Helper()
	names := naming.For(vc.Name)
	waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool { return isTrue(v, v1alpha1.ConditionCertificatesReady) })
	got := &v1alpha1.VirtualCluster{}
	if err := c.Get(ctx, key(vc.Name), got); err != nil {
		t.Fatal(err)
	}
	tn := testtenant.Run(t, testtenant.Binaries(t), got, controlplane.DefaultSettings(),
		secret(t, ctx, c, cpNS, names.EtcdCertsSecret()), secret(t, ctx, c, cpNS, names.ControlPlaneCertsSecret()),
		secret(t, ctx, c, cpNS, names.KubeletSignerSecret()))
	routes.set(fmt.Sprintf("%s.%s.svc:6443", names.APIServerService(), cpNS), tn.APIServerAddress)
	cs := tenantClientFor(t, ctx, c, got, routes)
	markStatefulSetReady(t, ctx, c, names.EtcdStatefulSet())
	markDeploymentReady(t, ctx, c, names.ControlPlaneDeployment())
	waitFor(t, ctx, c, vc.Name, func(v *v1alpha1.VirtualCluster) bool { return isTrue(v, v1alpha1.ConditionReady) })
	return cs
}

func tenantClientFor(t *testing.T, ctx context.Context, c client.Client, vc *v1alpha1.VirtualCluster, routes *tenantRoutes) kubernetes.Interface {
	t.Helper()
	kc := secret(t, ctx, c, vc.Namespace, naming.For(vc.Name).KubeconfigSecret())
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kc.Data[controlplane.KeyInClusterKubeconfig])
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dial = routes.dial
	return kubernetes.NewForConfigOrDie(cfg)
}

// createReadyNode makes a Node that reports Ready, as a kubelet would.
func createReadyNode(t *testing.T, ctx context.Context, c any, name string, labels map[string]string) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	status := corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}},
		Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.9.9.9"}},
	}
	switch c := c.(type) {
	case client.Client:
		mustCreateObj(t, ctx, c, node)
		node.Status = status
		if err := c.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
	case kubernetes.Interface:
		created, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = status
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func markPodReady(t *testing.T, ctx context.Context, c client.Client, pod *corev1.Pod) {
	t.Helper()
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := c.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

func waitPool(t *testing.T, ctx context.Context, c client.Client, what string, ok func(*v1alpha1.PoolNode) bool) *v1alpha1.PoolNode {
	t.Helper()
	pn := &v1alpha1.PoolNode{}
	start, seen := time.Now(), ""
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if c.Get(ctx, client.ObjectKey{Name: lendable}, pn) != nil {
			return false, nil
		}
		if now := fmt.Sprintf("%s %v", pn.Status.Phase, pn.Status.Conditions); now != seen {
			t.Logf("%5.1fs PoolNode %s", time.Since(start).Seconds(), now)
			seen = now
		}
		return ok(pn), nil
	})
	if err != nil {
		t.Fatalf("%s: %v; PoolNode spec %+v status %+v", what, err, pn.Spec, pn.Status)
	}
	return pn
}

// nodeClient acts as a node: user system:node:<name> in group system:nodes.
func nodeClient(t *testing.T, admin *rest.Config, node string) client.WithWatch {
	t.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startAgent runs the real node agent for the lendable node, as that node, until the test ends.
func startAgent(t *testing.T, admin *rest.Config, kubelet agent.Kubelet) {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kubelet.yaml")
	if err := os.WriteFile(cfgPath, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nclusterDNS: [10.96.0.10]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	host := nodeClient(t, admin, lendable)
	// Driven by its watch, as deployed: the interval is far longer than any wait of the tests.
	a := agent.New(agent.Config{
		NodeName: lendable, Namespace: "kubenest-system",
		StateFile: filepath.Join(dir, "state.json"), TenantDir: filepath.Join(dir, "tenant"),
		Kubelet: kubelet, HostArgs: []string{"--config=" + cfgPath, "--kubeconfig=host.kubeconfig"},
		KubeletConfig: cfgPath, Wipe: func(context.Context) error { return nil },
		Interval: 10 * time.Minute, Changed: agent.WatchPoolNode(ctx, host, lendable), Version: "test",
	}, host)
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// recordingKubelet stands in for the kubelet: it records how it was last started.
type recordingKubelet struct {
	mu   sync.Mutex
	args []string
}

func (k *recordingKubelet) Start(_ context.Context, args []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.args = args
	return nil
}

func (k *recordingKubelet) Stop(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.args = nil
	return nil
}

func (k *recordingKubelet) lastArgs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.args)
}

func mustCreateObj(t *testing.T, ctx context.Context, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
	}
}
