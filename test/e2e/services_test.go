//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
)

const sharedNode = "kubenest-shared"

// TestTenantServices: a tenant's pods reach its Services by name and by ClusterIP, and
// headless names resolve to pod IPs, and kubernetes.default.svc reaches the tenant apiserver,
// from the shared node and from a lent node, with the
// server pods on the shared node; on the lent node the tenant's kube-proxy replaces the host's,
// which comes back with the node, and never do both run; and a Service deleted in the tenant
// leaves nothing in the host.
func TestTenantServices(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ns := createNamespace(t, ctx, "e2e-services")
	vc := newVC(ns, "net", v1alpha1.ExposureNodePort)
	vc.Spec.Nodes.Shared = true
	if err := host.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	got := waitReady(t, ctx, vc)
	if got.Status.ServiceCIDR == "" {
		t.Fatal("status.serviceCIDR is empty")
	}
	kubeconfig := downloadKubeconfig(t, ctx, vc)
	tenant := tenantClient(t, kubeconfig)
	waitTenantNodeReady(t, ctx, tenant, sharedNode)

	createWebDeployment(t, ctx, tenant, 2)
	pods := waitTenantPodsRunning(t, ctx, tenant, 2)
	web := createService(t, ctx, tenant, "web", false)
	createService(t, ctx, tenant, "web-headless", true)
	t.Logf("tenant Service range %s; web has ClusterIP %s; web pods %s, %s", got.Status.ServiceCIDR, web.Spec.ClusterIP,
		pods[0].Status.PodIP, pods[1].Status.PodIP)

	t.Run("the host copy has the tenant's ClusterIP", func(t *testing.T) {
		hostSvc := &corev1.Service{}
		name := clustertree.HostName(vc.Name, "default", "web")
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			return host.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, hostSvc) == nil, nil
		})
		if err != nil {
			t.Fatalf("no host copy %s of the tenant Service: %v", name, err)
		}
		if hostSvc.Spec.ClusterIP != web.Spec.ClusterIP {
			t.Errorf("host copy has ClusterIP %s, the tenant Service %s", hostSvc.Spec.ClusterIP, web.Spec.ClusterIP)
		}
	})

	// What a client pod checks: the Service by name and by ClusterIP, and the headless name.
	// Each web pod answers one connection at a time, so a connection is tried a few times.
	script := fmt.Sprintf(`set -x
`+shellTry+`
look web.default.svc.cluster.local || exit 1
try web.default.svc.cluster.local || exit 1
try web || exit 1
try %s || exit 1
look web-headless.default.svc.cluster.local || exit 1
look kubernetes.default.svc.cluster.local || exit 1
try kubernetes.default.svc.cluster.local 443 "" || exit 1
echo reached the tenant apiserver at kubernetes.default.svc`, web.Spec.ClusterIP)
	check := func(t *testing.T, node string) {
		out, ok := runTenantPod(t, ctx, tenant, "client-"+strings.ReplaceAll(node, ".", "-"), node, script)
		if !ok || strings.Count(out, "hi from web-") < 3 {
			t.Fatalf("client on %s could not reach the Service 3 times (by name, short name, ClusterIP) and the tenant apiserver at kubernetes.default.svc:\n%s", node, out)
		}
		// Lending a node drains it: the web pods may have moved since, and the evicted ones
		// may still be going.
		list, err := tenant.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=web", FieldSelector: "status.phase=Running"})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			if !strings.Contains(out, p.Status.PodIP) {
				t.Errorf("the headless name did not resolve to pod %s's IP %s:\n%s", p.Name, p.Status.PodIP, out)
			}
		}
	}
	t.Run("from the shared node", func(t *testing.T) { check(t, sharedNode) })

	// A pod with a subdomain (a StatefulSet's, say) finds its FQDN, in the tenant's namespace
	// and cluster domain, in its /etc/hosts, as on a kubelet of the tenant's own.
	t.Run("a pod with a subdomain has its FQDN in /etc/hosts on the shared node", func(t *testing.T) {
		pod := scriptPod("fqdn", sharedNode, "cat /etc/hosts; getent hosts fqdn-0.web-headless.default.svc.cluster.local || grep -F fqdn-0.web-headless.default.svc.cluster.local /etc/hosts")
		pod.Spec.Hostname, pod.Spec.Subdomain = "fqdn-0", "web-headless"
		out, ok := runTenantPodSpec(t, ctx, tenant, pod)
		if !ok || !regexp.MustCompile(`(?m)^[0-9.]+\s+fqdn-0\.web-headless\.default\.svc\.cluster\.local\s+fqdn-0$`).MatchString(out) {
			t.Fatalf("the pod's /etc/hosts has no line <IP> fqdn-0.web-headless.default.svc.cluster.local fqdn-0:\n%s", out)
		}
		if strings.Contains(out, ns+".svc") {
			t.Errorf("the pod's /etc/hosts names the host's namespace %s:\n%s", ns, out)
		}
		// The writer of the file is KubeNest's: the tenant sees no event of it.
		events, err := tenant.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=fqdn"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if strings.Contains(e.InvolvedObject.FieldPath, clustertree.EtcHostsName) {
				t.Errorf("the tenant sees event %s %q of %s", e.Reason, e.Message, e.InvolvedObject.FieldPath)
			}
		}
	})

	// A NodePort answers at the shared node's address, a ClusterIP of the tenant's own range
	// that leads to the NodePort proxy of its control plane; and the kubelet API (logs) is
	// reached there too.
	nodePort := createNodePortService(t, ctx, tenant, "web-np")
	node, err := tenant.CoreV1().Nodes().Get(ctx, sharedNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodeIP := node.Status.Addresses[0].Address
	checkNodePort := func(t *testing.T, from string) {
		out, ok := runTenantPod(t, ctx, tenant, "np-client-"+strings.ReplaceAll(from, ".", "-"), from,
			fmt.Sprintf("set -x\n%s\ntry %s %d || exit 1", shellTry, nodeIP, nodePort))
		if !ok {
			t.Fatalf("a pod on %s could not reach NodePort %d at the shared node's address %s:\n%s", from, nodePort, nodeIP, out)
		}
	}
	t.Run("a NodePort answers at the shared node's address", func(t *testing.T) {
		if want := clustertree.SharedNodeAddress(netip.MustParsePrefix(got.Status.ServiceCIDR)).String(); nodeIP != want {
			t.Fatalf("the shared node's InternalIP is %s, want %s (its address in the tenant's Service range)", nodeIP, want)
		}
		checkNodePort(t, sharedNode)
	})

	t.Run("kubectl port-forward svc/web", func(t *testing.T) {
		if got := portForward(t, ctx, kubeconfig, "svc/web", 80); !strings.Contains(got, "hi from web-") {
			t.Errorf("through kubectl port-forward svc/web: %q", got)
		}
	})

	t.Run("from a lent node, to pods on the shared node", func(t *testing.T) {
		setPromotion(t, ctx, vc, 1)
		waitNodesReady(t, ctx, vc)
		waitTenantNodeReady(t, ctx, tenant, lendableNode)
		// The host's kube-proxy left with the host's pods; the tenant's runs there, alone.
		pod := waitKubeProxyPod(t, ctx, tenant, lendableNode, time.Time{})
		t.Logf("the tenant's kube-proxy %s runs on %s", pod.Name, lendableNode)
		// The tenant is exposed on a NodePort: lent nodes reach it at its endpoint.
		lent := &v1alpha1.VirtualCluster{}
		if err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: vc.Name}, lent); err != nil {
			t.Fatal(err)
		}
		checkOneKubeProxy(t, ctx, lendableNode, lent.Status.Endpoint)
		checkNoHostServiceRules(t, ctx, lendableNode)
		check(t, lendableNode)
		// A Service made now is one the host's kube-proxy never saw on this node: only the
		// tenant's routes it here.
		late := createService(t, ctx, tenant, "web-late", false)
		out, ok := runTenantPod(t, ctx, tenant, "client-late", lendableNode, fmt.Sprintf(`set -x
for i in 1 2 3 4 5 6 7 8 9 10; do echo | nc -w 5 %s 80 && exit 0; sleep 1; done; exit 1`, late.Spec.ClusterIP))
		if !ok || !strings.Contains(out, "hi from web-") {
			t.Errorf("a pod on the lent node could not reach a new Service's ClusterIP %s:\n%s", late.Spec.ClusterIP, out)
		}
		// The tenant's kube-proxy leads the shared node's address there too.
		checkNodePort(t, lendableNode)
		if p := waitKubeProxyPod(t, ctx, tenant, lendableNode, time.Time{}); p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("the tenant's kube-proxy restarted %d times", p.Status.ContainerStatuses[0].RestartCount)
		}
	})

	t.Run("a Service deleted in the tenant leaves nothing in the host", func(t *testing.T) {
		if err := tenant.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		name := clustertree.HostName(vc.Name, "default", "web")
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			err := host.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Service{})
			if !apierrors.IsNotFound(err) {
				return false, nil
			}
			slices, err := hostCS.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + name})
			return err == nil && len(slices.Items) == 0, nil
		})
		if err != nil {
			t.Errorf("the host copy of the deleted Service or its EndpointSlices remain: %v", err)
		}
	})

	returned := time.Now()
	setPromotion(t, ctx, vc, 0)
	waitVC(t, ctx, vc, 3*time.Minute, func(v *v1alpha1.VirtualCluster) bool { return len(v.Status.Nodes) == 0 })
	t.Run("the returned node runs the host's kube-proxy again, alone", func(t *testing.T) {
		waitKubeProxyPod(t, ctx, hostCS, lendableNode, returned)
		checkOneKubeProxy(t, ctx, lendableNode, hostConfig.Host)
	})
	deleteAndCheckGone(t, ctx, vc)
}

