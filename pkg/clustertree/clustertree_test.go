package clustertree_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/iphold"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/pki"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

const (
	hostNS   = "tenants"
	tenantNS = "app"
	vcName   = "alpha"
	nodeName = "kubenest-shared"
	// serviceCIDR is the tenant's slice of the host's Service range; lentPodCIDR the pod range
	// of a host node lent to it; webIP the address the host gives its shared-node pod web.
	serviceCIDR = "10.0.3.0/24"
	lentPodCIDR = "10.244.7.0/24"
	webIP       = "10.244.1.9"
	// operatorIP is the address of the virtual node's kubelet API (the operator pod's).
	operatorIP = "10.244.0.5"
)

// TestSync runs a virtual node between two real API servers, a host and a tenant, and checks
// each direction of the sync. The test plays the host's kubelet (it sets host pod statuses)
// and the tenant's controller-manager (service account, root CA ConfigMap).
func TestSync(t *testing.T) {
	host := testenv.Start(t, testenv.Options{})
	tenantEnv := testenv.Start(t, testenv.Options{})
	hc := kubernetes.NewForConfigOrDie(host.Config)
	tc := kubernetes.NewForConfigOrDie(tenantEnv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	mustCreate(t, func() error {
		_, err := hc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostNS}}, metav1.CreateOptions{})
		return err
	})
	mustCreate(t, func() error {
		_, err := tc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}, metav1.CreateOptions{})
		return err
	})
	for _, c := range []struct {
		client kubernetes.Interface
		ns     string
	}{{tc, tenantNS}, {hc, hostNS}} {
		mustCreate(t, func() error {
			_, err := c.client.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
			return err
		})
	}
	for name, data := range map[string]map[string]string{
		"kube-root-ca.crt": {"ca.crt": "tenant CA"},
		"settings":         {"color": "blue"},
	} {
		mustCreate(t, func() error {
			_, err := tc.CoreV1().ConfigMaps(tenantNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: data}, metav1.CreateOptions{})
			return err
		})
	}
	mustCreate(t, func() error {
		_, err := tc.CoreV1().Secrets(tenantNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"},
			StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
		return err
	})

	// The operator holds every address of the tenant's range in the host before the node runs
	// (package iphold): the node's copies take their addresses' holds.
	held := iphold.Range{Client: hc.NetworkingV1().IPAddresses(), CIDR: netip.MustParsePrefix(serviceCIDR), Name: naming.ServiceCIDR(serviceCIDR)}
	if _, err := held.HoldAll(ctx, nil); err != nil {
		t.Fatal(err)
	}

	parent := t
	stop := startNode(t, host, tenantEnv)

	t.Run("virtual node registers with the host's capacity, the tenant's share allocatable", func(t *testing.T) {
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			cpu, allocatable, memory := n.Status.Capacity[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceCPU], n.Status.Allocatable[corev1.ResourceMemory]
			return ready(n) && cpu.String() == "4" && allocatable.String() == "3" && memory.String() == "8Gi", nil
		})
		if err != nil {
			t.Fatalf("virtual node not Ready with 4 CPUs, 3 of them and all 8Gi of memory allocatable: %v", err)
		}
		// The lease is renewed by its own loop, which may start just after the
		// node's first status: wait for it rather than expect it at once.
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := tc.CoordinationV1().Leases("kube-node-lease").Get(ctx, nodeName, metav1.GetOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("node lease kube-node-lease/%s never created: %v", nodeName, err)
		}
	})

	hostName := clustertree.HostName(vcName, tenantNS, "web")
	t.Run("pods down", func(t *testing.T) {
		createTenantPod(t, ctx, tc, webPod())
		hp := waitHostPod(t, ctx, hc, hostName)
		if hp.Annotations[clustertree.AnnotationTenantName] != "web" || hp.Labels["tenant.kubenest.io/app"] != "web" || hp.Labels[clustertree.LabelOrigin] != "clustertree" {
			t.Errorf("host pod metadata: labels %v annotations %v", hp.Labels, hp.Annotations)
		}
		if hp.Spec.AutomountServiceAccountToken == nil || *hp.Spec.AutomountServiceAccountToken || hp.Spec.NodeName != "" {
			t.Errorf("host pod spec: automount %v, nodeName %q", hp.Spec.AutomountServiceAccountToken, hp.Spec.NodeName)
		}
		sa, err := hc.CoreV1().ServiceAccounts(hostNS).Get(ctx, hp.Spec.ServiceAccountName, metav1.GetOptions{})
		if err != nil || sa.Name != clustertree.HostServiceAccount || len(sa.ImagePullSecrets) != 0 || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("the host pod's ServiceAccount %q: %+v, %v; want KubeNest's, with no pull Secrets and no token", hp.Spec.ServiceAccountName, sa, err)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range hp.Spec.Containers[0].Env {
			env[e.Name] = e
		}
		if env["KUBERNETES_SERVICE_HOST"].Value != "10.96.7.7" {
			t.Errorf("KUBERNETES_SERVICE_HOST %q", env["KUBERNETES_SERVICE_HOST"].Value)
		}
		if ref := env["COLOR"].ValueFrom; ref == nil || ref.ConfigMapKeyRef.Name != clustertree.HostName(vcName, tenantNS, "settings") {
			t.Errorf("COLOR from %+v", ref)
		}
		if ref := env["POD_NAME"].ValueFrom; ref == nil || ref.FieldRef.FieldPath != "metadata.annotations['kubenest.io/tenant-name']" {
			t.Errorf("POD_NAME from %+v", ref)
		}
		// Only what the pod refers to is copied; the token is the tenant's, for this pod.
		for _, name := range []string{"settings", "kube-root-ca.crt"} {
			cm, err := hc.CoreV1().ConfigMaps(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, name), metav1.GetOptions{})
			if err != nil {
				t.Errorf("host copy of ConfigMap %s: %v", name, err)
				continue
			}
			if cm.Annotations[clustertree.AnnotationTenantName] != name {
				t.Errorf("ConfigMap %s annotations %v", name, cm.Annotations)
			}
		}
		s, err := hc.CoreV1().Secrets(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "creds"), metav1.GetOptions{})
		if err != nil || string(s.Data["password"]) != "hunter2" {
			t.Errorf("host copy of Secret creds: %v", err)
		}
		token, err := hc.CoreV1().Secrets(hostNS).Get(ctx, clustertree.TokenSecretName(hostName), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("token Secret: %v", err)
		}
		review, err := tc.AuthenticationV1().TokenReviews().Create(ctx, tokenReview(string(token.Data[clustertree.TokenKey(0)])), metav1.CreateOptions{})
		if err != nil || !review.Status.Authenticated || review.Status.User.Username != "system:serviceaccount:app:default" {
			t.Errorf("the token is not the tenant's default service account's: %v %+v", err, review.Status)
		}
	})

	shop := clustertree.HostName(vcName, tenantNS, "shop")
	t.Run("Services down, in the tenant's slice only", func(t *testing.T) {
		for name, ip := range map[string]string{
			"shop":        "10.0.3.40", // the tenant's
			"hijack-host": "10.0.0.88", // the host's own range
			"hijack-peer": "10.0.9.77", // another tenant's slice
		} {
			mustCreate(t, func() error {
				_, err := tc.CoreV1().Services(tenantNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: corev1.ServiceSpec{ClusterIP: ip, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
				return err
			})
		}
		hs := waitHostService(t, ctx, hc, shop)
		if hs.Spec.ClusterIP != "10.0.3.40" {
			t.Errorf("host copy of shop at %s, want 10.0.3.40", hs.Spec.ClusterIP)
		}
		for name, ip := range map[string]string{"hijack-host": "10.0.0.88", "hijack-peer": "10.0.9.77"} {
			waitEvent(t, ctx, tc, name, clustertree.ReasonClusterIPOutsideRange, "spec.clusterIPs[0] "+ip+" is outside this tenant's Service range "+serviceCIDR)
			if _, err := hc.CoreV1().Services(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, name), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("a host copy of %s at %s: %v", name, ip, err)
			}
		}
	})

	t.Run("a copy takes its address's hold, and holds it again when it goes", func(t *testing.T) {
		owner := func(ip string) string {
			a, err := hc.NetworkingV1().IPAddresses().Get(ctx, ip, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			return a.Labels[networkingv1.LabelManagedBy] + " " + a.Spec.ParentRef.Resource + "/" + a.Spec.ParentRef.Name
		}
		if got, want := owner("10.0.3.40"), "ipallocator.k8s.io services/"+shop; got != want {
			t.Errorf("address of shop's copy held by %q, want %q", got, want)
		}
		mustCreate(t, func() error {
			_, err := tc.CoreV1().Services(tenantNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "brief"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.3.41", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
			return err
		})
		brief := clustertree.HostName(vcName, tenantNS, "brief")
		waitHostService(t, ctx, hc, brief)
		if err := tc.CoreV1().Services(tenantNS).Delete(ctx, "brief", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := hc.CoreV1().Services(hostNS).Get(ctx, brief, metav1.GetOptions{})
			return err
		}, "host copy of brief")
		want := "kubenest.io servicecidrs/" + naming.ServiceCIDR(serviceCIDR)
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return owner("10.0.3.41") == want, nil
		})
		if err != nil {
			t.Errorf("address of the deleted copy held by %q, want %q", owner("10.0.3.41"), want)
		}
	})

	t.Run("EndpointSlices down, with the tenant's pods' addresses only", func(t *testing.T) {
		// Written by hand, as a hostile tenant would: web's address (its host pod has none yet),
		// a pod on its lent node, the host's apiserver Service and control plane, and another
		// tenant's pod.
		mustCreate(t, func() error {
			_, err := tc.DiscoveryV1().EndpointSlices(tenantNS).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: "shop-1", Labels: map[string]string{discoveryv1.LabelServiceName: "shop"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints: []discoveryv1.Endpoint{{Addresses: []string{webIP}}, {Addresses: []string{"10.244.7.5"}},
					{Addresses: []string{"10.96.0.1"}}, {Addresses: []string{"172.30.0.1"}}, {Addresses: []string{"10.244.1.66"}}},
				Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
			}, metav1.CreateOptions{})
			return err
		})
		// And slices with none of the tenant's addresses, by the hundred in an attack: they
		// would say no more than none.
		for _, name := range []string{"shop-0a", "shop-0b", "shop-0c"} {
			mustCreate(t, func() error {
				_, err := tc.DiscoveryV1().EndpointSlices(tenantNS).Create(ctx, &discoveryv1.EndpointSlice{
					ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "shop"}},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"172.30.0.1"}}},
				}, metav1.CreateOptions{})
				return err
			})
		}
		waitHostEndpoints(t, ctx, hc, shop, []string{"10.244.7.5"})
		waitEvent(t, ctx, tc, "shop", clustertree.ReasonEndpointsDropped, "not an address of this tenant's pods")
		if list, err := hc.DiscoveryV1().EndpointSlices(hostNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + shop}); err != nil || len(list.Items) != 1 {
			t.Errorf("host EndpointSlices of %s: %d, %v; want the one with an address of the tenant's pods", shop, len(list.Items), err)
		}
	})

	t.Run("the node's address is a ClusterIP of its own, leading its NodePorts to the control plane", func(t *testing.T) {
		addr := clustertree.SharedNodeAddress(netip.MustParsePrefix(serviceCIDR)).String()
		if addr != "10.0.3.2" {
			t.Fatalf("SharedNodeAddress(%s) = %s", serviceCIDR, addr)
		}
		n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Status.Addresses[0]; got.Type != corev1.NodeInternalIP || got.Address != addr {
			t.Errorf("the node's first address is %v, want InternalIP %s", got, addr)
		}
		if got := n.Status.DaemonEndpoints.KubeletEndpoint.Port; got != clustertree.KubeletPort {
			t.Errorf("the node's kubelet port is %d, want %d", got, clustertree.KubeletPort)
		}
		// A control-plane pod of the tenant, as the host's kubelet reports it.
		cp := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "alpha-controlplane-1", Labels: naming.For(vcName).Labels(naming.ComponentControlPlane)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kube-apiserver", Image: "nest",
				Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 6443}}}}},
		}
		mustCreate(t, func() error {
			created, err := hc.CoreV1().Pods(hostNS).Create(ctx, cp, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.2.20", PodIPs: []corev1.PodIP{{IP: "10.244.2.20"}},
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			_, err = hc.CoreV1().Pods(hostNS).UpdateStatus(ctx, created, metav1.UpdateOptions{})
			return err
		})
		mustCreate(t, func() error {
			_, err := tc.CoreV1().Services(tenantNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shop-np"},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.0.3.41",
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080}}}}, metav1.CreateOptions{})
			return err
		})
		hostName := clustertree.HostName(vcName, sharednode.AddressServiceNamespace, sharednode.AddressService)
		for side, c := range map[string]struct {
			client   kubernetes.Interface
			ns, name string
		}{"host": {hc, hostNS, hostName}, "tenant": {tc, sharednode.AddressServiceNamespace, sharednode.AddressService}} {
			err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				svc, err := c.client.CoreV1().Services(c.ns).Get(ctx, c.name, metav1.GetOptions{})
				if err != nil || svc.Spec.ClusterIP != addr || len(svc.Spec.Ports) != 2 ||
					svc.Spec.Ports[0].Port != clustertree.KubeletPort || svc.Spec.Ports[1].Port != 30080 {
					return false, nil
				}
				// Named after the Service on each side: the host's is the tenant's own.
				return slicesHold(ctx, c.client, c.ns, c.name, map[string]string{
					clustertree.AddressSliceName(c.name, sharednode.SliceSuffixKubelet):   operatorIP,
					clustertree.AddressSliceName(c.name, sharednode.SliceSuffixNodePorts): "10.244.2.20:tcp-30080=30080"}), nil
			})
			if err != nil {
				t.Errorf("the %s Service %s/%s does not lead the kubelet port to clustertree and 30080 to the control-plane pod: %v", side, c.ns, c.name, err)
			}
		}
		// A hostile tenant points the address elsewhere: its edit is undone, and the host
		// never follows it.
		ts, err := tc.DiscoveryV1().EndpointSlices(sharednode.AddressServiceNamespace).Get(ctx, sharednode.AddressSliceKubelet, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ts.Endpoints[0].Addresses = []string{"172.30.0.1"}
		if _, err := tc.DiscoveryV1().EndpointSlices(sharednode.AddressServiceNamespace).Update(ctx, ts, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			s, err := tc.DiscoveryV1().EndpointSlices(sharednode.AddressServiceNamespace).Get(ctx, sharednode.AddressSliceKubelet, metav1.GetOptions{})
			return err == nil && s.Endpoints[0].Addresses[0] == operatorIP, nil
		})
		if err != nil {
			t.Errorf("the tenant's edit of the address's kubelet endpoint was not undone: %v", err)
		}
		if !slicesHold(ctx, hc, hostNS, hostName, map[string]string{clustertree.AddressSliceName(hostName, sharednode.SliceSuffixKubelet): operatorIP,
			clustertree.AddressSliceName(hostName, sharednode.SliceSuffixNodePorts): "10.244.2.20:tcp-30080=30080"}) {
			t.Error("the host's address Service followed the tenant's edit")
		}
		if err := hc.CoreV1().Pods(hostNS).Delete(ctx, cp.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("status up", func(t *testing.T) {
		playKubelet(t, ctx, hc, hostName, webIP)
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			p, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP == "10.244.1.9" &&
				len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready, nil
		})
		if err != nil {
			t.Fatalf("tenant pod status: %v", err)
		}
	})

	t.Run("an extended resource the tenant adds to the node is its own accounting", func(t *testing.T) {
		// As upstream's e2e framework adds one (AddExtendedResource), and a device plugin would.
		const foo = corev1.ResourceName("example.com/foo")
		patch := `{"status":{"capacity":{"example.com/foo":"5"},"allocatable":{"example.com/foo":"5"}}}`
		if _, err := tc.CoreV1().Nodes().Patch(ctx, nodeName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "counted", Namespace: tenantNS}, Spec: corev1.PodSpec{
			NodeName: nodeName,
			Containers: []corev1.Container{{Name: "c", Image: "kubenest.io/busybox:1.35", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{foo: resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{foo: resource.MustParse("2")},
			}}},
		}}
		createTenantPod(t, ctx, tc, pod)
		hp := waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "counted"))
		res := hp.Spec.Containers[0].Resources
		if _, asked := res.Requests[foo]; asked || len(res.Limits) != 0 || res.Requests.Cpu().String() != "100m" {
			t.Errorf("host pod resources %+v, want the CPU request only: the host has no %s", res, foo)
		}
		// Once the node's status has been written again, the tenant's resource is still there.
		patched := time.Now().Truncate(time.Second)
		var n *corev1.Node
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			n, err = tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			return err == nil && slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
				return c.Type == corev1.NodeReady && c.LastHeartbeatTime.After(patched)
			}), nil
		})
		if err != nil {
			t.Fatalf("the node's status was not written again: %v", err)
		}
		if q := n.Status.Allocatable[foo]; q.String() != "5" || n.Status.Allocatable.Cpu().String() != "3" {
			t.Errorf("node allocatable %v, want the tenant's share of the host's with %s: 5", n.Status.Allocatable, foo)
		}
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "counted", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("an endpoint is copied once its host pod has the address", func(t *testing.T) {
		waitHostEndpoints(t, ctx, hc, shop, []string{webIP, "10.244.7.5"})
	})

	t.Run("the host kubelet's events about a host pod are the tenant pod's", func(t *testing.T) {
		hp := waitHostPod(t, ctx, hc, hostName)
		now := metav1.Now()
		for _, ev := range []*corev1.Event{
			{ObjectMeta: metav1.ObjectMeta{Name: "backoff", Namespace: hostNS}, Type: corev1.EventTypeWarning, Reason: "BackOff",
				Message:        "Back-off restarting failed container web in pod " + hostName + "_" + hostNS + "(" + string(hp.UID) + ")",
				Source:         corev1.EventSource{Component: "kubelet", Host: "host-node-1"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: hostNS, Name: hostName, UID: hp.UID, FieldPath: "spec.containers{web}"},
				FirstTimestamp: now, LastTimestamp: now, Count: 1},
			// The host's scheduler speaks of host matters: not passed on.
			{ObjectMeta: metav1.ObjectMeta{Name: "scheduled", Namespace: hostNS}, Type: corev1.EventTypeNormal, Reason: "Scheduled",
				Message:        "Successfully assigned " + hostNS + "/" + hostName + " to host-node-1",
				Source:         corev1.EventSource{Component: "default-scheduler"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: hostNS, Name: hostName, UID: hp.UID},
				FirstTimestamp: now, LastTimestamp: now, Count: 1},
		} {
			if _, err := hc.CoreV1().Events(hostNS).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var got []corev1.Event
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			l, err := tc.CoreV1().Events(tenantNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=BackOff"})
			if err != nil {
				return false, nil
			}
			got = l.Items
			return len(got) > 0, nil
		})
		if err != nil {
			t.Fatalf("no BackOff event on the tenant pod: %v", err)
		}
		ev := got[0]
		if want := "Back-off restarting failed container web in pod web_" + tenantNS + "(" + string(ev.InvolvedObject.UID) + ")"; ev.Message != want ||
			ev.InvolvedObject.FieldPath != "spec.containers{web}" || ev.Type != corev1.EventTypeWarning || ev.Source.Host != nodeName {
			t.Errorf("tenant event %q (%s, %s, from %+v), want %q on spec.containers{web} from the virtual node", ev.Message, ev.Type, ev.InvolvedObject.FieldPath, ev.Source, want)
		}
		if strings.Contains(ev.Message, hostNS) || strings.Contains(ev.Message, string(hp.UID)) {
			t.Errorf("tenant event %q names the host's namespace or pod", ev.Message)
		}
		l, err := tc.CoreV1().Events(tenantNS).List(ctx, metav1.ListOptions{FieldSelector: "reason=Scheduled"})
		if err == nil && len(l.Items) > 0 {
			t.Errorf("the host scheduler's event reached the tenant: %q", l.Items[0].Message)
		}
	})

	t.Run("label changes follow, under KubeNest's prefix", func(t *testing.T) {
		// A pod whose host pod last changed a few seconds ago: virtual-kubelet used to write that
		// change's report back to the tenant pod with the labels of then, undoing the tenant's
		// new ones (statusOnlyClient).
		time.Sleep(3 * time.Second)
		patch := []byte(`{"metadata":{"labels":{"app":"web-v2","k8s.v1.cni.cncf.io/role":"x"}}}`)
		if _, err := tc.CoreV1().Pods(tenantNS).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		var hp *corev1.Pod
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			hp, err = hc.CoreV1().Pods(hostNS).Get(ctx, hostName, metav1.GetOptions{})
			return err == nil && hp.Labels["tenant.kubenest.io/app"] == "web-v2", nil
		})
		if err != nil {
			t.Fatalf("the host pod's labels did not follow: %v", err)
		}
		if _, ok := hp.Labels["k8s.v1.cni.cncf.io/role"]; ok || hp.Labels["k8s.v1.cni.cncf.io.tenant.kubenest.io/role"] != "x" {
			t.Errorf("host pod labels %v", hp.Labels)
		}
		// The downward-API file of all labels, as the host's kubelet will write it.
		if got, want := hp.Annotations[clustertree.AnnotationTenantLabels], "app=\"web-v2\"\nk8s.v1.cni.cncf.io/role=\"x\""; got != want {
			t.Errorf("%s = %q, want %q", clustertree.AnnotationTenantLabels, got, want)
		}
		// The tenant pod keeps its labels, and never carries what clustertree notes for itself.
		tp, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, noted := tp.Annotations[clustertree.AnnotationTenantMetadata]; noted || tp.Labels["app"] != "web-v2" {
			t.Errorf("tenant pod labels %v annotations %v, want app=web-v2 and no %s", tp.Labels, tp.Annotations, clustertree.AnnotationTenantMetadata)
		}
	})

	t.Run("config changes follow", func(t *testing.T) {
		cm, err := tc.CoreV1().ConfigMaps(tenantNS).Get(ctx, "settings", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["color"] = "green"
		if _, err := tc.CoreV1().ConfigMaps(tenantNS).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			h, err := hc.CoreV1().ConfigMaps(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "settings"), metav1.GetOptions{})
			return err == nil && h.Data["color"] == "green", nil
		})
		if err != nil {
			t.Errorf("host copy did not follow the tenant's change: %v", err)
		}
	})

	t.Run("optional references follow as the tenant's objects come and go", func(t *testing.T) {
		mustCreate(t, func() error {
			_, err := tc.CoreV1().Secrets(tenantNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "soon-gone"},
				StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			return err
		})
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "optional", Namespace: tenantNS},
			Spec: corev1.PodSpec{
				NodeName:   nodeName,
				Containers: []corev1.Container{{Name: "c", Image: "kubenest.io/busybox:1.35", Command: []string{"sleep", "3600"}}},
				Volumes: []corev1.Volume{{Name: "opt", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "later"}, Optional: ptr.To(true)}},
					{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "soon-gone"}, Optional: ptr.To(true)}},
				}}}}},
			},
		}
		createTenantPod(t, ctx, tc, pod)
		waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "optional"))
		secretCopy := clustertree.HostName(vcName, tenantNS, "soon-gone")
		if _, err := hc.CoreV1().Secrets(hostNS).Get(ctx, secretCopy, metav1.GetOptions{}); err != nil {
			t.Fatalf("host copy of the Secret the pod refers to: %v", err)
		}
		// A ConfigMap that did not exist when the pod started is copied once the tenant makes
		// it; a Secret the tenant deletes goes from the host too.
		mustCreate(t, func() error {
			_, err := tc.CoreV1().ConfigMaps(tenantNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"},
				Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			return err
		})
		if err := tc.CoreV1().Secrets(tenantNS).Delete(ctx, "soon-gone", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := hc.CoreV1().ConfigMaps(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "later"), metav1.GetOptions{})
			if err != nil || cm.Data["k"] != "v" {
				return false, nil
			}
			_, err = hc.CoreV1().Secrets(hostNS).Get(ctx, secretCopy, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Errorf("host copies did not follow the tenant's new ConfigMap and deleted Secret: %v", err)
		}
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "optional", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Error(err)
		}
	})

	t.Run("host deletion shows in the tenant", func(t *testing.T) {
		if err := hc.CoreV1().Pods(hostNS).Delete(ctx, hostName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "web", metav1.GetOptions{})
			return err
		}, "tenant pod web after its host pod was deleted")
	})

	t.Run("tenant deletion removes the host pod", func(t *testing.T) {
		createTenantPod(t, ctx, tc, webPod())
		waitHostPod(t, ctx, hc, hostName)
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := hc.CoreV1().Pods(hostNS).Get(ctx, hostName, metav1.GetOptions{})
			return err
		}, "host pod after the tenant pod was deleted")
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "web", metav1.GetOptions{})
			return err
		}, "tenant pod web")
	})

	t.Run("a pod whose name's earlier host pod is still going waits for it, not Failed", func(t *testing.T) {
		// virtual-kubelet fails a restartPolicy Never pod on any error of CreatePod: one that
		// passes within moments must not end the pod.
		once := webPod()
		once.Name, once.Spec.RestartPolicy = "once", corev1.RestartPolicyNever
		onceHost := clustertree.HostName(vcName, tenantNS, "once")
		createTenantPod(t, ctx, tc, once.DeepCopy())
		hp := waitHostPod(t, ctx, hc, onceHost)
		hp.Finalizers = append(hp.Finalizers, "kubenest.io/test-hold")
		if _, err := hc.CoreV1().Pods(hostNS).Update(ctx, hp, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "once", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "once", metav1.GetOptions{})
			return err
		}, "tenant pod once")
		createTenantPod(t, ctx, tc, once.DeepCopy())
		time.Sleep(time.Second)
		held, err := hc.CoreV1().Pods(hostNS).Get(ctx, onceHost, metav1.GetOptions{})
		if err != nil || held.DeletionTimestamp == nil {
			t.Fatalf("the earlier host pod should still be going: %v", err)
		}
		held.Finalizers = nil
		if _, err := hc.CoreV1().Pods(hostNS).Update(ctx, held, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		tenantPod, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "once", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			hp, err := hc.CoreV1().Pods(hostNS).Get(ctx, onceHost, metav1.GetOptions{})
			return err == nil && hp.Annotations[clustertree.AnnotationTenantUID] == string(tenantPod.UID), nil
		})
		if err != nil {
			t.Fatalf("no host pod for the new tenant pod once: %v", err)
		}
		if p, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "once", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		} else if p.Status.Phase == corev1.PodFailed {
			t.Fatalf("tenant pod once is Failed: %s: %s", p.Status.Reason, p.Status.Message)
		}
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "once", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("pods asking for host privileges are refused with an event", func(t *testing.T) {
		// (Privileged containers are refused the same way; this tenant apiserver does not
		// admit them at all.)
		p := webPod()
		p.Name = "root"
		p.Spec.HostNetwork = true
		createTenantPod(t, ctx, tc, p)
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "root", metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodFailed && got.Status.Reason == clustertree.ReasonForbidden, nil
		})
		if err != nil {
			t.Fatalf("privileged pod not refused: %v", err)
		}
		err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			events, err := tc.CoreV1().Events(tenantNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=root"})
			if err != nil {
				return false, nil
			}
			for _, e := range events.Items {
				if e.Reason == clustertree.ReasonForbidden && strings.Contains(e.Message, "spec.hostNetwork") {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Errorf("no Forbidden event naming spec.hostNetwork: %v", err)
		}
		if _, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "root"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host pod exists for the refused pod: %v", err)
		}
	})

	t.Run("a pod beyond the tenant's share of the shared nodes fails, as on a full kubelet; so does a resize", func(t *testing.T) {
		cpu := func(name, q string) *corev1.Pod {
			p := webPod()
			p.Name = name
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
			return p
		}
		// Bound straight to the node, past the tenant's scheduler (which sees 3 CPUs
		// allocatable, and would place neither the second pod nor the resize).
		for _, name := range []string{"big-1", "big-2", "small"} { // and "next", below
			defer func() {
				if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
					t.Error(err)
				}
			}()
		}
		createTenantPod(t, ctx, tc, cpu("big-1", "2"))
		waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "big-1"))
		createTenantPod(t, ctx, tc, cpu("big-2", "1500m"))
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			got, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "big-2", metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodFailed && got.Status.Reason == "OutOfcpu", nil
		})
		if err != nil {
			t.Fatalf("a pod beyond the quota not failed with reason OutOfcpu: %v", err)
		}
		waitEvent(t, ctx, tc, "big-2", "OutOfcpu", "cpu: requested 1500m, 2 in use of 3")
		if _, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "big-2"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host pod exists for the pod beyond the quota: %v", err)
		}
		createTenantPod(t, ctx, tc, cpu("small", "500m"))
		waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "small"))

		// A resize within the share is made; one beyond it (beside the small pod; each alone
		// fits the node, so the tenant's apiserver allows it) is not.
		resize := func(q string) {
			p, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "big-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(q)
			if _, err := tc.CoreV1().Pods(tenantNS).UpdateResize(ctx, p.Name, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		hostCPU := func(ctx context.Context) string {
			hp, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "big-1"), metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			return hp.Spec.Containers[0].Resources.Requests.Cpu().String()
		}
		resize("2500m")
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			return hostCPU(ctx) == "2500m", nil
		}); err != nil {
			t.Fatalf("a resize within the quota: the host pod asks for %s CPU, want 2500m", hostCPU(ctx))
		}
		resize("2600m")
		waitEvent(t, ctx, tc, "big-1", "OutOfcpu", "resize refused by the shared node: the tenant's share of the shared nodes has no room for it: cpu: requested 2600m, 500m in use of 3")
		if got := hostCPU(ctx); got != "2500m" {
			t.Errorf("a resize beyond the quota: the host pod asks for %s CPU, want 2500m as before", got)
		}

		// A pod that fits only once a deleted pod's host pod is gone (the host kubelet still
		// stops it) waits for that, rather than fail. Bound to a host node, as the host's
		// scheduler would, the host pod goes only when the host's kubelet says so.
		big1 := clustertree.HostName(vcName, tenantNS, "big-1")
		if err := hc.CoreV1().Pods(hostNS).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: big1},
			Target: corev1.ObjectReference{Kind: "Node", Name: "kn-worker-1"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "big-1", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](30)}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
			hp, err := hc.CoreV1().Pods(hostNS).Get(ctx, big1, metav1.GetOptions{})
			return err == nil && hp.DeletionTimestamp != nil, nil
		}); err != nil {
			t.Fatalf("big-1's host pod not being deleted: %v", err)
		}
		createTenantPod(t, ctx, tc, cpu("next", "2500m"))
		defer func() {
			_ = tc.CoreV1().Pods(tenantNS).Delete(ctx, "next", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}()
		time.Sleep(2 * time.Second)
		if got, err := tc.CoreV1().Pods(tenantNS).Get(ctx, "next", metav1.GetOptions{}); err != nil || got.Status.Phase == corev1.PodFailed {
			t.Fatalf("a pod waiting for a leaving one: %v, phase %s %s", err, got.Status.Phase, got.Status.Reason)
		}
		if _, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "next"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("a host pod for the waiting pod while the leaving one still runs: %v", err)
		}
		// The host's kubelet finishes stopping big-1.
		if err := hc.CoreV1().Pods(hostNS).Delete(ctx, big1, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
		waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "next"))
	})

	t.Run("a pod whose ConfigMaps would take the tenant's copies past its budget fails, and the host gets no more", func(t *testing.T) {
		// The budget is 256 KiB (startNode): one 100 KiB ConfigMap fits beside the small
		// copies of the other subtests, three do not.
		big := strings.Repeat("x", 100<<10)
		for _, name := range []string{"big-a", "big-b", "big-c"} {
			mustCreate(t, func() error {
				_, err := tc.CoreV1().ConfigMaps(tenantNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"blob": big}}, metav1.CreateOptions{})
				return err
			})
		}
		mounting := func(name string, cms ...string) *corev1.Pod {
			p := webPod()
			p.Name = name
			for _, cm := range cms {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: cm, VolumeSource: corev1.VolumeSource{
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}})
			}
			return p
		}
		createTenantPod(t, ctx, tc, mounting("within", "big-a"))
		waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, "within"))
		createTenantPod(t, ctx, tc, mounting("past", "big-b", "big-c"))
		var got *corev1.Pod
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = tc.CoreV1().Pods(tenantNS).Get(ctx, "past", metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodFailed, nil
		})
		if err != nil || got.Status.Reason != clustertree.ReasonCopyBudget || !strings.Contains(got.Status.Message, "--shared-node-copy-bytes") {
			t.Fatalf("the pod past the budget: %v, status %s: %s", err, got.Status.Reason, got.Status.Message)
		}
		t.Logf("refused: %s", got.Status.Message)
		if _, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, "past"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host pod exists for the pod past the budget: %v", err)
		}
		var copied int
		cms, err := hc.CoreV1().ConfigMaps(hostNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, cm := range cms.Items {
			for k, v := range cm.Data {
				copied += len(k) + len(v)
			}
		}
		if copied > 256<<10 {
			t.Errorf("the host holds %d bytes of the tenant's ConfigMaps, past the budget of %d", copied, 256<<10)
		}
		for _, name := range []string{"within", "past"} {
			if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
		}
	})

	t.Run("an EndpointSlice past the tenant's budget is not copied, and its Service says why", func(t *testing.T) {
		// Thousands of ports on one slice of an address of the tenant's own: 100 such slices a
		// Service, a few hundred Services, would fill the host's etcd.
		mustCreate(t, func() error {
			_, err := tc.CoreV1().Services(tenantNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "wide"},
				Spec: corev1.ServiceSpec{ClusterIP: "10.0.3.44", Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
			return err
		})
		ports := make([]discoveryv1.EndpointPort, 16000)
		for i := range ports {
			ports[i] = discoveryv1.EndpointPort{Name: ptr.To(fmt.Sprintf("port-%05d", i)), Port: ptr.To[int32](80)}
		}
		mustCreate(t, func() error {
			_, err := tc.DiscoveryV1().EndpointSlices(tenantNS).Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: "wide-1", Labels: map[string]string{discoveryv1.LabelServiceName: "wide"}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.7.9"}}},
				Ports:       ports,
			}, metav1.CreateOptions{})
			return err
		})
		wide := clustertree.HostName(vcName, tenantNS, "wide")
		waitHostService(t, ctx, hc, wide)
		waitEvent(t, ctx, tc, "wide", clustertree.ReasonCopyBudget, "--shared-node-copy-bytes")
		if list, err := hc.DiscoveryV1().EndpointSlices(hostNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + wide}); err != nil || len(list.Items) != 0 {
			t.Errorf("host EndpointSlices of %s: %d, %v; want none", wide, len(list.Items), err)
		}
		if err := tc.CoreV1().Services(tenantNS).Delete(ctx, "wide", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tc.DiscoveryV1().EndpointSlices(tenantNS).Delete(ctx, "wide-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := hc.CoreV1().Services(hostNS).Get(ctx, wide, metav1.GetOptions{})
			return err
		}, "host copy of Service wide")
	})

	t.Run("the host keeps the containers of the tenant's newest ended pods only, and the tenant all its pods", func(t *testing.T) {
		// The node keeps 3 (startNode); 5 pods end, one a second: the host pods of the two
		// that ended first go, the tenant's pods stay as they ended.
		names := []string{"done-0", "done-1", "done-2", "done-3", "done-4"}
		ended := time.Now().Add(-time.Minute)
		for i, name := range names {
			createTenantPod(t, ctx, tc, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNS},
				Spec: corev1.PodSpec{NodeName: nodeName, RestartPolicy: corev1.RestartPolicyNever,
					Containers: []corev1.Container{{Name: "c", Image: "kubenest.io/busybox:1.35", Command: []string{"true"}}}},
			})
			hp := waitHostPod(t, ctx, hc, clustertree.HostName(vcName, tenantNS, name))
			at := metav1.NewTime(ended.Add(time.Duration(i) * time.Second))
			hp.Status = corev1.PodStatus{Phase: corev1.PodSucceeded, HostIP: "172.30.0.11", StartTime: &at,
				ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Image: "kubenest.io/busybox:1.35",
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: at, FinishedAt: at}}}}}
			if _, err := hc.CoreV1().Pods(hostNS).UpdateStatus(ctx, hp, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i, name := range names {
			hostPod := clustertree.HostName(vcName, tenantNS, name)
			if i < 2 {
				waitGone(t, ctx, func(ctx context.Context) error {
					_, err := hc.CoreV1().Pods(hostNS).Get(ctx, hostPod, metav1.GetOptions{})
					return err
				}, "host pod of "+name+", one of the two oldest of five ended pods")
			}
		}
		for i, name := range names {
			p, err := tc.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
			if err != nil || p.Status.Phase != corev1.PodSucceeded {
				t.Errorf("tenant pod %s: %v, phase %v; want it kept, Succeeded", name, err, p.Status.Phase)
			}
			_, err = hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, name), metav1.GetOptions{})
			if kept := err == nil; kept != (i >= 2) {
				t.Errorf("host pod of %s kept: %v, want %v (%v)", name, kept, i >= 2, err)
			}
		}
		for _, name := range names {
			if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			waitGone(t, ctx, func(ctx context.Context) error {
				_, err := tc.CoreV1().Pods(tenantNS).Get(ctx, name, metav1.GetOptions{})
				return err
			}, "tenant pod "+name)
			waitGone(t, ctx, func(ctx context.Context) error {
				_, err := hc.CoreV1().Pods(hostNS).Get(ctx, clustertree.HostName(vcName, tenantNS, name), metav1.GetOptions{})
				return err
			}, "host pod of "+name)
		}
	})

	t.Run("restart rebuilds from both sides", func(t *testing.T) {
		stop()
		// While no node runs: a tenant pod is created, and an orphan host pod appears.
		createTenantPod(t, ctx, tc, webPod())
		orphan := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: clustertree.HostName(vcName, tenantNS, "ghost"), Labels: clustertree.HostSelector(vcName),
				Annotations: map[string]string{clustertree.AnnotationTenantName: "ghost", clustertree.AnnotationTenantNamespace: tenantNS, clustertree.AnnotationTenantUID: "gone"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		mustCreate(t, func() error {
			_, err := hc.CoreV1().Pods(hostNS).Create(ctx, orphan, metav1.CreateOptions{})
			return err
		})
		stop = startNode(parent, host, tenantEnv) // runs past this subtest
		waitHostPod(t, ctx, hc, hostName)
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := hc.CoreV1().Pods(hostNS).Get(ctx, orphan.Name, metav1.GetOptions{})
			return err
		}, "orphan host pod")
		pods, err := hc.CoreV1().Pods(hostNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 1 {
			t.Errorf("%d host pods, want 1 (web)", len(pods.Items))
		}
	})

	t.Run("copies no pod uses are collected", func(t *testing.T) {
		if err := tc.CoreV1().Pods(tenantNS).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitGone(t, ctx, func(ctx context.Context) error {
			_, err := hc.CoreV1().Pods(hostNS).Get(ctx, hostName, metav1.GetOptions{})
			return err
		}, "host pod")
		err := wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			cms, err1 := hc.CoreV1().ConfigMaps(hostNS).List(ctx, metav1.ListOptions{LabelSelector: clustertree.LabelOrigin})
			secrets, err2 := hc.CoreV1().Secrets(hostNS).List(ctx, metav1.ListOptions{LabelSelector: clustertree.LabelOrigin})
			return err1 == nil && err2 == nil && len(cms.Items) == 0 && len(secrets.Items) == 0, nil
		})
		if err != nil {
			t.Errorf("host copies left behind: %v", err)
		}
	})

	t.Run("OptIn taints the node made before it, and again when the tenant takes it off; Overflow takes it off; the tenant's own taints stay", func(t *testing.T) {
		own := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Spec.Taints = append(n.Spec.Taints, own)
			_, err = tc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, optIn := range []bool{true, false} {
			stop()
			stop = startNode(parent, host, tenantEnv, func(c *clustertree.Config) { c.OptIn = optIn })
			// The node lifecycle controller's not-ready taint may come and go while no node runs.
			var got []corev1.Taint
			has := func(w corev1.Taint) bool {
				return slices.ContainsFunc(got, func(g corev1.Taint) bool { return g.MatchTaint(&w) })
			}
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
				n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				got = n.Spec.Taints
				return has(own) && has(sharednode.Taint) == optIn, nil
			})
			if err != nil {
				t.Fatalf("OptIn %t: the node's taints are %v, want %v and the shared node's taint: %t", optIn, got, own, optIn)
			}
			if !optIn {
				continue
			}
			// The tenant's admin takes the taint off: it comes back.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&sharednode.Taint) })
				_, err = tc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
				n, err := tc.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				got = n.Spec.Taints
				return has(own) && has(sharednode.Taint), nil
			})
			if err != nil {
				t.Fatalf("the taint the tenant took off did not come back: %v", got)
			}
		}
	})
}

