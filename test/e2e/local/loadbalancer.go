package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
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

// The local cluster's load balancer, "local lb": what a cloud's proxying load balancer is for
// Services of type LoadBalancer (without a loadBalancerClass). Each gets one address of the
// pool lbPoolFirst..lbPoolLast on the bridge, where the load balancer listens on the Service's
// TCP ports and relays each connection to the Service's node port on a Ready node whose host
// kube-proxy runs (the next one when a node does not answer). The address is written to
// status.loadBalancer.ingress, with ipMode Proxy, once a node answers behind it, so that whoever
// reads it finds it working; kube-proxy leaves a Proxy address alone, so a pod, a node and this
// machine all reach it through the load balancer. An address is freed when its Service goes or
// stops being a LoadBalancer. Assignments live in the Services' status, so a restarted lb adopts
// them; the addresses go with the bridge at "down".

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
	fronts   map[string]*front     // namespace/name of a Service → its listeners
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
		fronts:   map[string]*front{},
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
	said := ""
	for {
		select {
		case <-ctx.Done():
			lbLogf("stopping; its addresses stay on the bridge, unanswered, until it runs again or 'down'")
			return nil
		case <-wake:
		}
		msg := ""
		if err := lb.sync(ctx); err != nil {
			msg = err.Error()
			time.AfterFunc(time.Second, poke)
		}
		// Said once, not every second while the same thing is awaited.
		if msg != "" && msg != said {
			lbLogf("not done, again every second until it is: %s", msg)
		}
		said = msg
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
	errs := []error{lb.syncFronts(wanted)}
	for _, s := range svcs {
		errs = append(errs, lb.writeStatus(ctx, s))
	}
	return errors.Join(errs...)
}

// writeStatus publishes the Service's address once a node answers behind it (a client that
// reads the address finds it working), or clears one of the pool from a Service that is no
// longer a LoadBalancer.
func (lb *loadBalancer) writeStatus(ctx context.Context, s *corev1.Service) error {
	var want []corev1.LoadBalancerIngress
	if addr, ok := lb.assigned[key(s)]; ok {
		if published, _ := lb.inPool(s); published != addr {
			if err := lb.answers(key(s)); err != nil {
				return fmt.Errorf("not publishing %s for Service %s yet: %w", addr, key(s), err)
			}
		}
		want = []corev1.LoadBalancerIngress{{IP: addr.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeProxy)}}
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

// A front is the load balancer's side of one Service: its address on the bridge and a
// listener per TCP port, each relaying every connection to the Service's node port on a node
// that serves it, as a cloud's proxying load balancer does. The status says ipMode Proxy, so
// kube-proxy leaves the address alone: a connection to it from a pod, a node or this machine
// goes through the load balancer, the same path for every client.
type front struct {
	addr      netip.Addr
	nodePorts map[int32]int32 // the Service's TCP port → its node port
	listeners []net.Listener
}

func (f *front) close() {
	for _, l := range f.listeners {
		_ = l.Close()
	}
}

// tcpNodePorts is the Service's TCP port → node port; the relay needs a node port, and speaks
// TCP only.
func tcpNodePorts(s *corev1.Service) map[int32]int32 {
	out := map[int32]int32{}
	for _, p := range s.Spec.Ports {
		if (p.Protocol == corev1.ProtocolTCP || p.Protocol == "") && p.NodePort != 0 {
			out[p.Port] = p.NodePort
		}
	}
	return out
}

// syncFronts puts every assigned address on the bridge with its listeners, and takes down the
// fronts and addresses of Services that no longer have one.
func (lb *loadBalancer) syncFronts(svcs map[string]*corev1.Service) error {
	var errs []error
	for k, f := range lb.fronts {
		s, ok := svcs[k]
		if addr, assigned := lb.assigned[k]; ok && assigned && addr == f.addr && maps.Equal(f.nodePorts, tcpNodePorts(s)) {
			continue
		}
		f.close()
		delete(lb.fronts, k)
	}
	for k, addr := range lb.assigned {
		if _, ok := lb.fronts[k]; ok {
			continue
		}
		f, err := lb.listen(svcs[k], addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("Service %s at %s: %w", k, addr, err))
			continue
		}
		lb.fronts[k] = f
	}
	// Addresses of the pool on the bridge that no front holds (a freed one, a previous run's).
	have, err := lb.bridgePoolAddrs()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	held := map[netip.Addr]bool{}
	for _, f := range lb.fronts {
		held[f.addr] = true
	}
	for _, a := range have {
		if !held[a] {
			errs = append(errs, run("ip", "addr", "del", a.String()+"/32", "dev", bridgeName))
			lbLogf("removed %s from %s", a, bridgeName)
		}
	}
	return errors.Join(errs...)
}