// waitKubeProxyPod waits until the kube-system kube-proxy pod of node in cluster is Ready,
// its container started after since, and returns it.
func waitKubeProxyPod(t *testing.T, ctx context.Context, cluster kubernetes.Interface, node string, since time.Time) *corev1.Pod {
	t.Helper()
	var last string
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cluster.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
			LabelSelector: "k8s-app=kube-proxy", FieldSelector: "spec.nodeName=" + node,
		})
		if err != nil || len(pods.Items) != 1 {
			last = fmt.Sprintf("%d pods, %v", len(pods.Items), err)
			return false, nil
		}
		p := &pods.Items[0]
		last = fmt.Sprintf("pod %s phase %s, containers %+v", p.Name, p.Status.Phase, p.Status.ContainerStatuses)
		if !podutils.IsPodReady(p) || len(p.Status.ContainerStatuses) != 1 {
			return false, nil
		}
		running := p.Status.ContainerStatuses[0].State.Running
		pod = p
		return running != nil && running.StartedAt.After(since), nil
	})
	if err != nil {
		t.Fatalf("no kube-proxy Ready on %s since %s: %s: %v", node, since.Format(time.TimeOnly), last, err)
	}
	return pod
}

// checkOneKubeProxy checks that exactly one kube-proxy runs in node's network namespace (two
// would fight over its iptables rules), and that it serves the cluster whose apiserver is
// server: it reads the server from the process's environment (client-go's in-cluster
// configuration).
func checkOneKubeProxy(t *testing.T, ctx context.Context, node, server string) {
	t.Helper()
	var netns syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+node, &netns); err != nil {
		t.Fatalf("network namespace of %s: %v", node, err)
	}
	want := fmt.Sprintf("net:[%d]", netns.Ino)
	var servers []string
	// The kube-proxy of the node's previous cluster may still be stopping.
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		servers = nil
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			dir := filepath.Dir(p)
			cmdline, err := os.ReadFile(p)
			args := strings.Split(string(cmdline), "\x00")
			if err != nil || len(args) < 2 || filepath.Base(args[0]) != "nest-controlplane" || args[1] != "kube-proxy" {
				continue
			}
			if ns, err := os.Readlink(filepath.Join(dir, "ns", "net")); err != nil || ns != want {
				continue
			}
			environ, err := os.ReadFile(filepath.Join(dir, "environ"))
			if err != nil {
				servers = append(servers, fmt.Sprintf("%s: %v", dir, err))
				continue
			}
			env := map[string]string{}
			for _, kv := range strings.Split(string(environ), "\x00") {
				if k, v, ok := strings.Cut(kv, "="); ok {
					env[k] = v
				}
			}
			servers = append(servers, "https://"+net.JoinHostPort(env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]))
		}
		return len(servers) == 1, nil
	})
	if err != nil || servers[0] != server {
		t.Errorf("kube-proxies in %s's network namespace serve %q; want one, for %s", node, servers, server)
	}
}