// startNode runs the virtual node until the returned function stops it.
func startNode(t *testing.T, host, tenant *testenv.Env, opts ...func(*clustertree.Config)) func() {
	t.Helper()
	ca, err := pki.NewCA("tenant-ca", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue(pki.CertSpec{CommonName: "system:node:" + nodeName, IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: pki.UsageServer}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := serving.KeyPEM()
	pair, err := tls.X509KeyPair(serving.CertPEM(), key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := clustertree.Config{
		VirtualCluster: vcName, VirtualClusterUID: "6d1c9e38-0000-4000-8000-00000000aaaa", HostNamespace: hostNS,
		NodeName: nodeName, Host: host.Config, Tenant: tenant.Config,
		ServingCert: pair, ClientCA: ca.CertPEM(),
		NodeAddress: operatorIP, ListenAddress: "127.0.0.1:0",
		APIServerHost: "10.96.7.7", APIServerPort: 6443,
		// Both test apiservers allocate from 10.0.0.0/16: the tenant's slice is a part of it.
		ServiceCIDR: serviceCIDR,
		TenantAddresses: func(context.Context) ([]netip.Prefix, error) {
			return []netip.Prefix{netip.MustParsePrefix(lentPodCIDR), netip.MustParsePrefix("172.30.0.12/32")}, nil
		},
		Capacity: func(context.Context) (corev1.ResourceList, error) {
			return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
				corev1.ResourcePods: resource.MustParse("110")}, nil
		},
		// The tenant's share: 3 of the 4 CPUs; more memory than the host has.
		Quota: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("16Gi")},
		// The bytes of its ConfigMaps and Secrets the host may hold.
		CopyBytes: 256 << 10,
		// The ended pods whose host pods stay.
		FinishedPods:   3,
		KubeletVersion: "v1.36.3", Workers: 2, SyncPeriod: time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	go func() { done <- clustertree.Run(ctx, cfg) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("virtual node: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func webPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: tenantNS, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeName: nodeName,
			Containers: []corev1.Container{{
				Name: "web", Image: "kubenest.io/busybox:1.35", Command: []string{"sleep", "3600"},
				Env: []corev1.EnvVar{
					{Name: "COLOR", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "color"}}},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "creds", MountPath: "/creds"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "creds"}}},
				{Name: "podinfo", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{
					{Path: "labels", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			},
		},
	}
}

func createTenantPod(t *testing.T, ctx context.Context, tc kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	if _, err := tc.CoreV1().Pods(tenantNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitHostPod(t *testing.T, ctx context.Context, hc kubernetes.Interface, name string) *corev1.Pod {
	t.Helper()
	var hp *corev1.Pod
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		hp, err = hc.CoreV1().Pods(hostNS).Get(ctx, name, metav1.GetOptions{})
		return err == nil && hp.DeletionTimestamp == nil, nil
	})
	if err != nil {
		t.Fatalf("host pod %s: %v", name, err)
	}
	return hp
}

// playKubelet marks a host pod Running, as the host's kubelet would.
func playKubelet(t *testing.T, ctx context.Context, hc kubernetes.Interface, name, ip string) {
	t.Helper()
	hp, err := hc.CoreV1().Pods(hostNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	hp.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, HostIP: "172.30.0.11", StartTime: &now,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "web", Ready: true, Image: "kubenest.io/busybox:1.35",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	if _, err := hc.CoreV1().Pods(hostNS).UpdateStatus(ctx, hp, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func waitGone(t *testing.T, ctx context.Context, get func(context.Context) error, what string) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		t.Fatalf("%s still there: %v", what, err)
	}
}

func waitHostService(t *testing.T, ctx context.Context, hc kubernetes.Interface, name string) *corev1.Service {
	t.Helper()
	var s *corev1.Service
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		s, err = hc.CoreV1().Services(hostNS).Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("host Service %s: %v", name, err)
	}
	return s
}

// waitHostEndpoints waits until the host copies of the EndpointSlices of the host Service
// service hold exactly the addresses want, in order.
func waitHostEndpoints(t *testing.T, ctx context.Context, hc kubernetes.Interface, service string, want []string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := hc.DiscoveryV1().EndpointSlices(hostNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err != nil {
			return false, nil
		}
		got = nil
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				got = append(got, e.Addresses...)
			}
		}
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("host endpoints of %s are %v, want %v: %v", service, got, want, err)
	}
}

