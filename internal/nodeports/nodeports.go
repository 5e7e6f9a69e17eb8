// Package nodeports serves a tenant's NodePorts at its shared node's address.
//
// A node's InternalIP is where the tenant's NodePort Services answer. The shared node is not a
// machine: its address is a ClusterIP of the tenant's own Service range, whose Service (kept by
// clustertree in the host and in the tenant) leads each NodePort to the tenant's control-plane
// pods, where this proxy listens on the port and passes each connection (or UDP flow) on to the
// NodePort Service's ClusterIP. So the Service's own routing, session affinity included, picks
// the backend, as it does for a NodePort of a real node, and the traffic is carried by the
// tenant's own pod, never by a process shared with other tenants.
//
// A tenant writes its Services as it likes: the proxy forwards only to ClusterIPs in the
// tenant's Service range, never to another address a Service might name.
package nodeports

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Proxy serves the NodePorts of the Services Client sees.
type Proxy struct {
	Client kubernetes.Interface
	// ServiceCIDR is the tenant's Service range: a NodePort whose Service's ClusterIP is
	// outside it is not served.
	ServiceCIDR netip.Prefix
	// ListenHost is the address the ports are opened on; empty: every address of the pod.
	ListenHost string
	// DialTimeout bounds a connection to a ClusterIP (10 s when zero); UDPIdle ends a UDP flow
	// that has been quiet that long (2 min when zero, as conntrack's UDP stream timeout).
	DialTimeout, UDPIdle time.Duration
	// MaxConnections bounds the TCP connections, and MaxFlows the UDP flows (each a socket, a
	// goroutine and a 64 KiB buffer), each port serves at once (DefaultMaxConnections and
	// DefaultMaxFlows when zero). The ports are reached from any pod of the host, other
	// tenants' included, and this process is the tenant's controller-manager's: without a
	// bound, one pod opening connections or sending from thousands of source ports would take
	// its memory and file descriptors. Past it, a connection is closed at once and a datagram
	// of a new flow dropped.
	MaxConnections, MaxFlows int
}

// Bounds of a port's connections and flows (Proxy.MaxConnections, MaxFlows).
const (
	DefaultMaxConnections = 1024
	DefaultMaxFlows       = 256
)

// Key is one NodePort: a protocol and a port number.
type Key struct {
	Protocol corev1.Protocol
	Port     int32
}

func (k Key) String() string { return fmt.Sprintf("%s/%d", k.Protocol, k.Port) }

// Target is where a NodePort leads: its Service's ClusterIP and port.
type Target struct {
	Service string // namespace/name, for logs
	Addr    netip.AddrPort
}

// Targets are the NodePorts of services and where they lead, and, for each Service whose
// NodePorts are not served, why not.
func Targets(services []*corev1.Service, serviceCIDR netip.Prefix) (map[Key]Target, map[string]string) {
	out, refused := map[Key]Target{}, map[string]string{}
	for _, s := range services {
		if s.Spec.Type != corev1.ServiceTypeNodePort && s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		name := s.Namespace + "/" + s.Name
		ip, err := netip.ParseAddr(s.Spec.ClusterIP)
		if err != nil || !serviceCIDR.Contains(ip.Unmap()) {
			refused[name] = fmt.Sprintf("spec.clusterIP %q is not in the tenant's Service range %s", s.Spec.ClusterIP, serviceCIDR)
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.NodePort == 0 {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			out[Key{proto, p.NodePort}] = Target{Service: name, Addr: netip.AddrPortFrom(ip.Unmap(), uint16(p.Port))}
		}
	}
	return out, refused
}

// Run serves the NodePorts until ctx ends, following the Services as they change.
func (p *Proxy) Run(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("nodeports")
	if p.DialTimeout == 0 {
		p.DialTimeout = 10 * time.Second
	}
	if p.MaxConnections == 0 {
		p.MaxConnections = DefaultMaxConnections
	}
	if p.MaxFlows == 0 {
		p.MaxFlows = DefaultMaxFlows
	}
	if p.UDPIdle == 0 {
		p.UDPIdle = 2 * time.Minute
	}
	factory := informers.NewSharedInformerFactory(p.Client, 0)
	services := factory.Core().V1().Services()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := services.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), services.Informer().HasSynced) {
		return ctx.Err()
	}
	log.Info("serving the tenant's NodePorts", "serviceCIDR", p.ServiceCIDR)
	s := &server{proxy: p, log: log, open: map[Key]*port{}, failed: map[Key]string{}, refused: map[string]string{}}
	defer s.closeAll()
	poke(nil)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			s.sync(ctx, services.Lister())
		}
	}
}

// server holds the open ports.
type server struct {
	proxy *Proxy
	log   klog.Logger
	open  map[Key]*port
	// failed are the ports that could not be opened, and refused the Services whose NodePorts
	// are not served, with why: each is said once.
	failed  map[Key]string
	refused map[string]string
}

// port is one open NodePort.
type port struct {
	target atomic.Pointer[Target]
	close  func()
}

