package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// The local cluster's load balancer, "local lb": what a cloud's is for Services of type
// LoadBalancer (without a loadBalancerClass). Each gets one address of the pool
// lbPoolFirst..lbPoolLast, written to its status.loadBalancer.ingress with ipMode VIP, and
// the address is routed, on this machine and in every node's network namespace, to a Ready
// node whose host kube-proxy runs: that kube-proxy's iptables rules DNAT the load-balancer IP
// to the Service's endpoints (and masquerade, so replies come back through the node). An
// address is freed when its Service goes or stops being a LoadBalancer. Assignments live in
// the Services' status, so a restarted lb adopts them; its routes stay when it stops, and
// "down" removes them.

// selfCopy copies this program into the run directory, for the processes "up" leaves running:
// "go run" removes its own build when it exits.
func (c config) selfCopy() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(c.runDir, "bin", "local")
	if err := copyFile(self, bin, 0o755); err != nil {
		return "", fmt.Errorf("copying %s: %w", self, err)
	}
	return bin, nil
}

// startLoadBalancer runs "local lb" as a supervised process of this machine.
func (c config) startLoadBalancer() error {
	bin, err := c.selfCopy()
	if err != nil {
		return err
	}
	return c.startSupervised(lbProcess, "", bin, "lb", "--output", c.outDir, "--state-dir", c.stateDir, "--run-dir", c.runDir)
}

type loadBalancer struct {
	c        config
	client   kubernetes.Interface
	services corelisters.ServiceLister
	nodes    corelisters.NodeLister
	proxies  corelisters.PodLister // the host's kube-proxy pods
	assigned map[string]netip.Addr // namespace/name of a Service → its address
	pool     []netip.Addr          // lbPoolFirst..lbPoolLast
}

// runLoadBalancer is "local lb": it syncs everything whenever a Service, Node or kube-proxy
// pod changes, and every 30 seconds.
func runLoadBalancer(ctx context.Context, c config) error {
	client, err := c.hostClient(0)
	if err != nil {
		return err
	}
	const resync = 30 * time.Second
	all := informers.NewSharedInformerFactory(client, resync)
	proxies := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithNamespace(controlplane.KubeProxyNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = "k8s-app=" + controlplane.KubeProxyName }))
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	lb := &loadBalancer{
		c:        c,
		client:   client,
		services: all.Core().V1().Services().Lister(),
		nodes:    all.Core().V1().Nodes().Lister(),
		proxies:  proxies.Core().V1().Pods().Lister(),
		assigned: map[string]netip.Addr{},
	}
	for a := netip.MustParseAddr(lbPoolFirst); a.Compare(netip.MustParseAddr(lbPoolLast)) <= 0; a = a.Next() {
		lb.pool = append(lb.pool, a)
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}
	for _, inf := range []cache.SharedIndexInformer{all.Core().V1().Services().Informer(),
		all.Core().V1().Nodes().Informer(), proxies.Core().V1().Pods().Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	all.Start(ctx.Done())
	proxies.Start(ctx.Done())
	all.WaitForCacheSync(ctx.Done())
	proxies.WaitForCacheSync(ctx.Done())
	lbLogf("serving Services of type LoadBalancer from %s-%s", lbPoolFirst, lbPoolLast)
	for {
		select {
		case <-ctx.Done():
			lbLogf("stopping; routes stay until 'down'")
			return nil
		case <-wake:
		}
		if err := lb.sync(ctx); err != nil {
			lbLogf("sync failed, retrying in 2s: %v", err)
			time.AfterFunc(2*time.Second, poke)
		}
	}
}

// ours says whether this load balancer implements svc.
func ours(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil
}

