// Package wakegate answers for sleeping tenants: while a tenant sleeps, its apiserver Service
// leads here (an EndpointSlice of the operator's), and the first request wakes the tenant, is
// held until its apiserver is Ready, then passed to it.
//
// The gateway ends TLS itself, with the tenant apiserver's own serving certificate, so a
// client's TLS handshake ends at once however long the wake takes (client-go gives up on a
// handshake after 10 s); the request then waits, as a slow apiserver's would. The gateway
// tells the apiserver who asks exactly as the apiserver would have found out itself:
//   - a client certificate the apiserver would accept (signed by what its --client-ca-file
//     holds, for client use) becomes the user and groups of the request, sent as X-Remote-User
//     and X-Remote-Group over a connection authenticated with the tenant's front-proxy client
//     certificate (the apiserver's --requestheader-* flags);
//   - anything else (a bearer token, no credential, a certificate of another CA) goes over a
//     connection with no client certificate, so the apiserver judges the request's own
//     Authorization header, or takes it as anonymous.
//
// Every X-Remote-* header a client sends is dropped: only the gateway names users.
//
// Only a request of a person wakes the tenant (package activity says who is not): one with a
// client certificate the tenant trusts that names no component of the tenant, or with a
// bearer token that is not a ServiceAccount's or a bootstrap token. The kubelets of its lent
// nodes, its pods' ServiceAccounts, anonymous clients and certificates of other CAs get 503
// with Retry-After while it sleeps, and wait with the others while it wakes.
package wakegate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	authuser "k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"

	"github.com/kubenest-io/kubenest/pkg/activity"
)

// maxHeld bounds the requests held for one tenant at a time; more are answered 503 with
// Retry-After, which client-go retries by itself.
const maxHeld = 256

// defaultMaxConnections bounds the connections one tenant's port has open at a time (Gateway's
// MaxConnections when zero). Whoever reaches a tenant's endpoint can open connections, and
// each holds a file descriptor of the operator, and a TLS handshake its CPU: without a bound,
// a flood at one tenant's port would take them from every other tenant's, and from the
// operator itself. Past the bound, new connections wait in the kernel's backlog until one
// closes; a connection is closed 30 s into a handshake or request headers that did not end,
// or after 90 s idle between requests.
const defaultMaxConnections = 1024

// remoteHeaderPrefix starts every header the tenant apiserver takes an identity from
// (--requestheader-username-headers, -group-headers and -extra-headers-prefix).
const remoteHeaderPrefix = "X-Remote-"

// Credentials are what the gateway needs to stand in for a tenant's apiserver.
type Credentials struct {
	// Serving is the apiserver's serving certificate: clients verify the gateway as they
	// verify the apiserver.
	Serving tls.Certificate
	// ClientCAs are what the apiserver trusts for client certificates (its --client-ca-file).
	ClientCAs *x509.CertPool
	// FrontProxy is the client certificate the apiserver takes X-Remote-* identities from.
	FrontProxy tls.Certificate
	// APIServerCAs and APIServerName verify the apiserver the gateway passes requests to.
	APIServerCAs  *x509.CertPool
	APIServerName string
}

// same says whether c and o hold the same certificates.
func (c *Credentials) same(o *Credentials) bool {
	first := func(t tls.Certificate) []byte {
		if len(t.Certificate) == 0 {
			return nil
		}
		return t.Certificate[0]
	}
	return bytes.Equal(first(c.Serving), first(o.Serving)) && bytes.Equal(first(c.FrontProxy), first(o.FrontProxy)) &&
		c.ClientCAs.Equal(o.ClientCAs) && c.APIServerCAs.Equal(o.APIServerCAs) && c.APIServerName == o.APIServerName
}

// Gateway listens on one port per tenant it holds.
type Gateway struct {
	// Address is the IP the host's Services reach the gateway at: the operator pod's.
	Address string
	// Wake wakes the tenant; from is the request's remote address, for the record.
	Wake func(ctx context.Context, tenant types.NamespacedName, from string) error
	// Backend is the address of one Ready apiserver of the tenant, once there is one.
	Backend func(ctx context.Context, tenant types.NamespacedName) (string, bool)
	// Timeout bounds how long a request is held for the tenant to wake.
	Timeout time.Duration
	// ReleaseGrace is how long a released tenant's port still serves: until every node's
	// kube-proxy has stopped sending the tenant's connections here. Zero means 30 s.
	ReleaseGrace time.Duration
	// MaxConnections bounds the connections open at a time on one tenant's port; zero means
	// defaultMaxConnections.
	MaxConnections int

	ctx       context.Context
	mu        sync.Mutex
	listeners map[types.NamespacedName]*listener
}

// listener is a tenant's port and what it serves with.
type listener struct {
	net.Listener
	srv *http.Server
	// closing is set once the tenant is released.
	closing *time.Timer
	creds   atomic.Pointer[transports]
	// backend is the apiserver requests went to last; empty until the tenant answered.
	backend atomic.Pointer[string]
	// woken is set once a request woke the tenant, or it was released: from then on every
	// request waits for it.
	woken atomic.Bool
	held  chan struct{}
}