// hostServiceCIDR is the local host cluster's own Service range (test/e2e/local's layout).
const hostServiceCIDR = "10.96.0.0/16"

// checkNoHostServiceRules fails t if the host's own Services (those of hostServiceCIDR: its
// apiserver, DNS, KubeNest's portal, ...) are still routed in node's network namespace: once
// a node is lent, the rules the host's kube-proxy left there must be gone (the tenant's
// kube-proxy rewrites the node's Service chains), or the tenant's pods on it could reach the
// host's Service addresses.
func checkNoHostServiceRules(t *testing.T, ctx context.Context, node string) {
	t.Helper()
	hostRange := netip.MustParsePrefix(hostServiceCIDR)
	svcs, err := hostCS.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hostServices := map[string]string{} // ClusterIP → namespace/name
	for _, svc := range svcs.Items {
		if ip, err := netip.ParseAddr(svc.Spec.ClusterIP); err == nil && hostRange.Contains(ip) {
			hostServices[ip.String()] = svc.Namespace + "/" + svc.Name
		}
	}
	if len(hostServices) == 0 {
		t.Fatalf("the host has no Service in %s to look for", hostServiceCIDR)
	}
	var routed []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", node, "iptables-save", "-t", "nat").CombinedOutput()
		if err != nil {
			routed = []string{fmt.Sprintf("iptables-save: %v: %s", err, out)}
			return false, nil
		}
		routed = nil
		for ip, svc := range hostServices {
			if strings.Contains(string(out), " -d "+ip+"/32 ") {
				routed = append(routed, svc+" "+ip)
			}
		}
		return len(routed) == 0, nil
	})
	if err != nil {
		t.Errorf("host Services still routed on the lent node %s: %v", node, routed)
	}
}