// listen puts addr on the bridge and listens on each TCP port of s there.
func (lb *loadBalancer) listen(s *corev1.Service, addr netip.Addr) (*front, error) {
	if err := run("ip", "addr", "replace", addr.String()+"/32", "dev", bridgeName); err != nil {
		return nil, err
	}
	f := &front{addr: addr, nodePorts: tcpNodePorts(s)}
	for _, p := range s.Spec.Ports {
		if _, ok := f.nodePorts[p.Port]; !ok {
			lbLogf("Service %s port %d (%s): not relayed; this load balancer relays TCP ports with a node port", key(s), p.Port, p.Protocol)
		}
	}
	for port, nodePort := range f.nodePorts {
		l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), fmt.Sprint(port)))
		if err != nil {
			f.close()
			return nil, err
		}
		f.listeners = append(f.listeners, l)
		go lb.serve(l, addr, nodePort)
		lbLogf("listening on %s:%d for Service %s (node port %d)", addr, port, key(s), nodePort)
	}
	return f, nil
}

// serve relays each connection l accepts until l is closed.
func (lb *loadBalancer) serve(l net.Listener, addr netip.Addr, nodePort int32) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			backend, err := lb.dialNodePort(addr, nodePort)
			if err != nil {
				lbLogf("%s: dropped a connection from %s: %v", c.LocalAddr(), c.RemoteAddr(), err)
				return
			}
			defer backend.Close()
			relay(c.(*net.TCPConn), backend.(*net.TCPConn))
		}()
	}
}

// dialNodePort connects to nodePort on the first serving node that answers, starting from the
// address's own place among them (so that addresses spread over the nodes).
func (lb *loadBalancer) dialNodePort(addr netip.Addr, nodePort int32) (net.Conn, error) {
	nodes := lb.servingNodes()
	if len(nodes) == 0 {
		return nil, errors.New("no Ready node runs the host's kube-proxy")
	}
	var errs []error
	for i := range nodes {
		n := nodes[(lb.offset(addr)+i)%len(nodes)]
		c, err := net.DialTimeout("tcp", net.JoinHostPort(nodeIP(n), fmt.Sprint(nodePort)), 2*time.Second)
		if err == nil {
			return c, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n.Name, err))
	}
	return nil, errors.Join(errs...)
}

// answers is the load balancer's health check of a Service: a serving node accepts a
// connection on each of its relayed node ports. Its address is published only then.
func (lb *loadBalancer) answers(k string) error {
	f, ok := lb.fronts[k]
	if !ok {
		return errors.New("not listening yet")
	}
	for _, nodePort := range f.nodePorts {
		c, err := lb.dialNodePort(f.addr, nodePort)
		if err != nil {
			return fmt.Errorf("node port %d: %w", nodePort, err)
		}
		_ = c.Close()
	}
	return nil
}

// relay copies both ways between a client's connection and a node's until both sides are done,
// passing on a half close.
func relay(client, backend *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(backend, client)
		_ = backend.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(client, backend)
	_ = client.CloseWrite()
	<-done
}

// bridgePoolAddrs are the addresses of the pool on the bridge.
func (lb *loadBalancer) bridgePoolAddrs() ([]netip.Addr, error) {
	out, err := exec.Command("ip", "-j", "addr", "show", "dev", bridgeName).Output()
	if err != nil {
		return nil, fmt.Errorf("ip addr show dev %s: %w", bridgeName, err)
	}
	var links []struct {
		AddrInfo []struct{ Local string } `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("ip addr show dev %s: %w", bridgeName, err)
	}
	var got []netip.Addr
	for _, l := range links {
		for _, a := range l.AddrInfo {
			if ip, err := netip.ParseAddr(a.Local); err == nil && slices.Contains(lb.pool, ip) {
				got = append(got, ip)
			}
		}
	}
	return got, nil
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