// sync frees the addresses of Services that went, assigns addresses to new ones, writes them
// to the Services' status and routes them.
func (lb *loadBalancer) sync(ctx context.Context) error {
	svcs, err := lb.services.List(labels.Everything())
	if err != nil {
		return err
	}
	slices.SortFunc(svcs, func(a, b *corev1.Service) int { return strings.Compare(key(a), key(b)) })
	wanted := map[string]*corev1.Service{}
	for _, s := range svcs {
		if ours(s) {
			wanted[key(s)] = s
		}
	}
	for k, addr := range lb.assigned {
		if _, ok := wanted[k]; !ok {
			delete(lb.assigned, k)
			lbLogf("freed %s: Service %s is gone or no longer of type LoadBalancer", addr, k)
		}
	}
	taken := map[netip.Addr]bool{}
	for _, addr := range lb.assigned {
		taken[addr] = true
	}
	// Addresses already in a status first (a previous run's), so that they stay; then the
	// lowest free address for the others.
	for _, adopt := range []bool{true, false} {
		for _, s := range svcs {
			if _, done := lb.assigned[key(s)]; done || !ours(s) {
				continue
			}
			addr, ok := lb.inPool(s)
			if !adopt {
				addr, ok = lb.free(taken)
				if !ok {
					lbLogf("pool %s-%s exhausted: Service %s gets no address", lbPoolFirst, lbPoolLast, key(s))
					continue
				}
			}
			if !ok || taken[addr] {
				continue
			}
			lb.assigned[key(s)], taken[addr] = addr, true
			if adopt {
				lbLogf("kept %s for Service %s (from its status)", addr, key(s))
			} else {
				lbLogf("assigned %s to Service %s", addr, key(s))
			}
		}
	}
	var errs []error
	for _, s := range svcs {
		errs = append(errs, lb.writeStatus(ctx, s))
	}
	errs = append(errs, lb.route())
	return errors.Join(errs...)
}

// writeStatus publishes the Service's address, or clears one of the pool from a Service that
// is no longer a LoadBalancer.
func (lb *loadBalancer) writeStatus(ctx context.Context, s *corev1.Service) error {
	var want []corev1.LoadBalancerIngress
	if addr, ok := lb.assigned[key(s)]; ok {
		want = []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}
	} else if _, inPool := lb.inPool(s); !inPool || s.Spec.Type == corev1.ServiceTypeLoadBalancer {
		return nil // not ours to clear, or waiting for an address
	}
	if equality.Semantic.DeepEqual(s.Status.LoadBalancer.Ingress, want) {
		return nil
	}
	s = s.DeepCopy()
	s.Status.LoadBalancer.Ingress = want
	if _, err := lb.client.CoreV1().Services(s.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("status of Service %s: %w", key(s), err)
	}
	if want == nil {
		lbLogf("cleared the load-balancer address of Service %s", key(s))
	}
	return nil
}

// route routes every assigned address to a node that serves it: on this machine, where the
// e2e tests run, and in each node's network namespace, so that a node whose kube-proxy is not
// the host's (a node lent to a tenant) reaches it too. An address keeps its node while that
// node qualifies; otherwise the addresses are spread over the nodes that do.
func (lb *loadBalancer) route() error {
	targets := lb.servingNodes()
	current, err := lbRoutes("")
	if err != nil {
		return err
	}
	want := map[netip.Addr]string{} // address → the node address it is routed through
	for _, addr := range lb.assigned {
		gw := current[addr]
		if !slices.ContainsFunc(targets, func(n corev1.Node) bool { return nodeIP(n) == gw }) {
			gw = ""
			if len(targets) > 0 {
				n := targets[lb.offset(addr)%len(targets)]
				gw = nodeIP(n)
				lbLogf("routing %s via %s (%s)", addr, gw, n.Name)
			} else {
				lbLogf("no Ready node runs the host's kube-proxy: %s is not routed", addr)
				continue
			}
		}
		want[addr] = gw
	}
	var errs []error
	errs = append(errs, syncRoutes("", current, want, ""))
	nodes, err := lb.c.existingNodes()
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if !netnsExists(n.name) {
			continue
		}
		have, err := lbRoutes(n.name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// A node's own addresses need no route: its kube-proxy catches them.
		errs = append(errs, syncRoutes(n.name, have, want, n.ip))
	}
	return errors.Join(errs...)
}

