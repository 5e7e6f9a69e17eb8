// Package wakegate answers for sleeping tenants: while a tenant sleeps, its apiserver Service
// leads here (an EndpointSlice of the operator's), and the first connection wakes the tenant,
// is held until its apiserver is Ready, then joined to it byte for byte. The gateway reads
// nothing of the connection (TLS goes through untouched), so it holds no tenant key, and the
// client needs no retry: to it the first TLS handshake just takes as long as the wake.
package wakegate

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// maxHeld bounds the connections held for one tenant at a time.
const maxHeld = 256

// Gateway listens on one port per tenant it holds.
type Gateway struct {
	// Address is the IP the host's Services reach the gateway at: the operator pod's.
	Address string
	// Wake wakes the tenant; from is the connection's remote address, for the record.
	Wake func(ctx context.Context, tenant types.NamespacedName, from string) error
	// Backend is the address of one Ready apiserver of the tenant, once there is one.
	Backend func(ctx context.Context, tenant types.NamespacedName) (string, bool)
	// Timeout bounds how long a connection is held for the tenant to wake.
	Timeout time.Duration
	// ReleaseGrace is how long a released tenant's port still serves: until every node's
	// kube-proxy has stopped sending the tenant's connections here. Zero means 30 s.
	ReleaseGrace time.Duration

	ctx       context.Context
	mu        sync.Mutex
	listeners map[types.NamespacedName]*listener
}

// listener is a tenant's port; closing is set once the tenant is released.
type listener struct {
	net.Listener
	closing *time.Timer
}

// Start sets the context the gateway's connections live in; Stop of every tenant follows its end.
func (g *Gateway) Start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ctx = ctx
	context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for key, l := range g.listeners {
			if l.closing != nil {
				l.closing.Stop()
			}
			_ = l.Close()
			delete(g.listeners, key)
		}
	})
}

// Hold listens for tenant's connections, if it does not yet, and returns the port.
func (g *Gateway) Hold(tenant types.NamespacedName) (int32, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil || g.ctx.Err() != nil {
		return 0, errors.New("the wake gateway is not running")
	}
	if l, ok := g.listeners[tenant]; ok {
		if l.closing != nil {
			l.closing.Stop()
			l.closing = nil
		}
		return int32(l.Addr().(*net.TCPAddr).Port), nil
	}
	nl, err := net.Listen("tcp", net.JoinHostPort(g.Address, "0"))
	if err != nil {
		return 0, err
	}
	if g.listeners == nil {
		g.listeners = map[types.NamespacedName]*listener{}
	}
	l := &listener{Listener: nl}
	g.listeners[tenant] = l
	log := klog.FromContext(g.ctx).WithValues("virtualCluster", tenant.String())
	log.Info("the wake gateway holds the tenant's endpoint", "address", l.Addr().String())
	go func() {
		// Each held connection is a goroutine for up to Timeout: a flood of them is refused
		// past maxHeld, rather than growing the operator's memory.
		held := make(chan struct{}, maxHeld)
		for {
			conn, err := l.Accept()
			if err != nil {
				return // closed by Release
			}
			// A connection that comes while the port is released (the tenant is awake, the
			// nodes still send some here) is joined, and wakes nothing: the tenant may have
			// been put to sleep again meanwhile, and this connection is older than that.
			g.mu.Lock()
			wake := l.closing == nil
			g.mu.Unlock()
			select {
			case held <- struct{}{}:
				go func() {
					defer func() { <-held }()
					g.serve(klog.NewContext(g.ctx, log), tenant, conn, wake)
				}()
			default:
				log.V(1).Info("too many connections held for the tenant; closing one", "from", conn.RemoteAddr().String(), "held", maxHeld)
				_ = conn.Close()
			}
		}
	}()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}

// Release stops listening for tenant after ReleaseGrace (Hold again keeps it); connections
// held or joined already go on.
func (g *Gateway) Release(tenant types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.listeners[tenant]
	if !ok || l.closing != nil {
		return
	}
	grace := g.ReleaseGrace
	if grace == 0 {
		grace = 30 * time.Second
	}
	klog.FromContext(g.ctx).Info("the wake gateway releases the tenant's endpoint", "virtualCluster", tenant.String(), "closingIn", grace)
	var timer *time.Timer
	timer = time.AfterFunc(grace, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.listeners[tenant] == l && l.closing == timer {
			_ = l.Close()
			delete(g.listeners, tenant)
		}
	})
	l.closing = timer
}

// serve wakes the tenant (if wake), waits for a Ready apiserver and joins conn to it.
func (g *Gateway) serve(ctx context.Context, tenant types.NamespacedName, conn net.Conn, wake bool) {
	defer conn.Close()
	log := klog.FromContext(ctx).WithValues("from", conn.RemoteAddr().String())
	start := time.Now()
	// Only a connection that says something wakes the tenant (a client's TLS hello comes at
	// once): one that connects and closes, a port check such as the operator's own probe of
	// the endpoint, does not.
	_ = conn.SetReadDeadline(start.Add(g.Timeout))
	first := make([]byte, 16<<10)
	n, err := conn.Read(first)
	if n == 0 {
		log.V(1).Info("the connection ended before it sent anything; the tenant is not woken", "err", err)
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	if wake {
		if err := g.Wake(ctx, tenant, conn.RemoteAddr().String()); err != nil {
			log.Error(err, "waking the tenant for a connection failed; closing it")
			return
		}
	}
	wait, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	var backend net.Conn
	for backend == nil {
		if addr, ok := g.Backend(wait, tenant); ok {
			var d net.Dialer
			dial, dcancel := context.WithTimeout(wait, time.Second)
			backend, _ = d.DialContext(dial, "tcp", addr)
			dcancel()
		}
		if backend != nil {
			break
		}
		select {
		case <-wait.Done():
			log.Info("the tenant did not wake in time; closing the connection", "waited", time.Since(start).Round(time.Millisecond))
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	defer backend.Close()
	if _, err := backend.Write(first[:n]); err != nil {
		log.Error(err, "passing the connection's first bytes to the apiserver failed")
		return
	}
	log.Info("connection held while the tenant woke, now joined to its apiserver", "held", time.Since(start).Round(time.Millisecond), "apiserver", backend.RemoteAddr().String())
	join(conn, backend)
}

// join copies both ways until one side ends, then ends the other.
func join(a, b net.Conn) {
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(a, b)
	go pipe(b, a)
	<-done
	<-done
}

// readyzClient asks an apiserver's /readyz, which answers anyone (system:public-info-viewer).
// It sends no credential and reads only the status code, so the server's certificate is not
// checked.
var readyzClient = &http.Client{
	Timeout:   time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}, //nolint:gosec // see above
}

// Ready says whether the apiserver at addr (host:port) answers /readyz with 200: sooner than
// its pod's readiness probe, whose period is seconds.
func Ready(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := readyzClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}
