//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// TestHostileTenant attacks from inside a tenant, as an admin who wants out: cluster-admin in
// its own cluster, edit on its own host namespace, able to create VirtualClusters. Each attack
// must fail with a message that says why, and the legitimate use next to it must still work,
// for the attacker and for the tenant it aims at.
func TestHostileTenant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	nsA := createNamespace(t, ctx, "e2e-hostile")
	nsV := createNamespace(t, ctx, "e2e-hostile-victim")
	attacker := newVC(nsA, "attacker", v1alpha1.ExposureNodePort)
	attacker.Spec.Nodes.Shared = true
	victim := newVC(nsV, "victim", v1alpha1.ExposureNodePort)
	victim.Spec.Nodes.Shared = true
	for _, vc := range []*v1alpha1.VirtualCluster{attacker, victim} {
		if err := host.Create(ctx, vc); err != nil {
			t.Fatal(err)
		}
	}
	attacker, victim = waitReady(t, ctx, attacker), waitReady(t, ctx, victim)
	attackerKC := downloadKubeconfig(t, ctx, attacker)
	evil, good := tenantClient(t, attackerKC), tenantClient(t, downloadKubeconfig(t, ctx, victim))
	waitTenantNodeReady(t, ctx, evil, sharedNode)
	waitTenantNodeReady(t, ctx, good, sharedNode)

	// The victim serves something the attacker would like to capture.
	createWebDeployment(t, ctx, good, 1)
	victimPod := waitTenantPodsRunning(t, ctx, good, 1)[0]
	web := createService(t, ctx, good, "web", false)
	victimRange := netip.MustParsePrefix(victim.Status.ServiceCIDR)
	t.Logf("attacker's range %s, victim's %s; victim web at %s, pod %s", attacker.Status.ServiceCIDR, victimRange, web.Spec.ClusterIP, victimPod.Status.PodIP)

	refused := func(t *testing.T, what string, err error, says ...string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", what)
			return
		}
		t.Logf("%s: refused: %v", what, err)
		for _, s := range says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v; want it to say %q", what, err, s)
			}
		}
	}

	t.Run("Service addresses of the host and of other tenants", func(t *testing.T) {
		for _, cidr := range []string{hostServiceCIDR, victimRange.String()} {
			_, err := evil.NetworkingV1().ServiceCIDRs().Create(ctx, &networkingv1.ServiceCIDR{
				ObjectMeta: metav1.ObjectMeta{Name: "steal-" + strings.NewReplacer(".", "-", "/", "-").Replace(cidr)},
				Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{cidr}},
			}, metav1.CreateOptions{})
			refused(t, "a ServiceCIDR "+cidr, err, "KubeNestTenantGuard", "outside this tenant's Service range")
		}
		unused := victimRange.Addr().Next().Next().Next().Next().Next().Next().Next().Next() // .8: not the victim's DNS (.10) nor its first Services
		for _, ip := range []string{"10.96.0.88", unused.String()} {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: "default"}, Spec: corev1.ServiceSpec{
				ClusterIP: ip, Ports: []corev1.ServicePort{{Port: 80}}}}
			_, err := evil.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
			refused(t, "a Service at "+ip, err, ip)
		}
		ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external", Namespace: "default"}, Spec: corev1.ServiceSpec{
			ExternalIPs: []string{"172.30.0.1"}, Ports: []corev1.ServicePort{{Port: 6443}}}}
		_, err := evil.CoreV1().Services("default").Create(ctx, ext, metav1.CreateOptions{})
		refused(t, "a Service with the host apiserver's address as external IP", err, "KubeNestTenantGuard", "spec.externalIPs")

		// A Service of its own range whose endpoints it writes by hand: the host's apiserver
		// Service and the victim's pod. Neither is copied into the host.
		steal := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: "default"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
		steal, err = evil.CoreV1().Services("default").Create(ctx, steal, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = evil.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "steal-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "steal"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.96.0.1"}}, {Addresses: []string{victimPod.Status.PodIP}},
				{Addresses: []string{"172.30.0.1"}}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hostName := clustertree.HostName(attacker.Name, "default", "steal")
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			events, err := evil.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=steal,reason=EndpointsDropped"})
			return err == nil && len(events.Items) > 0, nil
		})
		if err != nil {
			t.Errorf("no EndpointsDropped event on the tenant Service: %v", err)
		}
		hostSvc := &corev1.Service{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: hostName}, hostSvc); err != nil {
			t.Fatalf("the host copy of the attacker's own Service: %v", err)
		}
		if hostSvc.Spec.ClusterIP != steal.Spec.ClusterIP {
			t.Errorf("host copy at %s, the tenant Service at %s", hostSvc.Spec.ClusterIP, steal.Spec.ClusterIP)
		}
		slices2, err := hostCS.DiscoveryV1().EndpointSlices(nsA).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + hostName})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range slices2.Items {
			for _, e := range s.Endpoints {
				t.Errorf("the host copy of the attacker's EndpointSlice points at %v", e.Addresses)
			}
		}
		// Nothing of the host's own range was taken.
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", "external")}, &corev1.Service{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host copy of the refused external Service: %v", err)
		}

		// The victim's Service still reaches its own pod, from its own pod on the shared node.
		script := shellTry + "\ntry " + web.Spec.ClusterIP
		if logs, ok := runTenantPod(t, ctx, good, "reach-web", sharedNode, script); !ok || !strings.Contains(logs, "hi from "+victimPod.Name) {
			t.Errorf("the victim's pod reaching its own Service %s: %q (ok %v)", web.Spec.ClusterIP, logs, ok)
		}
	})

	t.Run("the host's own Services never take an address of a tenant's range", func(t *testing.T) {
		// A host user of the attacker's namespace makes Services while tenants exist: the host
		// picks one of its ServiceCIDRs at random for each, the tenants' ranges among them,
		// unless their addresses are held.
		for i := range 20 {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("host-user-%d", i), Namespace: nsA},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
			if err := host.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = host.Delete(context.Background(), svc) }()
		}
		// Every host Service with an address of a tenant's range is clustertree's, made for
		// that tenant, in its namespace.
		vcs := &v1alpha1.VirtualClusterList{}
		services := &corev1.ServiceList{}
		if err := host.List(ctx, vcs); err != nil {
			t.Fatal(err)
		}
		if err := host.List(ctx, services); err != nil {
			t.Fatal(err)
		}
		for _, svc := range services.Items {
			ip, err := netip.ParseAddr(svc.Spec.ClusterIP)
			if err != nil {
				continue
			}
			for _, vc := range vcs.Items {
				r, err := netip.ParsePrefix(vc.Status.ServiceCIDR)
				if err != nil || !r.Contains(ip) {
					continue
				}
				if svc.Namespace != vc.Namespace || svc.Labels[clustertree.LabelOrigin] != clustertree.OriginClusterTree {
					t.Errorf("host Service %s/%s has %s, an address of tenant %s/%s's range %s", svc.Namespace, svc.Name, ip, vc.Namespace, vc.Name, r)
				}
			}
		}
	})

	t.Run("a Service at its range's claim, to have clustertree free it in the host", func(t *testing.T) {
		// clustertree releases the host's hold on an address before it copies a tenant Service
		// there. The attacker's range is claimed in the host by an IPAddress named after the
		// range's first address: a Service there would free the range for another tenant, if
		// clustertree released whatever IPAddress has the address.
		first := netip.MustParsePrefix(attacker.Status.ServiceCIDR).Addr()
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "claim", Namespace: "default"},
			Spec: corev1.ServiceSpec{ClusterIP: first.String(), Ports: []corev1.ServicePort{{Port: 80}}}}
		if _, err := evil.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Logf("a Service at %s: refused by the tenant's apiserver: %v", first, err)
		} else {
			defer func() {
				_ = evil.CoreV1().Services("default").Delete(context.Background(), "claim", metav1.DeleteOptions{})
			}()
			time.Sleep(5 * time.Second) // clustertree copies a new Service within a second
		}
		claim := &networkingv1.IPAddress{}
		if err := host.Get(ctx, types.NamespacedName{Name: first.String()}, claim); err != nil {
			t.Fatalf("the claim of the attacker's range %s: %v", attacker.Status.ServiceCIDR, err)
		}
		if claim.Labels[naming.LabelVirtualCluster] != attacker.Name || claim.Spec.ParentRef.Name != attacker.Name {
			t.Errorf("the claim %s is now %v, parent %+v", claim.Name, claim.Labels, claim.Spec.ParentRef)
		}
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", "claim")}, &corev1.Service{}); !apierrors.IsNotFound(err) {
			t.Errorf("a host copy of the Service at the claim's address: %v", err)
		}
	})

	t.Run("the shared node's address, pointed at the host's apiserver from inside the tenant", func(t *testing.T) {
		// The attacker rewrites the Service that holds its shared node's address and the
		// kubelet port's EndpointSlice, as its cluster-admin may.
		ns := sharednode.AddressServiceNamespace
		svc, err := evil.CoreV1().Services(ns).Get(ctx, sharednode.AddressService, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "apiserver", Port: 6443, Protocol: corev1.ProtocolTCP})
		if _, err := evil.CoreV1().Services(ns).Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		slice, err := evil.DiscoveryV1().EndpointSlices(ns).Get(ctx, sharednode.AddressSliceKubelet, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		slice.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"172.30.0.1"}}}
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: ptr.To("apiserver"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)})
		if _, err := evil.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Both edits are undone in the tenant, and the host never follows them.
		hostName := clustertree.HostName(attacker.Name, ns, sharednode.AddressService)
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			svc, err := evil.CoreV1().Services(ns).Get(ctx, sharednode.AddressService, metav1.GetOptions{})
			if err != nil || len(svc.Spec.Ports) != 1 {
				return false, nil
			}
			s, err := evil.DiscoveryV1().EndpointSlices(ns).Get(ctx, sharednode.AddressSliceKubelet, metav1.GetOptions{})
			return err == nil && len(s.Ports) == 1 && s.Endpoints[0].Addresses[0] != "172.30.0.1", nil
		})
		if err != nil {
			t.Errorf("the tenant's edits of its shared node's address were not undone: %v", err)
		}
		hostSvc := &corev1.Service{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: hostName}, hostSvc); err != nil {
			t.Fatal(err)
		}
		for _, p := range hostSvc.Spec.Ports {
			if p.Port == 6443 {
				t.Errorf("the host's Service of the address took the tenant's port %v", p)
			}
		}
		hostSlices, err := hostCS.DiscoveryV1().EndpointSlices(nsA).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + hostName})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range hostSlices.Items {
			for _, e := range s.Endpoints {
				if slices.Contains(e.Addresses, "172.30.0.1") {
					t.Errorf("the host's EndpointSlice %s of the address points at the host's apiserver", s.Name)
				}
			}
		}
		// The attacker's own kubelet API (logs) still works through the address.
		if logs, ok := runTenantPod(t, ctx, evil, "after-address-edit", sharedNode, "echo still here"); !ok || !strings.Contains(logs, "still here") {
			t.Errorf("a pod's logs through the shared node's address after the edit: %q (ok %v)", logs, ok)
		}
	})

	t.Run("the victim's shared-node kubelet API, directly and through the attacker's apiserver", func(t *testing.T) {
		// Where the victim's kubelet API is: its node's address (a host Service address, which
		// every host pod reaches, the attacker's among them) and, behind it, the operator's port
		// (an attacker may scan the operator pod's ports).
		node, err := good.CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodeIP := internalIP(node)
		slice := &discoveryv1.EndpointSlice{}
		hostSlice := clustertree.AddressSliceName(clustertree.HostName(victim.Name, sharednode.AddressServiceNamespace, sharednode.AddressService), sharednode.SliceSuffixKubelet)
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsV, Name: hostSlice}, slice); err != nil {
			t.Fatal(err)
		}
		if nodeIP == "" || len(slice.Endpoints) == 0 || len(slice.Ports) == 0 {
			t.Fatalf("the victim's shared node has no address (%v) or its host EndpointSlice no endpoint (%v)", node.Status.Addresses, slice.Endpoints)
		}
		direct := "https://" + net.JoinHostPort(slice.Endpoints[0].Addresses[0], fmt.Sprint(*slice.Ports[0].Port))
		paths := []string{"/pods", "/runningpods/", "/metrics",
			fmt.Sprintf("/containerLogs/default/%s/%s", victimPod.Name, victimPod.Spec.Containers[0].Name)}
		leaks := func(body string) bool {
			return strings.Contains(body, victimPod.Name) || strings.Contains(body, "kubelet_running_pods")
		}

		// Directly, from the host's pod network: with no credential, with the attacker's admin
		// certificate (of the attacker's CA), and with a token of the attacker's ServiceAccount.
		attackerCfg := tenantConfig(t, attackerKC)
		adminCert, err := tls.X509KeyPair(attackerCfg.CertData, attackerCfg.KeyData)
		if err != nil {
			t.Fatalf("the attacker's kubeconfig has no client certificate: %v", err)
		}
		tr, err := evil.CoreV1().ServiceAccounts("default").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, attempt := range []struct {
			who   string
			cert  *tls.Certificate
			token string
		}{{who: "no credential"}, {who: "the attacker's admin certificate", cert: &adminCert}, {who: "the attacker's ServiceAccount token", token: tr.Status.Token}} {
			tlsConfig := &tls.Config{InsecureSkipVerify: true}
			if attempt.cert != nil {
				// Sent whatever CAs the server asks for (Go's client would send none).
				tlsConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return attempt.cert, nil }
			}
			hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
			for _, path := range paths {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, direct+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				if attempt.token != "" {
					req.Header.Set("Authorization", "Bearer "+attempt.token)
				}
				resp, err := hc.Do(req)
				if err != nil && attempt.cert == nil {
					t.Errorf("%s%s with %s: %v; want the kubelet API's refusal (an unreachable API proves nothing)", direct, path, attempt.who, err)
					continue
				}
				if err != nil {
					t.Logf("%s%s with %s: refused: %v", direct, path, attempt.who, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode < 400 || leaks(string(body)) {
					t.Errorf("%s%s with %s: %d %.300q", direct, path, attempt.who, resp.StatusCode, body)
				} else {
					t.Logf("%s%s with %s: refused, %d", direct, path, attempt.who, resp.StatusCode)
				}
			}
		}

		// Through the attacker's own apiserver as a deputy: a Node of the attacker's cluster at
		// the victim's node address, read through the node proxy, which dials it with the
		// attacker apiserver's kubelet-client certificate.
		deputy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "deputy"}, Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: "e2e.kubenest.io/deputy", Effect: corev1.TaintEffectNoExecute}}}}
		deputy, err = evil.CoreV1().Nodes().Create(ctx, deputy, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = evil.CoreV1().Nodes().Delete(context.Background(), deputy.Name, metav1.DeleteOptions{}) }()
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error { // the node controllers write it too
			deputy, err := evil.CoreV1().Nodes().Get(ctx, deputy.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			deputy.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}
			deputy.Status.DaemonEndpoints.KubeletEndpoint.Port = node.Status.DaemonEndpoints.KubeletEndpoint.Port
			_, err = evil.CoreV1().Nodes().UpdateStatus(ctx, deputy, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range paths {
			body, err := evil.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/deputy/proxy" + path).DoRaw(ctx)
			switch {
			case err == nil || leaks(string(body)):
				t.Errorf("the attacker's node proxy to the victim's kubelet API, %s: %v %.300q", path, err, body)
			case !strings.Contains(string(body), "certificate") && !strings.Contains(string(body), "Unauthorized"):
				// Refused for another reason (the address unreachable, say): the attack proves nothing.
				t.Errorf("the attacker's node proxy to the victim's kubelet API, %s: %v %.300q; want the kubelet API's refusal of its certificate", path, err, body)
			default:
				t.Logf("the attacker's node proxy to the victim's kubelet API, %s: refused: %v %.200s", path, err, body)
			}
		}

		// Each tenant still reads its own node's kubelet API through its apiserver, and only its own.
		ownPods := func(c *kubernetes.Clientset) string {
			body, err := c.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + sharedNode + "/proxy/pods").DoRaw(ctx)
			if err != nil {
				t.Errorf("a tenant's own node proxy /pods: %v", err)
			}
			return string(body)
		}
		if body := ownPods(good); !strings.Contains(body, victimPod.Name) {
			t.Errorf("the victim's own node proxy /pods does not list its pod %s: %.300q", victimPod.Name, body)
		}
		if body := ownPods(evil); strings.Contains(body, victimPod.Name) {
			t.Errorf("the attacker's own node proxy /pods lists the victim's pod %s", victimPod.Name)
		}
	})

	t.Run("an aggregated API whose endpoints are the victim's and the host's apiservers", func(t *testing.T) {
		// The attacker's apiserver dials an aggregated API (and a webhook, or a CRD conversion
		// webhook) at the endpoints of its Service, which the attacker writes: the addresses
		// its host pods reach anyway. What it brings there is its own front-proxy client
		// certificate, with which it asserts any user of the aggregated API's choosing (its
		// availability check asserts system:masters). The servers there must refuse it.
		aggregator := aggregatorclient.NewForConfigOrDie(tenantConfig(t, attackerKC))
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(controlplane.Namespace(victim)), client.MatchingLabels{naming.LabelComponent: naming.ComponentControlPlane}); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) == 0 || pods.Items[0].Status.PodIP == "" {
			t.Fatalf("the victim's control-plane pod has no address: %d pods", len(pods.Items))
		}
		for _, target := range []struct {
			name, ip string
			port     int32
		}{
			{"victim", pods.Items[0].Status.PodIP, controlplane.APIServerPort},
			{"host", "172.30.0.1", 6443},
		} {
			group := target.name + ".deputy.e2e.kubenest.io"
			addr := net.JoinHostPort(target.ip, fmt.Sprint(target.port))
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "deputy-" + target.name, Namespace: "default"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}
			if _, err := evil.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := evil.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Name: svc.Name, Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{target.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
				Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(target.port)}},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			api, err := aggregator.ApiregistrationV1().APIServices().Create(ctx, &apiregistrationv1.APIService{
				ObjectMeta: metav1.ObjectMeta{Name: "v1." + group},
				Spec: apiregistrationv1.APIServiceSpec{Group: group, Version: "v1", InsecureSkipTLSVerify: true,
					GroupPriorityMinimum: 1000, VersionPriority: 15,
					Service: &apiregistrationv1.ServiceReference{Namespace: "default", Name: svc.Name, Port: ptr.To[int32](443)}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { // an unavailable group fails the attacker's discovery in later subtests
				_ = aggregator.ApiregistrationV1().APIServices().Delete(context.Background(), api.Name, metav1.DeleteOptions{})
			})
			// The aggregator's availability check reports what the server there answered.
			var available *apiregistrationv1.APIServiceCondition
			err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				got, err := aggregator.ApiregistrationV1().APIServices().Get(ctx, api.Name, metav1.GetOptions{})
				if err != nil {
					return false, nil
				}
				for i, c := range got.Status.Conditions {
					if c.Type == apiregistrationv1.Available {
						available = &got.Status.Conditions[i]
					}
				}
				return available != nil && (available.Status == apiregistrationv1.ConditionTrue || strings.Contains(available.Message, addr)), nil
			})
			switch {
			case err != nil:
				t.Errorf("the attacker's APIService at the %s apiserver (%s): %v; Available %+v; want the aggregator to report that server's refusal", target.name, addr, err, available)
			case available.Status == apiregistrationv1.ConditionTrue || !strings.Contains(available.Message, "bad status") || !strings.Contains(available.Message, "401"):
				// Served, or refused for another reason (unreachable, say): the attack proves nothing or worse.
				t.Errorf("the attacker's APIService at the %s apiserver (%s): Available %s, %q; want the server's 401", target.name, addr, available.Status, available.Message)
			default:
				t.Logf("the attacker's APIService at the %s apiserver: refused: %s", target.name, available.Message)
			}
			if _, err := evil.RESTClient().Get().AbsPath("/apis", group, "v1").DoRaw(ctx); err == nil {
				t.Errorf("the attacker read /apis/%s/v1 through the %s apiserver", group, target.name)
			}
		}
	})

	t.Run("host pod metadata is the tenant's only under KubeNest's prefix", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "meta", Namespace: "default", Labels: map[string]string{"app": "meta"},
				Annotations: map[string]string{
					"k8s.v1.cni.cncf.io/networks":   "host-network",
					"cni.projectcalico.org/ipAddrs": `["10.244.1.250"]`,
					"kubenest.io/component":         "etcd",
				}},
			Spec: corev1.PodSpec{NodeName: sharedNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}
		if _, err := evil.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		hostPod := &corev1.Pod{}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			return host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", "meta")}, hostPod) == nil &&
				hostPod.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("the pod does not run on the shared node: %v", err)
		}
		for k := range hostPod.Annotations {
			if !strings.HasPrefix(k, "kubenest.io/") {
				t.Errorf("the host pod carries the tenant's annotation %s", k)
			}
		}
		for k := range hostPod.Labels {
			if !strings.Contains(k, "kubenest.io/") {
				t.Errorf("the host pod carries the tenant's label %s as is", k)
			}
		}
		if hostPod.Labels["tenant.kubenest.io/app"] != "meta" || hostPod.Labels[naming.LabelComponent] != "" {
			t.Errorf("host pod labels %v: want app under tenant.kubenest.io/, and no component label", hostPod.Labels)
		}
		_ = evil.CoreV1().Pods("default").Delete(ctx, "meta", metav1.DeleteOptions{})
	})

	t.Run("ephemeral containers and events of the shared node stay within the tenant", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "debug-me", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: sharedNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}
		if _, err := evil.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = evil.CoreV1().Pods("default").Delete(ctx, "debug-me", metav1.DeleteOptions{}) }()
		hostKey := types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", "debug-me")}
		hostPod := &corev1.Pod{}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			return host.Get(ctx, hostKey, hostPod) == nil && hostPod.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("the pod does not run on the shared node: %v", err)
		}
		// kubectl debug, with what would give the container the host: refused by the tenant.
		// As kubectl debug does, again on a conflict (the shared node writes the pod's status).
		debug := func(name string, sc *corev1.SecurityContext) error {
			return retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := evil.CoreV1().Pods("default").Get(ctx, "debug-me", metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
					Name: name, Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}, SecurityContext: sc}})
				_, err = evil.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, "debug-me", p, metav1.UpdateOptions{})
				return err
			})
		}
		refused(t, "a privileged ephemeral container on the shared node", debug("root", &corev1.SecurityContext{Privileged: ptr.To(true)}),
			"KubeNestTenantGuard", "privileged")
		refused(t, "an ephemeral container adding SYS_ADMIN on the shared node", debug("admin",
			&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}), "KubeNestTenantGuard", "SYS_ADMIN")
		// The legitimate use: a plain one reaches the host pod, as plain.
		if err := debug("plain", nil); err != nil {
			t.Fatalf("a plain ephemeral container: %v", err)
		}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return host.Get(ctx, hostKey, hostPod) == nil && len(hostPod.Spec.EphemeralContainers) > 0, nil
		})
		if err != nil {
			t.Fatalf("the plain ephemeral container never reached the host pod: %v", err)
		}
		for _, ec := range hostPod.Spec.EphemeralContainers {
			if ec.Name != "plain" || ec.SecurityContext != nil {
				t.Errorf("the host pod has ephemeral container %s with security context %+v; want only the plain one", ec.Name, ec.SecurityContext)
			}
		}

		// The host kubelet's events reach the tenant for its own pod only, with the tenant's
		// names: none names the victim's pods or either host namespace.
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			l, err := evil.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=debug-me,reason=Started"})
			return err == nil && len(l.Items) > 0, nil
		})
		if err != nil {
			t.Errorf("no Started event of debug-me in the tenant: %v", err)
		}
		events, err := evil.CoreV1().Events("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events.Items {
			if strings.Contains(ev.Message, victimPod.Name) || strings.Contains(ev.Message, nsV) || strings.Contains(ev.Message, nsA+"/") ||
				strings.Contains(ev.Message, hostKey.Name) {
				t.Errorf("an event in the attacker's tenant names the host or the victim: %s %s: %q", ev.InvolvedObject.Name, ev.Reason, ev.Message)
			}
		}
	})

	t.Run("more of the shared nodes than the platform gives each tenant", func(t *testing.T) {
		// The platform's share per tenant (chart value operator.sharedNodeQuota) is the shared
		// node's allocatable. A pod bound there straight, past the tenant's scheduler, asking
		// for more, is refused as a full kubelet refuses one; the host never sees it.
		node, err := evil.CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		capacity, allocatable := node.Status.Capacity.Cpu(), node.Status.Allocatable.Cpu()
		if allocatable.Cmp(*capacity) >= 0 {
			t.Fatalf("the shared node offers all of the host's %s CPUs (allocatable %s): no share in force", capacity, allocatable)
		}
		ask := allocatable.DeepCopy()
		ask.Add(resource.MustParse("500m"))
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "greedy", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: sharedNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: ask}}}}},
		}
		if _, err := evil.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = evil.CoreV1().Pods("default").Delete(ctx, pod.Name, metav1.DeleteOptions{}) }()
		got := &corev1.Pod{}
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			got, err = evil.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodFailed, nil
		})
		if err != nil || got.Status.Reason != "OutOfcpu" {
			t.Fatalf("a pod asking for %s CPUs of a shared node with %s allocatable (%s capacity): phase %s, reason %q (%v); want Failed, OutOfcpu",
				ask.String(), allocatable, capacity, got.Status.Phase, got.Status.Reason, err)
		}
		t.Logf("refused: %s", got.Status.Message)
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", pod.Name)}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("the host has a pod for the refused one: %v", err)
		}
	})

	t.Run("ConfigMaps by the dozen megabytes, copied into the host's etcd by its pods on the shared node", func(t *testing.T) {
		// Each ConfigMap a pod on the shared node mounts is copied into the host. 40 of about
		// 0.9 MB each, mounted by one pod, would be 36 MB in the host's etcd; 110 such pods
		// would fill its quota, and every write of the host would be refused. The platform's
		// budget per tenant (chart value operator.sharedNodeCopyBytes, 32Mi) refuses the pod.
		blob := strings.Repeat("k", 900_000)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hoarder", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: sharedNode, TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}},
		}
		for i := range 40 {
			name := fmt.Sprintf("hoard-%02d", i)
			if _, err := evil.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"blob": blob}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}})
		}
		defer func() {
			_ = evil.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{})
			for i := range 40 {
				_ = evil.CoreV1().ConfigMaps("default").Delete(context.Background(), fmt.Sprintf("hoard-%02d", i), metav1.DeleteOptions{})
			}
		}()
		if _, err := evil.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := &corev1.Pod{}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			got, err = evil.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodFailed, nil
		})
		if err != nil || got.Status.Reason != clustertree.ReasonCopyBudget {
			t.Fatalf("a pod mounting 36 MB of ConfigMaps: phase %s, reason %q (%v); want Failed, %s", got.Status.Phase, got.Status.Reason, err, clustertree.ReasonCopyBudget)
		}
		t.Logf("refused: %s", got.Status.Message)
		if err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", pod.Name)}, &corev1.Pod{}); !apierrors.IsNotFound(err) {
			t.Errorf("the host has a pod for the refused one: %v", err)
		}
		copies := &corev1.ConfigMapList{}
		if err := host.List(ctx, copies, client.InNamespace(nsA), client.MatchingLabels{clustertree.LabelOrigin: clustertree.OriginClusterTree}); err != nil {
			t.Fatal(err)
		}
		held := 0
		for _, cm := range copies.Items {
			for k, v := range cm.Data {
				held += len(k) + len(v)
			}
		}
		t.Logf("the host holds %d bytes of the attacker's ConfigMaps (%d copies)", held, len(copies.Items))
		if held > 32<<20 {
			t.Errorf("the host holds %d bytes of the attacker's ConfigMaps, past the 32Mi budget", held)
		}
	})

	t.Run("ended pods by the hundred, each a host pod with its logs on a host node", func(t *testing.T) {
		// Every ended pod of the tenant's on the shared node is a host pod, a dead container and
		// its logs on a host node's disk; the tenant's pod garbage collector starts only past
		// 12,500. A Job of 105 pods that each print and end: the host keeps the containers of
		// the tenant's 100 newest ended pods (chart value operator.sharedNodeFinishedPods), and
		// the tenant keeps all 105 pods, Succeeded.
		const completions, kept = 105, 100
		job := &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Name: "litter", Namespace: "default"},
			Spec: batchv1.JobSpec{Completions: ptr.To[int32](completions), Parallelism: ptr.To[int32](15), BackoffLimit: ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever, NodeSelector: map[string]string{corev1.LabelHostname: sharedNode},
					Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
						Command: []string{"sh", "-c", "echo litter from $HOSTNAME"}}}}}},
		}
		if _, err := evil.BatchV1().Jobs("default").Create(ctx, job, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = evil.BatchV1().Jobs("default").Delete(context.Background(), job.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)})
		}()
		err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
			j, err := evil.BatchV1().Jobs("default").Get(ctx, job.Name, metav1.GetOptions{})
			return err == nil && j.Status.Succeeded == completions, nil
		})
		if err != nil {
			t.Fatalf("the Job's %d pods did not all succeed: %v", completions, err)
		}
		hostEnded := func() int {
			pods := &corev1.PodList{}
			if err := host.List(ctx, pods, client.InNamespace(nsA), client.MatchingLabels(clustertree.HostSelector(attacker.Name))); err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
					n++
				}
			}
			return n
		}
		eventually(t, "the host keeps the containers of the tenant's newest ended pods only", time.Minute, func() error {
			if n := hostEnded(); n > kept {
				return fmt.Errorf("the host holds %d ended pods of the tenant's", n)
			}
			return nil
		})
		pods, err := evil.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "job-name=" + job.Name})
		if err != nil {
			t.Fatal(err)
		}
		succeeded := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.Status.Phase != corev1.PodSucceeded })
		if len(succeeded) != completions {
			t.Errorf("the tenant has %d Succeeded pods of the Job, want all %d", len(succeeded), completions)
		}
		t.Logf("the host holds %d ended pods of the tenant's; the tenant has %d, Succeeded", hostEnded(), len(succeeded))
		// The host removed the oldest: none it kept ended before one it removed. The logs of
		// those it kept are there; of the others, asking says why they are not.
		var gone, there []corev1.Pod
		for _, p := range succeeded {
			err := host.Get(ctx, types.NamespacedName{Namespace: nsA, Name: clustertree.HostName(attacker.Name, "default", p.Name)}, &corev1.Pod{})
			if apierrors.IsNotFound(err) {
				gone = append(gone, p)
			} else {
				there = append(there, p)
			}
		}
		if len(gone) < completions-kept {
			t.Fatalf("%d ended pods lost their host pods, want %d", len(gone), completions-kept)
		}
		lastGone := slices.MaxFunc(gone, func(a, b corev1.Pod) int { return finishedAt(a).Compare(finishedAt(b)) })
		firstKept := slices.MinFunc(there, func(a, b corev1.Pod) int { return finishedAt(a).Compare(finishedAt(b)) })
		if finishedAt(firstKept).Before(finishedAt(lastGone)) {
			t.Errorf("the host kept %s (ended %s) and removed %s (ended %s): not the oldest first", firstKept.Name, finishedAt(firstKept), lastGone.Name, finishedAt(lastGone))
		}
		if out, err := evil.CoreV1().Pods("default").GetLogs(firstKept.Name, &corev1.PodLogOptions{}).DoRaw(ctx); err != nil || !strings.Contains(string(out), "litter from") {
			t.Errorf("logs of %s, whose host pod is kept: %q, %v", firstKept.Name, out, err)
		}
		logs, err := evil.CoreV1().Pods("default").GetLogs(lastGone.Name, &corev1.PodLogOptions{}).Stream(ctx) // as kubectl logs: the server's message
		if err == nil {
			logs.Close()
		}
		refused(t, "logs of "+lastGone.Name+", whose host pod was removed", err, "removed from the shared node", "100 most recently ended pods")
	})

	t.Run("a cert-manager issuer the platform does not allow", func(t *testing.T) {
		minted := newVC(nsA, "minted", v1alpha1.ExposureClusterIP)
		minted.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "platform-root-issuer", Kind: "ClusterIssuer"}}
		if err := host.Create(ctx, minted); err != nil {
			t.Fatal(err)
		}
		got := waitVC(t, ctx, minted, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionCertificatesReady)
			return c != nil && c.Reason == "IssuerNotAllowed"
		})
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCertificatesReady)
		if !strings.Contains(c.Message, "spec.pki.issuerRef") {
			t.Errorf("CertificatesReady %q does not name the field", c.Message)
		}
		for _, ns := range []string{controlPlaneNamespace(t, ctx, minted), nsA} {
			if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: naming.For(minted.Name).CACertificate()}, &corev1.Secret{}); !apierrors.IsNotFound(err) {
				t.Errorf("something was issued for the refused issuer in %s: %v", ns, err)
			}
		}
		deleteAndCheckGone(t, ctx, minted)

		// An issuer the platform allows (make up's chart values), and an extra SAN that would
		// make the tenant's CA, under the platform's root, one for every name in .com.
		widened := newVC(nsA, "widened", v1alpha1.ExposureClusterIP)
		widened.Spec.PKI = &v1alpha1.PKISpec{IssuerRef: v1alpha1.IssuerReference{Name: "e2e-platform-ca", Kind: "ClusterIssuer"}}
		widened.Spec.ControlPlane.Exposure.ExtraSANs = []string{"10.9.8.7", "com"}
		if err := host.Create(ctx, widened); err != nil {
			t.Fatal(err)
		}
		got = waitVC(t, ctx, widened, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionCertificatesReady)
			return c != nil && c.Reason == "ExtraSANNotAllowed"
		})
		if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionCertificatesReady); !strings.Contains(c.Message, "spec.controlPlane.exposure.extraSANs: com is not within") {
			t.Errorf("CertificatesReady %q does not name the field and the name", c.Message)
		}
		if err := host.Get(ctx, types.NamespacedName{Namespace: controlPlaneNamespace(t, ctx, widened), Name: naming.For(widened.Name).CACertificate()}, &cmapi.Certificate{}); !apierrors.IsNotFound(err) {
			t.Errorf("a Certificate was asked of the platform's issuer for .com: %v", err)
		}
		deleteAndCheckGone(t, ctx, widened)
	})

	t.Run("control planes past the namespace's ResourceQuota, in the namespace it does not count", func(t *testing.T) {
		// The platform bounds a namespace to 2 pods. Its first tenant's etcd and control plane
		// take them, in the control-plane namespace; a second tenant's pods there are refused
		// by the quota's copy, and the VirtualCluster says so.
		qns := createNamespace(t, ctx, "e2e-hostile-quota")
		if err := host.Create(ctx, &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: qns},
			Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}); err != nil {
			t.Fatal(err)
		}
		first, second := newVC(qns, "first", v1alpha1.ExposureClusterIP), newVC(qns, "second", v1alpha1.ExposureClusterIP)
		for _, vc := range []*v1alpha1.VirtualCluster{first, second} {
			vc.Spec.Etcd.Storage = v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}
		}
		if err := host.Create(ctx, first); err != nil {
			t.Fatal(err)
		}
		waitReady(t, ctx, first)
		if err := host.Create(ctx, second); err != nil {
			t.Fatal(err)
		}
		got := waitVC(t, ctx, second, 2*time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionEtcdReady)
			return c != nil && strings.Contains(c.Message, "used up pods of its ResourceQuota team")
		})
		t.Logf("the second tenant waits: %s", meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEtcdReady).Message)
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(naming.ControlPlaneNamespace(qns))); err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) > 2 {
			t.Errorf("%d pods in the control-plane namespace, past the namespace's quota of 2", len(pods.Items))
		}
		deleteAndCheckGone(t, ctx, second)
		deleteAndCheckGone(t, ctx, first)
	})

	admin := namespaceEditor(t, ctx, nsA)
	t.Run("a host user of the tenant's namespace cannot grant itself privileged pods, nor more of the shared nodes", func(t *testing.T) {
		got := &v1alpha1.VirtualCluster{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(attacker), got); err != nil {
			t.Fatal(err)
		}
		got.Spec.Nodes.PodSecurity = v1alpha1.NodePodSecurityPrivileged
		refused(t, "the namespace's editor setting spec.nodes.podSecurity: Privileged", admin.Update(ctx, got), "grant-privileged")
		got.Spec.Nodes.PodSecurity = ""
		got.Spec.ControlPlane.APIServer.ExtraArgs = map[string]string{"kubenest-node-pod-security": "privileged"}
		refused(t, "the namespace's editor setting the guard's flag through extraArgs", admin.Update(ctx, got), "is set by the operator and cannot be overridden")
		got.Spec.ControlPlane.APIServer.ExtraArgs = nil
		got.Spec.Nodes.SharedQuota = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}
		refused(t, "the namespace's editor setting spec.nodes.sharedQuota", admin.Update(ctx, got), "grant-shared-quota")
	})

	t.Run("the tenant's keys, control-plane pods and data, with edit on its host namespace", func(t *testing.T) {
		// The namespace's editor wants what makes it the tenant's master and the operator's:
		// the tenant's keys (its CAs, the ServiceAccount signing key, etcd's CA), a shell in
		// its etcd or apiserver pods, or its etcd's volume. With edit, it would read, write and
		// exec into all of them in its own namespace. They are in the control-plane namespace,
		// which only the operator makes and where no right in the tenant's namespace reaches;
		// what stays in the tenant's namespace is its admin kubeconfig, its own to download.
		names := naming.For(attacker.Name)
		cpNS := naming.ControlPlaneNamespace(nsA)
		etcd0 := names.EtcdStatefulSet() + "-0"
		got := &v1alpha1.VirtualCluster{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(attacker), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ControlPlaneNamespace != cpNS {
			t.Fatalf("the attacker's status.controlPlaneNamespace is %q, want %q", got.Status.ControlPlaneNamespace, cpNS)
		}
		forbidden := func(t *testing.T, what string, err error) {
			t.Helper()
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v; want Forbidden", what, err)
				return
			}
			t.Logf("%s: refused: %v", what, err)
		}

		// Its own namespace, which it reads whole: no key of the tenant's there.
		secrets := &corev1.SecretList{}
		if err := admin.List(ctx, secrets, client.InNamespace(nsA)); err != nil {
			t.Fatalf("the namespace's editor listing its Secrets (edit allows it): %v", err)
		}
		for _, sec := range secrets.Items {
			if sec.Labels[clustertree.LabelOrigin] == clustertree.OriginClusterTree {
				continue // a copy of one of the tenant's own Secrets, for its pods on the shared node
			}
			if sec.Labels[naming.LabelVirtualCluster] != "" && sec.Name != names.KubeconfigSecret() {
				t.Errorf("Secret %s of tenant %s is in the tenant's namespace %s", sec.Name, sec.Labels[naming.LabelVirtualCluster], nsA)
			}
			for k, v := range sec.Data {
				if strings.HasSuffix(k, ".key") || slices.Contains([]string{controlplane.KeySAKey, controlplane.KeyCAKey, controlplane.KeyEtcdCAKey}, k) ||
					strings.Contains(string(v), "PRIVATE KEY-----") {
					t.Errorf("Secret %s/%s, which the namespace's editor reads, holds key material under %s", nsA, sec.Name, k)
				}
			}
		}

		// The control-plane namespace: nothing to read, list or run there.
		for _, name := range []string{names.CASecret(), names.ControlPlaneCertsSecret()} {
			forbidden(t, "the namespace's editor reading Secret "+cpNS+"/"+name, admin.Get(ctx, types.NamespacedName{Namespace: cpNS, Name: name}, &corev1.Secret{}))
		}
		forbidden(t, "the namespace's editor listing the pods of "+cpNS, admin.List(ctx, &corev1.PodList{}, client.InNamespace(cpNS)))
		for _, attr := range []authorizationv1.ResourceAttributes{
			{Verb: "create", Resource: "pods", Subresource: "exec", Name: etcd0},
			{Verb: "create", Resource: "pods", Subresource: "portforward", Name: etcd0},
			{Verb: "create", Resource: "pods"},
			{Verb: "update", Resource: "persistentvolumeclaims", Name: "data-" + etcd0},
		} {
			for ns, allowed := range map[string]bool{cpNS: false, nsA: true} {
				attr.Namespace = ns
				review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}
				if err := admin.Create(ctx, review); err != nil {
					t.Fatalf("a SelfSubjectAccessReview: %v", err)
				}
				what := fmt.Sprintf("%s %s/%s %s in %s", attr.Verb, attr.Resource, attr.Subresource, attr.Name, ns)
				switch {
				case review.Status.Allowed && !allowed:
					t.Errorf("the namespace's editor may %s", what)
				case !review.Status.Allowed && allowed:
					// edit grants it in its own namespace: a denial there would make the one above prove nothing.
					t.Errorf("the namespace's editor may not %s (edit allows it): %+v", what, review.Status)
				case !allowed:
					t.Logf("the namespace's editor may not %s", what)
				}
			}
		}

		// Its etcd and control plane run there, not in the tenant's namespace.
		for _, c := range []struct {
			component string
			list      client.ObjectList
		}{
			{naming.ComponentEtcd, &corev1.PodList{}}, {naming.ComponentEtcd, &corev1.PersistentVolumeClaimList{}},
			{naming.ComponentEtcd, &appsv1.StatefulSetList{}}, {naming.ComponentControlPlane, &corev1.PodList{}},
			{naming.ComponentControlPlane, &appsv1.DeploymentList{}},
		} {
			for ns, want := range map[string]bool{nsA: false, cpNS: true} {
				if err := host.List(ctx, c.list, client.InNamespace(ns), client.MatchingLabels(names.Labels(c.component))); err != nil {
					t.Fatal(err)
				}
				if n := meta.LenList(c.list); (n > 0) != want {
					t.Errorf("%d %T of the attacker's %s in %s", n, c.list, c.component, ns)
				}
			}
		}

		// Nor can it have the operator put them back in its namespace: the status is the
		// operator's to write, and the VirtualCluster's own update does not carry it.
		moved := got.DeepCopy()
		moved.Status.ControlPlaneNamespace = nsA
		forbidden(t, "the namespace's editor updating the status to put the control plane in "+nsA, admin.Status().Update(ctx, moved))
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"status":{"controlPlaneNamespace":%q}}`, nsA)))
		forbidden(t, "the namespace's editor patching the status to put the control plane in "+nsA,
			admin.Status().Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: attacker.Name}}, patch))
		err := admin.Patch(ctx, &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: attacker.Name}}, patch)
		t.Logf("the namespace's editor patching status.controlPlaneNamespace through the VirtualCluster itself: %v", err)
		if err := host.Get(ctx, client.ObjectKeyFromObject(attacker), got); err != nil {
			t.Fatal(err)
		}
		if got.Status.ControlPlaneNamespace != cpNS {
			t.Errorf("after the editor's patches, status.controlPlaneNamespace is %q, want %q", got.Status.ControlPlaneNamespace, cpNS)
		}

		// Nor make the control-plane namespace of a namespace before the operator does, to keep
		// rights in it and read the keys of the tenants put there: not even the host's
		// cluster-admin may.
		squat := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: naming.ControlPlaneNamespace("e2e-hostile-squat")}}
		err = host.Create(ctx, squat)
		if err == nil {
			_ = host.Delete(context.Background(), squat)
		}
		refused(t, "the host's cluster-admin creating namespace "+squat.Name, err, "only the KubeNest operator creates them")
	})

	t.Run("a flood of VirtualClusters that never start, holding the operator's start turns", func(t *testing.T) {
		// Each asks for more CPU than any node has: its etcd stays Pending, so it never becomes
		// Ready and holds its start turn until the operator gives up on it (3 minutes). The
		// local operator starts 4 tenants at a time; the attacker's namespace may hold 3.
		var flood []*v1alpha1.VirtualCluster
		for i := range 6 {
			vc := newVC(nsA, fmt.Sprintf("flood-%d", i), v1alpha1.ExposureClusterIP)
			vc.Spec.Etcd.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64")}}
			if err := admin.Create(ctx, vc); err != nil {
				t.Fatal(err)
			}
			flood = append(flood, vc)
		}
		defer func() {
			for _, vc := range flood {
				deleteAndCheckGone(t, ctx, vc)
			}
		}()
		queued := func() (n int) {
			for _, vc := range flood {
				got := &v1alpha1.VirtualCluster{}
				if host.Get(ctx, client.ObjectKeyFromObject(vc), got) == nil {
					if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAPIServerReady); c != nil && c.Reason == "Queued" {
						n++
					}
				}
			}
			return n
		}
		if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return queued() >= 3, nil
		}); err != nil {
			t.Fatalf("the attacker's namespace was not held to its share of the start turns: %d of its 6 tenants queued", queued())
		}

		// Another namespace's new tenant starts at once, as if nobody were flooding.
		late := newVC(nsV, "latecomer", v1alpha1.ExposureClusterIP)
		if err := host.Create(ctx, late); err != nil {
			t.Fatal(err)
		}
		defer deleteAndCheckGone(t, ctx, late)
		start := time.Now()
		waitVC(t, ctx, late, 90*time.Second, func(v *v1alpha1.VirtualCluster) bool {
			return meta.IsStatusConditionTrue(v.Status.Conditions, v1alpha1.ConditionReady)
		})
		t.Logf("the victim namespace's new tenant Ready %s after its creation, %d of the attacker's tenants queued", time.Since(start).Round(100*time.Millisecond), queued())
	})

	t.Run("the operator's metrics, which name every tenant, and the victim apiserver's own", func(t *testing.T) {
		// The attacker's pods on the shared node are in the host's pod network, where the
		// operator's metrics endpoint listens. Plain HTTP gets nothing: it is HTTPS.
		base := operatorMetricsURL(t, ctx)
		hostPort := strings.TrimPrefix(base, "https://")
		ip, port, _ := strings.Cut(hostPort, ":")
		script := fmt.Sprintf(`printf 'GET /metrics HTTP/1.0\r\n\r\n' | nc -w 10 %s %s`, ip, port)
		logs, _ := runTenantPod(t, ctx, evil, "scrape-operator", sharedNode, script)
		if !strings.Contains(logs, "Client sent an HTTP request to an HTTPS server") || strings.Contains(logs, "kubenest_") {
			t.Errorf("plain HTTP from the attacker's pod to the operator's metrics answered %q; want only the refusal of plain HTTP", logs)
		}
		// Over HTTPS, with no token, or with a token of its own namespace's ServiceAccount
		// (which an editor of the namespace can mint): refused, naming no tenant.
		tr, err := hostCS.CoreV1().ServiceAccounts(nsA).CreateToken(ctx, "tenant-admin", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{"/metrics", "/tenants/" + nsV + "/" + victim.Name + "/metrics", "/tenants/" + nsA + "/" + attacker.Name + "/metrics"} {
			for who, token := range map[string]string{"no token": "", "the namespace's ServiceAccount": tr.Status.Token} {
				code, body := scrape(ctx, base+path, token)
				if code == http.StatusOK || strings.Contains(body, nsV) || strings.Contains(body, "apiserver_") {
					t.Errorf("%s with %s: %d %.200q", path, who, code, body)
				} else {
					t.Logf("%s with %s: refused, %d", path, who, code)
				}
			}
		}
	})

	t.Run("snapshots: of another namespace's tenant, restored into another namespace, or taken by a job of its own", func(t *testing.T) {
		// The victim's snapshot, taken by its own namespace.
		theirs := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "victim-data", Namespace: nsV},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: victim.Name}}
		if err := host.Create(ctx, theirs); err != nil {
			t.Fatal(err)
		}
		waitSnapshot(t, ctx, theirs, v1alpha1.SnapshotSucceeded)

		// A snapshot in the attacker's namespace names the victim's tenant: names are of the
		// snapshot's own namespace.
		steal := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "steal", Namespace: nsA},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: victim.Name}}
		if err := admin.Create(ctx, steal); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.VirtualClusterSnapshot{}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if admin.Get(ctx, client.ObjectKeyFromObject(steal), got) != nil {
				return false, nil
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSnapshotComplete)
			return c != nil && strings.Contains(c.Message, "there is no VirtualCluster "+victim.Name+" in namespace "+nsA), nil
		})
		if err != nil || got.Status.Phase != v1alpha1.SnapshotPending {
			t.Errorf("a snapshot of another namespace's tenant: %v, status %+v", err, got.Status)
		}
		for _, ns := range []string{naming.ControlPlaneNamespace(nsA), nsA, naming.ControlPlaneNamespace(nsV)} {
			if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: "steal-snapshot"}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
				t.Errorf("a snapshot job runs for it in %s: %v", ns, err)
			}
		}

		// A tenant of the attacker's namespace made from the victim's snapshot.
		clone := newVC(nsA, "clone", v1alpha1.ExposureClusterIP)
		clone.Spec.Restore = &v1alpha1.RestoreSpec{SnapshotName: theirs.Name}
		if err := admin.Create(ctx, clone); err != nil {
			t.Fatal(err)
		}
		cloned := waitVC(t, ctx, clone, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionEtcdReady)
			return c != nil && c.Reason == "RestoreWaiting"
		})
		if c := meta.FindStatusCondition(cloned.Status.Conditions, v1alpha1.ConditionEtcdReady); !strings.Contains(c.Message, "there is no VirtualClusterSnapshot "+theirs.Name+" in namespace "+nsA) {
			t.Errorf("restoring another namespace's snapshot: %s", c.Message)
		}
		for _, ns := range []string{controlPlaneNamespace(t, ctx, clone), nsA} {
			if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: naming.For(clone.Name).EtcdStatefulSet()}, &appsv1.StatefulSet{}); !apierrors.IsNotFound(err) {
				t.Errorf("the clone has an etcd in %s: %v", ns, err)
			}
		}
		deleteAndCheckGone(t, ctx, clone)

		// A job of the attacker's own, made before the snapshot under the name the operator
		// would give its job, would write the snapshot's status (its digest) and its file. The
		// operator's job is made in the control-plane namespace, where the namespace's editor
		// makes nothing; one of that name in the tenant's namespace is never looked at.
		forgedDigest := strings.Repeat("ab", 32)
		forged := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "forged-snapshot", Namespace: nsA}, Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
					Command: []string{"sh", "-c", `echo '{"sizeBytes":1,"revision":1,"sha256":"` + forgedDigest + `","keys":1}' > /dev/termination-log`}}}}}}}
		inCP := forged.DeepCopy()
		inCP.Namespace = naming.ControlPlaneNamespace(nsA)
		err = admin.Create(ctx, inCP)
		if !apierrors.IsForbidden(err) {
			t.Errorf("the namespace's editor making the snapshot's job in %s: %v; want Forbidden", inCP.Namespace, err)
		}
		if err := admin.Create(ctx, forged); err != nil {
			t.Fatal(err)
		}
		snap := &v1alpha1.VirtualClusterSnapshot{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: nsA},
			Spec: v1alpha1.VirtualClusterSnapshotSpec{VirtualClusterName: attacker.Name}}
		if err := admin.Create(ctx, snap); err != nil {
			t.Fatal(err)
		}
		snap = waitSnapshot(t, ctx, snap, v1alpha1.SnapshotSucceeded)
		t.Logf("a snapshot with the attacker's job of its name in %s: taken at revision %d, %s", nsA, snap.Status.Revision, snap.Status.SHA256)
		if snap.Status.SHA256 == forgedDigest || snap.Status.Revision == 1 {
			t.Errorf("the snapshot took the result of the attacker's job: %+v", snap.Status)
		}
	})

	t.Run("a tenant's control plane never lands on a lendable node, so it is never lent away", func(t *testing.T) {
		waitPoolNode(t, ctx, func(pn *v1alpha1.PoolNode) bool { return pn.Status.Phase == v1alpha1.PoolNodeInHost })
		// With the other node cordoned, the lendable node is the only one left: the new tenant's
		// etcd and control plane wait rather than take it (the operator could then lend neither
		// that node to the attacker nor the victim's pods away with it).
		cordon(t, ctx, "kn-worker-1", true)
		defer cordon(t, ctx, "kn-worker-1", false)
		second := newVC(nsV, "second", v1alpha1.ExposureNodePort)
		if err := host.Create(ctx, second); err != nil {
			t.Fatal(err)
		}
		got := waitVC(t, ctx, second, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			c := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionEtcdReady)
			return c != nil && strings.Contains(c.Message, "node affinity")
		})
		t.Logf("EtcdReady with only the lendable node schedulable: %s", meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionEtcdReady).Message)
		cordon(t, ctx, "kn-worker-1", false)
		waitReady(t, ctx, second)
		pods := &corev1.PodList{}
		if err := host.List(ctx, pods, client.InNamespace(controlPlaneNamespace(t, ctx, second)), client.MatchingLabels{naming.LabelVirtualCluster: second.Name}); err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Spec.NodeName == lendableNode {
				t.Errorf("the second victim's pod %s runs on the lendable node", p.Name)
			}
		}
		deleteAndCheckGone(t, ctx, second)
	})

	t.Run("root on a lent node, through the operator's credentials or a pod", func(t *testing.T) {
		waitPoolNode(t, ctx, func(pn *v1alpha1.PoolNode) bool { return pn.Status.Phase == v1alpha1.PoolNodeInHost })
		// A listener in the attacker's host namespace, and the tenant's kubeconfig Secret
		// pointed at it, with a token file and an exec plugin, over and over while the node is
		// lent: the operator must never dial it or run anything.
		// First every lendable node of the host, and more: none, past the platform's limit
		// (the chart's operator.maxLentNodesPerTenant, 8), where the node would otherwise be
		// cordoned and drained for it, and the other tenants' promotions wait.
		setPromotion(t, ctx, attacker, 100)
		waitVC(t, ctx, attacker, time.Minute, func(v *v1alpha1.VirtualCluster) bool {
			cond := meta.FindStatusCondition(v.Status.Conditions, v1alpha1.ConditionNodesReady)
			return cond != nil && cond.Reason == "OverNodeLimit" && strings.Contains(cond.Message, "at most 8")
		})
		if pn := waitPoolNode(t, ctx, func(*v1alpha1.PoolNode) bool { return true }); pn.Spec.Tenant != nil || pn.Status.Phase != v1alpha1.PoolNodeInHost {
			t.Errorf("the lendable node past the limit: lent to %+v, phase %s", pn.Spec.Tenant, pn.Status.Phase)
		}

		// The namespace's editor runs a pod labelled as a tenant's etcd on the lendable node
		// (a ReplicaSet's, which a drain may evict), to keep it (and, one on each, every node)
		// from ever being lent: a node that runs a tenant's control plane is not. It is in the
		// tenant's namespace, not a control-plane one, so it counts for nothing: the node is
		// drained (its replacement waits, the node cordoned) and lent.
		forgedLabels := map[string]string{naming.LabelVirtualCluster: attacker.Name, naming.LabelVirtualClusterNamespace: nsA,
			naming.LabelComponent: naming.ComponentEtcd}
		forged := &appsv1.ReplicaSet{
			ObjectMeta: metav1.ObjectMeta{Name: "forged-etcd", Namespace: nsA},
			Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: forgedLabels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: forgedLabels}, Spec: corev1.PodSpec{
					NodeSelector: map[string]string{corev1.LabelHostname: lendableNode}, TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "etcd", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"sleep", "3600"}}}}}},
		}
		if err := admin.Create(ctx, forged); err != nil {
			t.Fatalf("the namespace's editor creating a ReplicaSet: %v", err)
		}
		defer func() { _ = host.Delete(context.Background(), forged) }()
		eventually(t, "the forged etcd pod running on the lendable node", time.Minute, func() error {
			pods := &corev1.PodList{}
			if err := host.List(ctx, pods, client.InNamespace(nsA), client.MatchingLabels(forgedLabels)); err != nil {
				return err
			}
			if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != lendableNode || pods.Items[0].Status.Phase != corev1.PodRunning {
				return fmt.Errorf("%d pods", len(pods.Items))
			}
			return nil
		})

		listener := startListener(t, ctx, nsA)
		stopTamper := tamperKubeconfig(t, ctx, attacker, listener)
		setPromotion(t, ctx, attacker, 1)
		waitNodesReady(t, ctx, attacker)
		waitTenantNodeReady(t, ctx, evil, lendableNode)
		stopTamper()
		if logs := podLogs(t, ctx, nsA, "listener"); strings.Contains(logs, "CONNECTED") {
			t.Errorf("the operator dialled the address the tenant wrote into its kubeconfig Secret: %q", logs)
		}

		root := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeName: lendableNode, HostPID: true,
				Containers: []corev1.Container{{Name: "sh", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever, Command: []string{"ls", "/h/var/lib"},
					SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
					VolumeMounts:    []corev1.VolumeMount{{Name: "host", MountPath: "/h"}}}},
				Volumes: []corev1.Volume{{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}},
			},
		}
		// Even in a namespace labelled privileged by the tenant's admin.
		if _, err := evil.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ops",
			Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		root.Namespace = "ops"
		waitTenantServiceAccount(t, ctx, evil, "ops")
		_, err := evil.CoreV1().Pods("ops").Create(ctx, root, metav1.CreateOptions{})
		refused(t, "a privileged pod with hostPID and the host's / on the lent node", err,
			"KubeNestTenantGuard", `Pod Security "baseline"`, "privileged", "hostPath")

		// The legitimate use: a plain pod on the lent node, and the tenant's own kube-proxy.
		if logs, ok := runTenantPod(t, ctx, evil, "plain", lendableNode, "echo plain ok"); !ok || !strings.Contains(logs, "plain ok") {
			t.Errorf("a baseline pod on the lent node: %q (ok %v)", logs, ok)
		}
		proxyPod := waitKubeProxyPod(t, ctx, evil, lendableNode, time.Time{})

		// The same privileged pod, unbound and kept from the scheduler, to bind it through the
		// older bindings resource, or to make it privileged while a binding of its baseline
		// self is on its way (a binding commits to the pod as stored when it lands): refused
		// as it is written, bound or not.
		unbound := root.DeepCopy()
		unbound.Name, unbound.Spec.NodeName, unbound.Spec.SchedulerName = "root-unbound", "", "none"
		_, err = evil.CoreV1().Pods("ops").Create(ctx, unbound, metav1.CreateOptions{})
		refused(t, "the privileged pod, unbound", err, "KubeNestTenantGuard", "privileged")
		baseline := scriptPod("swapped", "", "sleep 3600")
		baseline.Spec.SchedulerName = "none"
		if baseline, err = evil.CoreV1().Pods("default").Create(ctx, baseline, metav1.CreateOptions{}); err != nil {
			t.Fatalf("a baseline pod, unbound: %v", err)
		}
		baseline.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: BusyboxImage, SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}}
		_, err = evil.CoreV1().Pods("default").UpdateEphemeralContainers(ctx, baseline.Name, baseline, metav1.UpdateOptions{})
		refused(t, "a privileged ephemeral container in an unbound pod", err, "KubeNestTenantGuard", "privileged")
		_ = evil.CoreV1().Pods("default").Delete(ctx, baseline.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		// A local disk of the node, by its id, as an inline volume of a baseline pod.
		disk := scriptPod("disk", lendableNode, "ls /d")
		disk.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{FC: &corev1.FCVolumeSource{
			WWIDs: []string{"0QEMU_QEMU_HARDDISK_drive-scsi0-part1"}, FSType: "ext4"}}}}
		disk.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "d", MountPath: "/d"}}
		_, err = evil.CoreV1().Pods("default").Create(ctx, disk, metav1.CreateOptions{})
		refused(t, "an inline fc volume naming a disk of the lent node", err, "KubeNestTenantGuard", "spec.volumes[0].fc")
		// Or the host's / as a volume a baseline pod mounts by claim.
		_, err = evil.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "host-root"},
			Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}},
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}},
			metav1.CreateOptions{})
		refused(t, "a hostPath PersistentVolume of the host's /", err, "KubeNestTenantGuard", "spec.hostPath")

		// A command in the tenant's own kube-proxy (privileged, on the host's network): through
		// pods/exec, through the kubelet's API via nodes/proxy, and at the kubelet straight with
		// a token of a ServiceAccount the tenant made cluster-admin.
		err = evil.CoreV1().RESTClient().Post().Namespace("kube-system").Resource("pods").Name(proxyPod.Name).SubResource("exec").
			Param("container", "kube-proxy").Param("command", "iptables").Param("command", "-S").Param("stdout", "true").Do(ctx).Error()
		refused(t, "exec into the tenant's kube-proxy", err, "KubeNestTenantGuard", "privileged")
		err = evil.CoreV1().RESTClient().Post().AbsPath("/api/v1/nodes", lendableNode, "proxy/run/kube-system", proxyPod.Name, "kube-proxy").
			Param("cmd", "iptables -S").Do(ctx).Error()
		refused(t, "the lent kubelet's run handler through nodes/proxy", err, "KubeNestTenantGuard", `"run" handler`)
		if _, err := evil.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ops-admin"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: "ops"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := evil.CoreV1().ServiceAccounts("ops").CreateToken(ctx, "default", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		lent, err := evil.CoreV1().Nodes().Get(ctx, lendableNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kubeletURL := "https://" + net.JoinHostPort(internalIP(lent), fmt.Sprint(lent.Status.DaemonEndpoints.KubeletEndpoint.Port))
		kubeletCall := func(method, path string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, method, kubeletURL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
			hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatalf("the lent kubelet at %s: %v", kubeletURL, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		// The token is the kubelet's to accept (its metrics stay the tenant's); the command is not.
		if code, body := kubeletCall(http.MethodGet, "/metrics"); code != http.StatusOK {
			t.Errorf("the lent kubelet's /metrics with the tenant's cluster-admin token: %d %.200q; want it served (the attack below proves nothing otherwise)", code, body)
		}
		if code, body := kubeletCall(http.MethodPost, "/run/kube-system/"+proxyPod.Name+"/kube-proxy?cmd=iptables+-S"); code != http.StatusForbidden {
			t.Errorf("a command in the kube-proxy at the lent kubelet straight: %d %.300q; want 403", code, body)
		} else {
			t.Logf("a command in the kube-proxy at the lent kubelet straight: refused: %.200s", body)
		}
		// exec through the apiserver into a baseline pod still works: the apiserver's own
		// kubelet client is the one the kubelet serves its proxy to.
		sleeper := scriptPod("sleeper", lendableNode, "sleep 3600")
		sleeper.Spec.RestartPolicy = corev1.RestartPolicyAlways
		if _, err := evil.CoreV1().Pods("default").Create(ctx, sleeper, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitTenantPodRunning(t, ctx, evil, "default", "sleeper")
		if out := kubectl(t, "--kubeconfig", attackerKC, "exec", "sleeper", "--", "echo", "exec ok"); strings.TrimSpace(out) != "exec ok" {
			t.Errorf("kubectl exec into a baseline pod on the lent node: %q", out)
		}
		_ = evil.CoreV1().Pods("default").Delete(ctx, "sleeper", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})

		// The kubelet's API works through nodes/proxy, but the machine's own logs (a host
		// kubelet lists /var/log there) are not the tenant's to read.
		if body, err := evil.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", lendableNode, "proxy/healthz").DoRaw(ctx); err != nil || string(body) != "ok" {
			t.Errorf("the lent kubelet's healthz through nodes/proxy: %q, %v", body, err)
		}
		body, err := evil.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", lendableNode, "proxy/logs/").DoRaw(ctx)
		if err == nil {
			t.Errorf("the tenant read the lent node's /var/log through nodes/proxy: %.200q", body)
		}

		setPromotion(t, ctx, attacker, 0)
		waitPoolNode(t, ctx, func(pn *v1alpha1.PoolNode) bool {
			return pn.Status.Phase == v1alpha1.PoolNodeInHost && pn.Spec.Tenant == nil
		})
	})

	t.Run("a sleeping tenant's wake gateway, reached from another tenant", func(t *testing.T) {
		// The attacker can reach the victim's endpoint, asleep as awake. Plain HTTP from its
		// pod wakes nothing. Its own admin certificate, which the victim does not trust, with
		// X-Remote-* headers forged to name itself the victim's admin, wakes nothing either:
		// to the gateway (which ends TLS with the victim's serving certificate) that is an
		// anonymous request. A made-up bearer token wakes the victim (tokens are its
		// apiserver's to check: the cost of a reachable endpoint), and the victim's apiserver
		// refuses it.
		sleepAndWait(t, ctx, victim)
		u, err := url.Parse(victim.Status.Endpoint)
		if err != nil {
			t.Fatal(err)
		}
		script := fmt.Sprintf(`printf 'GET /api/v1/secrets HTTP/1.0\r\n\r\n' | nc -w 10 %s %s`, u.Hostname(), u.Port())
		logs, _ := runTenantPod(t, ctx, evil, "wake-victim", sharedNode, script)
		if !strings.Contains(logs, "Client sent an HTTP request to an HTTPS server") || strings.Contains(logs, "SecretList") {
			t.Errorf("the attacker's plain HTTP request to the victim's wake gateway answered %q; want only the refusal of plain HTTP", logs)
		}

		attack := func(token string) error {
			cfg := tenantConfig(t, attackerKC)
			cfg.Host = victim.Status.Endpoint
			cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile, cfg.TLSClientConfig.Insecure = nil, "", true
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
				return roundTripFunc(func(req *http.Request) (*http.Response, error) {
					req.Header.Set("X-Remote-User", "kubernetes-admin")
					req.Header.Set("X-Remote-Group", "system:masters")
					if token != "" {
						req.Header.Set("Authorization", "Bearer "+token)
					}
					return rt.RoundTrip(req)
				})
			}
			_, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}
		err = attack("")
		t.Logf("the attacker's certificate and forged X-Remote-* headers at the sleeping victim: %v", err)
		if !apierrors.IsServiceUnavailable(err) {
			t.Errorf("the attacker's certificate and forged X-Remote-* headers at the sleeping victim: %v; want 503 (a person's request wakes it)", err)
		}
		if err := host.Get(ctx, client.ObjectKeyFromObject(victim), victim); err != nil {
			t.Fatal(err)
		}
		if !victim.Spec.Sleep.Asleep {
			t.Errorf("plain HTTP or another CA's certificate woke the victim")
		}

		err = attack("made-up")
		t.Logf("a made-up token with forged X-Remote-* headers through the wake gateway: %v", err)
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("a made-up token with forged X-Remote-* headers through the victim's wake gateway: %v; want the victim's apiserver to refuse it (401)", err)
		}
		got := waitReady(t, ctx, victim)
		if got.Spec.Sleep.Asleep {
			t.Errorf("the victim answered but spec.sleep.asleep is still true")
		}
		// What the victim ran is its own again, once its web pod has a new host pod.
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			for _, p := range hostPodsOf(t, ctx, nsV, victim.Name) {
				// Not victimPod by name: an earlier subtest's drain may have replaced it.
				if strings.HasPrefix(p.Annotations[clustertree.AnnotationTenantName], "web-") && podutils.IsPodReady(&p) {
					return true, nil
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("the victim's web pod has no Ready host pod after the wake: %v", err)
		}
		// The Service follows the pod's new address within seconds (the tenant's EndpointSlice
		// controller, then its host copy): tried for up to 30 s.
		script = fmt.Sprintf(`for i in $(seq 30); do echo | nc -w 5 %s 80 && exit 0; sleep 1; done; exit 1`, web.Spec.ClusterIP)
		if logs, ok := runTenantPod(t, ctx, good, "after-wake", sharedNode, script); !ok || !strings.Contains(logs, "hi from ") {
			t.Errorf("the victim's pod reaching its own Service after the wake: %q (ok %v)", logs, ok)
		}
	})

	deleteAndCheckGone(t, ctx, attacker)
	deleteAndCheckGone(t, ctx, victim)
}

// namespaceEditor is a host client acting as a ServiceAccount of ns with the usual grant of a
// tenant in its namespace: edit, and VirtualClusters (which edit does not cover).
func namespaceEditor(t *testing.T, ctx context.Context, ns string) client.Client {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin", Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "virtualclusters", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"kubenest.io"}, Resources: []string{"virtualclusters", "virtualclustersnapshots"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: ns}}
	for _, obj := range []client.Object{sa, role,
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin-edit", Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"}, Subjects: subject},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin-vcs", Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name}, Subjects: subject},
	} {
		if err := host.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(hostConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa.Name,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: host.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startListener runs a pod in ns, behind the Service "listener", that logs CONNECTED for every
// connection to port 8443, and returns the Service's address.
func startListener(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	labels := map[string]string{"app": "listener"}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "listener", Namespace: ns, Labels: labels},
		// On the node that is never lent: a pod no controller makes again would hold the drain.
		Spec: corev1.PodSpec{NodeSelector: map[string]string{corev1.LabelHostname: "kn-worker-1"},
			TerminationGracePeriodSeconds: ptr.To[int64](1), Containers: []corev1.Container{{
				Name: "nc", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", "echo listening; while true; do nc -l -p 8443 </dev/null >/dev/null && echo CONNECTED; done"}}}},
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "listener", Namespace: ns},
		Spec: corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8443}}}}
	for _, obj := range []client.Object{pod, svc} {
		if err := host.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return strings.Contains(podLogs(t, ctx, ns, "listener"), "listening"), nil
	})
	if err != nil {
		t.Fatalf("the listener does not run: %v", err)
	}
	return fmt.Sprintf("https://listener.%s.svc:8443", ns)
}

// tamperKubeconfig keeps rewriting the in-cluster kubeconfig of vc's kubeconfig Secret (the
// operator writes it again on its next pass) to point at server with the operator's own token
// file and an exec plugin, until the returned func is called.
func tamperKubeconfig(t *testing.T, ctx context.Context, vc *v1alpha1.VirtualCluster, server string) func() {
	t.Helper()
	evil := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token,
  exec: {apiVersion: client.authentication.k8s.io/v1, command: /usr/local/bin/nest-operator, args: [--version], interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, server)
	patch, err := json.Marshal(map[string]any{"data": map[string]any{controlplane.KeyInClusterKubeconfig: []byte(evil)}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: vc.Namespace, Name: naming.For(vc.Name).KubeconfigSecret()}}
			_ = host.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch))
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func podLogs(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	logs, _ := hostCS.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(logs)
}

func cordon(t *testing.T, ctx context.Context, node string, on bool) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%v}}`, on)
	if err := host.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

func waitTenantServiceAccount(t *testing.T, ctx context.Context, tenant kubernetes.Interface, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no default ServiceAccount in the tenant's namespace %s: %v", ns, err)
	}
}

// roundTripFunc is a function as an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// finishedAt is when a pod's last container ended.
func finishedAt(p corev1.Pod) time.Time {
	var last time.Time
	for _, cs := range p.Status.ContainerStatuses {
		if t := cs.State.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	return last
}