func createService(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name string, headless bool) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	created, err := tenant.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

// createNodePortService makes a NodePort Service of the web pods and returns its NodePort.
func createNodePortService(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name string) int32 {
	t.Helper()
	created, err := tenant.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created.Spec.Ports[0].NodePort
}

// shellTry defines try HOST [PORT [ANSWER]] (a connection, port 80 unless given, that answers
// with ANSWER, "hi from" unless given) and look (a DNS lookup), each tried a few times: a Service
// just made reaches CoreDNS and kube-proxy within moments, not at once, and a web pod serves one
// connection at a time (one that comes between two may be accepted and closed unanswered).
const shellTry = `try() { for i in 1 2 3 4 5; do out=$(echo | nc -w 5 "$1" "${2:-80}") && case "$out" in *"${3-hi from}"*) echo "$out"; return 0;; esac; sleep 1; done; return 1; }
look() { for i in 1 2 3 4 5; do nslookup "$1" && return 0; sleep 1; done; return 1; }`

// runTenantPod runs a busybox pod in the tenant on node, waits for it to finish and returns
// its log and whether it succeeded.
func runTenantPod(t *testing.T, ctx context.Context, tenant kubernetes.Interface, name, node, script string) (string, bool) {
	t.Helper()
	return runTenantPodSpec(t, ctx, tenant, scriptPod(name, node, script))
}

// waitTenantPodRunning waits until the tenant's pod ns/name runs and has an address.
func waitTenantPodRunning(t *testing.T, ctx context.Context, tenant kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := tenant.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		pod = p
		return err == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	if err != nil {
		t.Fatalf("tenant pod %s/%s not Running: %v", ns, name, err)
	}
	return pod
}

// scriptPod is a busybox pod of the tenant's default namespace that runs script once on node.
func scriptPod(name, node, script string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "main", Image: BusyboxImage, ImagePullPolicy: corev1.PullNever,
				Command: []string{"sh", "-c", script}}},
		},
	}
}

// runTenantPodSpec runs pod in the tenant's default namespace, waits for it to finish and returns its log
// and whether it succeeded.
func runTenantPodSpec(t *testing.T, ctx context.Context, tenant kubernetes.Interface, pod *corev1.Pod) (string, bool) {
	t.Helper()
	name, node := pod.Name, pod.Spec.NodeName
	pods := tenant.CoreV1().Pods("default")
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{}) }()
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed, nil
	})
	logs, _ := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("tenant pod %s on %s did not finish: %v (phase %s)\n%s", name, node, err, pod.Status.Phase, logs)
	}
	if pod.Status.Phase != corev1.PodSucceeded {
		// What the pod's status says matters when it never ran (a provider error, say).
		logs = fmt.Appendf(logs, "\n[pod %s: phase %s, reason %q, message %q]", name, pod.Status.Phase, pod.Status.Reason, pod.Status.Message)
	}
	return string(logs), pod.Status.Phase == corev1.PodSucceeded
}