// waitEvent waits for an event of the given reason on the tenant object name whose message
// contains msg.
func waitEvent(t *testing.T, ctx context.Context, tc kubernetes.Interface, name, reason, msg string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		events, err := tc.CoreV1().Events(tenantNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=" + reason})
		if err != nil {
			return false, nil
		}
		seen = nil
		for _, e := range events.Items {
			if strings.Contains(e.Message, msg) {
				return true, nil
			}
			seen = append(seen, e.Message)
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event on %s saying %q (saw %q): %v", reason, name, msg, seen, err)
	}
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func mustCreate(t *testing.T, create func() error) {
	t.Helper()
	if err := create(); err != nil {
		t.Fatal(err)
	}
}

func tokenReview(token string) *authenticationv1.TokenReview {
	return &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
}

// slicesHold says whether the EndpointSlices of Service name hold exactly want: by slice name,
// "address" or "address:port-name=port", the first endpoint and port.
func slicesHold(ctx context.Context, c kubernetes.Interface, ns, name string, want map[string]string) bool {
	list, err := c.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil || len(list.Items) != len(want) {
		return false
	}
	for _, s := range list.Items {
		if len(s.Endpoints) != 1 || len(s.Ports) != 1 {
			return false
		}
		got := s.Endpoints[0].Addresses[0]
		if !strings.HasSuffix(s.Name, "-kubelet") {
			got += ":" + *s.Ports[0].Name + "=" + fmt.Sprint(*s.Ports[0].Port)
		}
		if want[s.Name] != got {
			return false
		}
	}
	return true
}
