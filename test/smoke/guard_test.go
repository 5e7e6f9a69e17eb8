package smoke

import (
	"context"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// TestTenantGuard attacks a tenant's apiserver as its own admin (system:masters), with the
// flags the operator gives it: what would reach past the tenant is refused with a message that
// says why, and the legitimate use next to it works.
func TestTenantGuard(t *testing.T) {
	_, _, client, ctx := readyTenant(t, "guard", "6b1f7a52-0000-4000-8000-000000000002")
	tenantRange := controlplane.DefaultSettings().ServiceCIDR // what RunStandalone runs it with

	refused := func(what string, err error, says ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", what)
			return
		}
		t.Logf("%s: refused: %v", what, err)
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v, want it to say %q", what, err, s)
			}
		}
	}

	t.Run("Service addresses stay in the tenant's range", func(t *testing.T) {
		for _, cidr := range []string{"10.96.0.0/16", "10.0.0.0/8"} {
			_, err := client.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
				ObjectMeta: metav1.ObjectMeta{Name: "steal-" + strings.NewReplacer(".", "-", "/", "-").Replace(cidr)},
				Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
			}, metav1.CreateOptions{})
			refused("ServiceCIDR "+cidr, err, "KubeNestTenantGuard", "spec.cidrs[0]", "outside this tenant's Service range "+tenantRange)
		}
		svc := func(name, ip string) *corev1.Service {
			return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.ServiceSpec{
				ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}, Selector: map[string]string{"app": name}}}
		}
		_, err := client.CoreV1().Services("default").Create(ctx, svc("host-address", "10.96.0.88"), metav1.CreateOptions{})
		refused("a Service at the host's 10.96.0.88", err, "10.96.0.88")
		ext := svc("external", "")
		ext.Spec.ExternalIPs = []string{"172.30.0.1"}
		_, err = client.CoreV1().Services("default").Create(ctx, ext, metav1.CreateOptions{})
		refused("a Service with external IPs", err, "KubeNestTenantGuard", "spec.externalIPs")
		// The legitimate use: a Service at an address of its own range.
		if _, err := client.CoreV1().Services("default").Create(ctx, svc("web", "10.254.0.77"), metav1.CreateOptions{}); err != nil {
			t.Errorf("a Service at 10.254.0.77, in the tenant's range: %v", err)
		}
	})

	t.Run("pods on nodes meet Pod Security baseline, whatever the namespace says", func(t *testing.T) {
		// The tenant's admin labels a namespace privileged; the guard does not read labels.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "attack", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
		if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitServiceAccount(t, ctx, client, "attack", "default")
		root := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "attack"},
			Spec: corev1.PodSpec{
				NodeName: "lent-1", HostPID: true,
				Containers: []corev1.Container{{Name: "sh", Image: "busybox", Command: []string{"sleep", "3600"},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
					VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/h"}}}},
				Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
			},
		}
		_, err := client.CoreV1().Pods("attack").Create(ctx, root, metav1.CreateOptions{})
		refused("a privileged pod with hostPID and the host's / on a lent node", err,
			"KubeNestTenantGuard", `Pod Security "baseline"`, "privileged", "hostPID", "hostPath", "node lent-1")

		// Unbound too: a binding commits to the pod as stored when it lands, which a change
		// racing it could have made privileged after the guard read it.
		unbound := root.DeepCopy()
		unbound.Spec.NodeName = ""
		_, err = client.CoreV1().Pods("attack").Create(ctx, unbound, metav1.CreateOptions{})
		refused("the privileged pod, unbound", err, "KubeNestTenantGuard", "privileged", "on this cluster's nodes")
		// A baseline pod, unbound, is admitted and bound; made privileged, it is refused.
		waiting := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: "attack"},
			Spec: corev1.PodSpec{SchedulerName: "none", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if waiting, err = client.CoreV1().Pods("attack").Create(ctx, waiting, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a baseline pod, unbound: %v", err)
		}
		waiting.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		_, err = client.CoreV1().Pods("attack").UpdateEphemeralContainers(ctx, "waiting", waiting, metav1.UpdateOptions{})
		refused("a privileged ephemeral container in the unbound pod", err, "KubeNestTenantGuard", "privileged")
		if err := client.CoreV1().Pods("attack").Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: "waiting", Namespace: "attack"}, Target: corev1.ObjectReference{Kind: "Node", Name: "lent-1"}}, metav1.CreateOptions{}); err != nil {
			t.Errorf("binding the baseline pod to a lent node: %v", err)
		}

		// The host's / through a volume a baseline pod mounts by its claim.
		for name, src := range map[string]corev1.PersistentVolumeSource{
			"hostPath": {HostPath: &corev1.HostPathVolumeSource{Path: "/"}},
			"local":    {Local: &corev1.LocalVolumeSource{Path: "/"}},
		} {
			_, err = client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "host-" + strings.ToLower(name)},
				Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: src, Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
					NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
						MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"lent-1"}}}}}}}}},
				metav1.CreateOptions{})
			refused("a "+name+" PersistentVolume of the host's /", err, "KubeNestTenantGuard", "spec."+name)
		}

		plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "attack"},
			Spec: corev1.PodSpec{NodeName: "lent-1", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}
		created, err := client.CoreV1().Pods("attack").Create(ctx, plain, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a baseline pod on a lent node: %v", err)
		}
		debug := created.DeepCopy()
		debug.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "busybox", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		_, err = client.CoreV1().Pods("attack").UpdateEphemeralContainers(ctx, "plain", debug, metav1.UpdateOptions{})
		refused("a privileged ephemeral container in a pod on a lent node", err, "KubeNestTenantGuard", "privileged")
	})

	t.Run("the operator's kube-proxy runs privileged, and nothing dressed as it", func(t *testing.T) {
		objs, err := controlplane.TenantKubeProxy(controlplane.DefaultSettings(), "https://192.0.2.10:31443")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().ServiceAccounts("kube-system").Create(ctx, objs.ServiceAccount, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy-abcde", Namespace: "kube-system"}, Spec: *objs.DaemonSet.Spec.Template.Spec.DeepCopy()}
		pod.Spec.NodeName = "lent-1"
		if _, err := client.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the operator's kube-proxy on a lent node: %v", err)
		}
		shell := pod.DeepCopy()
		shell.Name = "kube-proxy-shell"
		shell.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3600"}
		_, err = client.CoreV1().Pods("kube-system").Create(ctx, shell, metav1.CreateOptions{})
		refused("a pod dressed as kube-proxy running a shell", err, "KubeNestTenantGuard", "privileged")
		// The running kube-proxy's image swapped for another.
		current, err := client.CoreV1().Pods("kube-system").Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		current.Spec.Containers[0].Image = "evil.example/shell:1"
		_, err = client.CoreV1().Pods("kube-system").Update(ctx, current, metav1.UpdateOptions{})
		refused("the kube-proxy pod's image swapped", err, "KubeNestTenantGuard", "privileged")

		// A command in the running kube-proxy, as the host machine's root: through pods/exec,
		// through the kubelet's API via nodes/proxy, or at the kubelet straight (its question
		// to the apiserver: may this user use the node's proxy subresource?).
		err = client.CoreV1().RESTClient().Post().Namespace("kube-system").Resource("pods").Name(pod.Name).SubResource("exec").
			Param("container", "kube-proxy").Param("command", "iptables").Param("stdout", "true").Do(ctx).Error()
		refused("exec into the kube-proxy", err, "KubeNestTenantGuard", "kube-system/kube-proxy-abcde", "privileged")
		err = client.CoreV1().RESTClient().Post().AbsPath("/api/v1/nodes/lent-1/proxy/run/kube-system", pod.Name, "kube-proxy").
			Param("cmd", "iptables").Do(ctx).Error()
		refused("the kubelet's run handler through nodes/proxy", err, "KubeNestTenantGuard", `"run" handler`)
		// The apiserver's kubelet client, as a kubelet's x509 authenticator names it, may; the
		// tenant's admin may not, nor the apiserver's name from a token (an OIDC issuer the
		// tenant added) or with a group.
		x509ID := map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/credential-id": {"X509SHA256=8f1e"}}
		for _, c := range []struct {
			what   string
			user   string
			groups []string
			extra  map[string]authorizationv1.ExtraValue
			want   bool
		}{
			{"the tenant's admin", "kubernetes-admin", []string{"system:masters", "system:authenticated"}, x509ID, false},
			{"the apiserver", controlplane.APIServerKubeletClient, []string{"system:authenticated"}, x509ID, true},
			{"the apiserver's name from a token", controlplane.APIServerKubeletClient, []string{"system:authenticated"}, nil, false},
			{"the apiserver's name with a group", controlplane.APIServerKubeletClient, []string{"system:masters", "system:authenticated"}, x509ID, false},
		} {
			review, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: c.user, Groups: c.groups, Extra: c.extra,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "nodes", Subresource: "proxy", Name: "lent-1"},
			}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if review.Status.Allowed != c.want {
				t.Errorf("a kubelet asking whether %s may use its proxy subresource: allowed %v (%s), want %v", c.what, review.Status.Allowed, review.Status.Reason, c.want)
			}
		}
		// What a kubelet serves besides, to the tenant's own monitoring: still the tenant's.
		review, err := client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "kubernetes-admin", Groups: []string{"system:masters"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Resource: "nodes", Subresource: "metrics", Name: "lent-1"},
		}}, metav1.CreateOptions{})
		if err != nil || !review.Status.Allowed {
			t.Errorf("a kubelet asking whether the admin may read its metrics: %+v, %v", review, err)
		}
	})
}

func waitServiceAccount(t *testing.T, ctx context.Context, client kubernetes.Interface, ns, name string) {
	t.Helper()
	for {
		if _, err := client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ServiceAccount %s/%s never appeared", ns, name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