// syncRoutes makes the load-balancer routes of a network namespace ("" is this machine's)
// want, leaving out those through self.
func syncRoutes(netns string, have, want map[netip.Addr]string, self string) error {
	ip := func(args ...string) error {
		if netns != "" {
			args = append([]string{"-n", netns}, args...)
		}
		return run("ip", args...)
	}
	var errs []error
	for addr := range have {
		if gw, ok := want[addr]; !ok || gw == self {
			errs = append(errs, ip("route", "del", addr.String()+"/32", "proto", lbRouteProto))
			if netns == "" {
				lbLogf("removed the route of %s", addr)
			}
		}
	}
	for addr, gw := range want {
		if gw == self || have[addr] == gw {
			continue
		}
		errs = append(errs, ip("route", "replace", addr.String()+"/32", "via", gw, "proto", lbRouteProto))
	}
	return errors.Join(errs...)
}

// lbRoutes reads the load-balancer routes of a network namespace ("" is this machine's):
// address → gateway.
func lbRoutes(netns string) (map[netip.Addr]string, error) {
	args := []string{"-j", "route", "show", "proto", lbRouteProto}
	if netns != "" {
		args = append([]string{"-n", netns}, args...)
	}
	out, err := exec.Command("ip", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	var routes []struct{ Dst, Gateway string }
	if err := json.Unmarshal(out, &routes); err != nil {
		return nil, fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
	}
	first, last := netip.MustParseAddr(lbPoolFirst), netip.MustParseAddr(lbPoolLast)
	got := map[netip.Addr]string{}
	for _, r := range routes {
		if a, err := netip.ParseAddr(r.Dst); err == nil && a.Compare(first) >= 0 && a.Compare(last) <= 0 {
			got[a] = r.Gateway
		}
	}
	return got, nil
}

// removeLBRoutes removes the load balancer's routes from this machine and the nodes, for
// "down".
func removeLBRoutes(nodes []node) error {
	var errs []error
	for _, ns := range append([]string{""}, names(nodes)...) {
		if ns != "" && !netnsExists(ns) {
			continue
		}
		have, err := lbRoutes(ns)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, syncRoutes(ns, have, nil, ""))
	}
	return errors.Join(errs...)
}

// servingNodes are the Ready nodes a Ready host kube-proxy runs on, by name.
func (lb *loadBalancer) servingNodes() []corev1.Node {
	proxies, _ := lb.proxies.List(labels.Everything())
	nodes, _ := lb.nodes.List(labels.Everything())
	var out []corev1.Node
	for _, n := range nodes {
		if nodeIP(*n) == "" || !nodeReady(n) {
			continue
		}
		if slices.ContainsFunc(proxies, func(p *corev1.Pod) bool {
			return p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podutils.IsPodReady(p)
		}) {
			out = append(out, *n)
		}
	}
	slices.SortFunc(out, func(a, b corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// inPool returns the Service's status address when it is one of the pool.
func (lb *loadBalancer) inPool(s *corev1.Service) (netip.Addr, bool) {
	for _, in := range s.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil && slices.Contains(lb.pool, a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func (lb *loadBalancer) free(taken map[netip.Addr]bool) (netip.Addr, bool) {
	for _, a := range lb.pool {
		if !taken[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// offset is the address's place in the pool.
func (lb *loadBalancer) offset(a netip.Addr) int { return slices.Index(lb.pool, a) }

func key(s *corev1.Service) string { return s.Namespace + "/" + s.Name }

func nodeIP(n corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func names(nodes []node) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name)
	}
	return out
}

func lbLogf(format string, args ...any) {
	fmt.Printf("%s [lb] "+format+"\n", append([]any{time.Now().Format(time.DateTime)}, args...)...)
}

// copyFile copies a file next to its destination, then renames it there: the destination may
// be a program that is running (a second process "up" starts from the same copy).
func copyFile(from, to string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := to + ".new"
	dst, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}