// transports are a tenant's credentials and the connections made with them: asUser carries
// the front-proxy certificate, asItself none.
type transports struct {
	*Credentials
	asUser, asItself *http.Transport
}

// Start sets the context the gateway's connections live in; every tenant's port closes
// when it ends.
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
			_ = l.srv.Close()
			delete(g.listeners, key)
		}
	})
}

// Hold listens for tenant's connections, if it does not yet, and returns the port. It serves
// once SetCredentials gave it the tenant's certificates.
func (g *Gateway) Hold(tenant types.NamespacedName) (int32, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx == nil || g.ctx.Err() != nil {
		return 0, errors.New("the wake gateway is not running")
	}
	if l, ok := g.listeners[tenant]; ok {
		if l.closing != nil {
			// Asleep again: the apiserver requests went to is gone.
			l.closing.Stop()
			l.closing = nil
			l.backend.Store(nil)
			l.woken.Store(false)
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
	logger := klog.FromContext(g.ctx).WithValues("virtualCluster", tenant.String())
	maxConns := g.MaxConnections
	if maxConns <= 0 {
		maxConns = defaultMaxConnections
	}
	l := &listener{Listener: netutil.LimitListener(nl, maxConns), held: make(chan struct{}, maxHeld)}
	l.srv = &http.Server{
		Handler:           g.handler(tenant, l, logger),
		ReadHeaderTimeout: 30 * time.Second, // also bounds the TLS handshake
		IdleTimeout:       90 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return klog.NewContext(g.ctx, logger) },
		// Handshakes that fail (a client that does not trust the tenant, a port check, plain
		// HTTP) are the client's business, logged only at V(1).
		ErrorLog: log.New(klogWriter{logger.V(1)}, "", 0),
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			// As the apiserver: a client certificate is asked for, and judged per request.
			ClientAuth: tls.RequestClientCert,
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				if t := l.creds.Load(); t != nil {
					return &t.Serving, nil
				}
				return nil, errors.New("the wake gateway has no certificate for the tenant yet")
			},
		},
	}
	g.listeners[tenant] = l
	logger.Info("the wake gateway holds the tenant's endpoint", "address", l.Addr().String())
	go func() { _ = l.srv.ServeTLS(l, "", "") }()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}

// SetCredentials gives a held tenant's port the certificates it serves and passes requests
// with; the operator calls it with what it has just issued or checked.
func (g *Gateway) SetCredentials(tenant types.NamespacedName, c *Credentials) {
	g.mu.Lock()
	l, ok := g.listeners[tenant]
	g.mu.Unlock()
	if !ok {
		return
	}
	old := l.creds.Load()
	if old != nil && old.same(c) {
		return
	}
	transport := func(certs ...tls.Certificate) *http.Transport {
		return &http.Transport{
			TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.APIServerCAs, ServerName: c.APIServerName, Certificates: certs},
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 10 * time.Second,
			MaxIdleConnsPerHost: 16,
			IdleConnTimeout:     90 * time.Second,
		}
	}
	l.creds.Store(&transports{Credentials: c, asUser: transport(c.FrontProxy), asItself: transport()})
	if old != nil {
		old.asUser.CloseIdleConnections()
		old.asItself.CloseIdleConnections()
	}
}

// Release stops listening for tenant after ReleaseGrace (Hold again keeps it); meanwhile every
// request is passed to its apiserver. Then requests already passed on get a minute more;
// clients then reconnect, to the apiserver itself.
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
	// The tenant is awake, however it woke (spec.sleep.asleep: false wakes it without a
	// request here): for the grace every request is passed on, the tenant's components' too.
	// Told to come back instead, a client whose kept-alive connection a node's kube-proxy had
	// sent here (the operator's own probe of the tenant, for one) would be told so until the
	// port closes, 30 s after the tenant was Ready.
	l.woken.Store(true)
	var timer *time.Timer
	timer = time.AfterFunc(grace, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.listeners[tenant] != l || l.closing != timer {
			return
		}
		delete(g.listeners, tenant)
		go func() {
			// Shutdown closes the port and idle connections (HTTP/2 ones are told to go), and
			// waits for requests under way: watches are cut after a minute.
			ctx, cancel := context.WithTimeout(g.ctx, time.Minute)
			defer cancel()
			if err := l.srv.Shutdown(ctx); err != nil {
				_ = l.srv.Close()
			}
		}()
	})
	l.closing = timer
}