func (s *server) sync(ctx context.Context, lister corelisters.ServiceLister) {
	list, err := lister.List(labels.Everything())
	if err != nil {
		s.log.Error(err, "listing Services")
		return
	}
	want, refused := Targets(list, s.proxy.ServiceCIDR)
	for svc, why := range refused {
		if s.refused[svc] != why {
			s.log.Info("not serving the NodePorts of a Service", "service", svc, "reason", why)
		}
	}
	s.refused = refused
	for k, p := range s.open {
		if _, ok := want[k]; !ok {
			p.close()
			delete(s.open, k)
			s.log.Info("closed a NodePort", "port", k.String())
		}
	}
	for k, t := range want {
		if p, ok := s.open[k]; ok {
			if *p.target.Load() != t {
				p.target.Store(&t)
				s.log.Info("a NodePort leads elsewhere", "port", k.String(), "service", t.Service, "to", t.Addr.String())
			}
			continue
		}
		p, err := s.listen(ctx, k, t)
		if err != nil {
			if s.failed[k] != err.Error() {
				s.log.Error(err, "cannot serve a NodePort", "port", k.String(), "service", t.Service)
			}
			s.failed[k] = err.Error()
			continue
		}
		delete(s.failed, k)
		s.open[k] = p
		s.log.Info("serving a NodePort", "port", k.String(), "service", t.Service, "to", t.Addr.String())
	}
	maps.DeleteFunc(s.failed, func(k Key, _ string) bool { _, ok := want[k]; return !ok })
}

func (s *server) closeAll() {
	for _, p := range s.open {
		p.close()
	}
}

// listen opens port k and serves it until it is closed.
func (s *server) listen(ctx context.Context, k Key, t Target) (*port, error) {
	addr := net.JoinHostPort(s.proxy.ListenHost, strconv.Itoa(int(k.Port)))
	p := &port{}
	p.target.Store(&t)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	switch k.Protocol {
	case corev1.ProtocolTCP:
		l, err := net.Listen("tcp", addr)
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() { s.serveTCP(ctx, l, p) })
		p.close = func() { cancel(); l.Close(); wg.Wait() }
	case corev1.ProtocolUDP:
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() { s.serveUDP(ctx, c, p) })
		p.close = func() { cancel(); c.Close(); wg.Wait() }
	default:
		cancel()
		return nil, fmt.Errorf("protocol %s is not served", k.Protocol)
	}
	return p, nil
}

// serveTCP passes each connection to the port's target until l is closed.
func (s *server) serveTCP(ctx context.Context, l net.Listener, p *port) {
	dialer := net.Dialer{Timeout: s.proxy.DialTimeout}
	open := make(chan struct{}, s.proxy.MaxConnections)
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Error(err, "accepting on a NodePort", "port", l.Addr().String())
			}
			return
		}
		select {
		case open <- struct{}{}:
		default:
			s.log.V(2).Info("a NodePort serves as many connections as it may; closing a new one", "port", l.Addr().String(), "max", s.proxy.MaxConnections)
			conn.Close()
			continue
		}
		go func() {
			defer func() { <-open }()
			defer conn.Close()
			t := p.target.Load()
			up, err := dialer.DialContext(ctx, "tcp", t.Addr.String())
			if err != nil {
				s.log.V(2).Info("connection to a NodePort's Service failed", "service", t.Service, "err", err)
				return
			}
			defer up.Close()
			splice(conn.(*net.TCPConn), up.(*net.TCPConn))
		}()
	}
}

// splice copies both ways until both directions are done, passing on each side's end of
// writing as a half close.
func splice(a, b *net.TCPConn) {
	var wg sync.WaitGroup
	one := func(dst, src *net.TCPConn) {
		_, _ = io.Copy(dst, src)
		_ = dst.CloseWrite()
	}
	wg.Go(func() { one(a, b) })
	one(b, a)
	wg.Wait()
}

// serveUDP passes each client's datagrams to the port's target over a socket of the client's
// own, and the answers back, until c is closed; a flow ends after UDPIdle without datagrams.
func (s *server) serveUDP(ctx context.Context, c net.PacketConn, p *port) {
	var mu sync.Mutex
	flows := map[string]net.Conn{}
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, f := range flows {
			f.Close()
		}
	}()
	buf := make([]byte, 64*1024)
	for {
		n, client, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				s.log.Error(err, "reading a UDP NodePort", "port", c.LocalAddr().String())
			}
			return
		}
		mu.Lock()
		flow, ok := flows[client.String()]
		if !ok && len(flows) >= s.proxy.MaxFlows {
			mu.Unlock()
			continue // a datagram of a new flow, past the bound: dropped, as by a full conntrack table
		}
		if !ok {
			t := p.target.Load()
			if flow, err = net.Dial("udp", t.Addr.String()); err != nil {
				mu.Unlock()
				s.log.V(2).Info("UDP flow to a NodePort's Service failed", "service", t.Service, "err", err)
				continue
			}
			flows[client.String()] = flow
			go func() {
				back := make([]byte, 64*1024)
				for {
					_ = flow.SetReadDeadline(time.Now().Add(s.proxy.UDPIdle))
					n, err := flow.Read(back)
					if err != nil {
						break
					}
					if _, err := c.WriteTo(back[:n], client); err != nil {
						break
					}
				}
				mu.Lock()
				delete(flows, client.String())
				mu.Unlock()
				flow.Close()
			}()
		}
		mu.Unlock()
		_ = flow.SetReadDeadline(time.Now().Add(s.proxy.UDPIdle))
		_, _ = flow.Write(buf[:n])
	}
}