// handler serves tenant's requests: the first ones wake it and wait for its apiserver; all
// are passed to it.
func (g *Gateway) handler(tenant types.NamespacedName, l *listener, logger klog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		t := l.creds.Load() // set: the handshake needed it
		user := clientUser(req, t.ClientCAs)
		addr := ""
		if a := l.backend.Load(); a != nil {
			addr = *a
		} else {
			person := fromPerson(req, user)
			if !person && !l.woken.Load() {
				unavailable(w, "the tenant sleeps; a request of a person wakes it, not one of its own components or an anonymous one")
				return
			}
			select {
			case l.held <- struct{}{}:
				defer func() { <-l.held }()
			default:
				unavailable(w, fmt.Sprintf("%d requests already wait for the tenant to wake", maxHeld))
				return
			}
			var err error
			if addr, err = g.wakeAndWait(req.Context(), tenant, l, req.RemoteAddr, person); err != nil {
				logger.Info("a request for the sleeping tenant was not served", "from", req.RemoteAddr, "reason", err.Error())
				unavailable(w, err.Error())
				return
			}
		}
		transport := t.asItself
		if user != nil {
			transport = t.asUser
		}
		proxy := &httputil.ReverseProxy{
			Transport:     transport,
			FlushInterval: -1, // watches and logs stream
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(&url.URL{Scheme: "https", Host: addr})
				pr.SetXForwarded() // the apiserver's audit records the client's address
				for name := range pr.Out.Header {
					if strings.HasPrefix(name, remoteHeaderPrefix) {
						pr.Out.Header.Del(name)
					}
				}
				if user != nil {
					pr.Out.Header.Set("X-Remote-User", user.Subject.CommonName)
					for _, group := range user.Subject.Organization {
						pr.Out.Header.Add("X-Remote-Group", group)
					}
				}
			},
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				if cur := l.backend.Load(); cur != nil && *cur == addr {
					l.backend.CompareAndSwap(cur, nil) // the next request looks for an apiserver again
				}
				logger.Info("passing a request to the tenant's apiserver failed", "apiserver", addr, "err", err.Error())
				unavailable(w, "the tenant's apiserver did not answer")
			},
		}
		proxy.ServeHTTP(w, req)
	})
}

// wakeAndWait wakes the tenant for a request of a person, unless its port is released (the
// tenant is awake, or was put to sleep again after this request's client connected), and
// waits for a Ready apiserver.
func (g *Gateway) wakeAndWait(ctx context.Context, tenant types.NamespacedName, l *listener, from string, person bool) (string, error) {
	g.mu.Lock()
	wake := person && l.closing == nil
	g.mu.Unlock()
	if wake {
		if err := g.Wake(ctx, tenant, from); err != nil {
			return "", fmt.Errorf("waking the tenant failed: %w", err)
		}
		l.woken.Store(true)
	}
	start := time.Now()
	wait, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	for {
		if addr, ok := g.Backend(wait, tenant); ok {
			l.backend.Store(&addr)
			klog.FromContext(ctx).Info("the tenant's apiserver answers; requests held for it go on", "held", time.Since(start).Round(time.Millisecond), "apiserver", addr)
			return addr, nil
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return "", errors.New("the client went away while the tenant woke")
			}
			return "", fmt.Errorf("the tenant did not wake within %s", g.Timeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// clientUser is the request's client certificate if the apiserver would take it as the
// user: signed, for client use, by what it trusts, and naming a user.
func clientUser(req *http.Request, roots *x509.CertPool) *x509.Certificate {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil
	}
	certs := req.TLS.PeerCertificates
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, c := range certs[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := certs[0].Verify(opts); err != nil || certs[0].Subject.CommonName == "" {
		return nil
	}
	return certs[0]
}

// fromPerson says whether a request may wake the tenant: its client certificate (user, if
// the tenant trusts it) names no component of the tenant, or, without one, its bearer token is
// neither a ServiceAccount's nor a bootstrap token. Tokens are not verified here (the
// apiserver does that): a forged one can only make the gateway not wake the tenant, or wake it
// for a request the apiserver then refuses, as a request with a forged token does awake.
func fromPerson(req *http.Request, user *x509.Certificate) bool {
	if user != nil {
		return !activity.Component(&authuser.DefaultInfo{Name: user.Subject.CommonName, Groups: user.Subject.Organization})
	}
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" || bootstrapToken.MatchString(token) {
		return false // anonymous, a certificate of another CA, or a joining node
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return true
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return true
	}
	var claims struct {
		Subject string `json:"sub"`
	}
	return json.Unmarshal(payload, &claims) != nil || !strings.HasPrefix(claims.Subject, "system:serviceaccount:")
}

// bootstrapToken is the form of a bootstrap token (kubeadm's), which joining nodes use.
var bootstrapToken = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

// unavailable answers 503 as the apiserver does, with a Retry-After that client-go honours.
func unavailable(w http.ResponseWriter, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "1")
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure, Message: "the wake gateway: " + message,
		Reason: metav1.StatusReasonServiceUnavailable, Code: http.StatusServiceUnavailable,
	})
}

// klogWriter sends the http.Server's own log lines to a logger.
type klogWriter struct{ logger klog.Logger }

func (k klogWriter) Write(p []byte) (int, error) {
	k.logger.Info(strings.TrimSpace(string(p)))
	return len(p), nil
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
