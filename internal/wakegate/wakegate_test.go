package wakegate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kubenest-io/kubenest/pkg/pki"
)

// tenantPKI is a tenant's certificates as the gateway and its apiserver use them, and a
// stranger's client certificate.
type tenantPKI struct {
	creds           *Credentials
	frontProxyCAs   *x509.CertPool
	admin, stranger tls.Certificate
	node            tls.Certificate
	serving         tls.Certificate
	clientRoots     *x509.CertPool
}

func newTenantPKI(t *testing.T) *tenantPKI {
	t.Helper()
	now := time.Now()
	must := func(kp *pki.KeyPair, err error) *pki.KeyPair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	ca := must(pki.NewCA("tenant-ca", now))
	fpCA := must(pki.NewCA("tenant-front-proxy-ca", now))
	otherCA := must(pki.NewCA("another-tenant-ca", now))
	serving := must(ca.Issue(pki.CertSpec{CommonName: "kube-apiserver", DNSNames: []string{"kubernetes"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: pki.UsageServer}, now))
	fp := must(fpCA.Issue(pki.CertSpec{CommonName: "front-proxy-client", Usage: pki.UsageClient}, now))
	admin := must(ca.Issue(pki.CertSpec{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}, Usage: pki.UsageClient}, now))
	node := must(ca.Issue(pki.CertSpec{CommonName: "system:node:worker-1", Organization: []string{"system:nodes"}, Usage: pki.UsageClient}, now))
	stranger := must(otherCA.Issue(pki.CertSpec{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}, Usage: pki.UsageClient}, now))
	pool := func(c *x509.Certificate) *x509.CertPool {
		p := x509.NewCertPool()
		p.AddCert(c)
		return p
	}
	return &tenantPKI{
		creds: &Credentials{Serving: serving.TLSCertificate(), ClientCAs: pool(ca.Cert), FrontProxy: fp.TLSCertificate(),
			APIServerCAs: pool(ca.Cert), APIServerName: "kubernetes"},
		frontProxyCAs: pool(fpCA.Cert), clientRoots: pool(ca.Cert),
		admin: admin.TLSCertificate(), stranger: stranger.TLSCertificate(), node: node.TLSCertificate(), serving: serving.TLSCertificate(),
	}
}

// apiserver answers who it takes the request to be from, as kube-apiserver decides it: the
// X-Remote-* headers only from its front-proxy client, else a bearer token, else anonymous.
func (p *tenantPKI) apiserver(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who := "anonymous"
		if certs := r.TLS.PeerCertificates; len(certs) > 0 {
			if _, err := certs[0].Verify(x509.VerifyOptions{Roots: p.frontProxyCAs, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
				who = "user=" + r.Header.Get("X-Remote-User") + " groups=" + strings.Join(r.Header.Values("X-Remote-Group"), ",")
			} else {
				who = "a certificate it does not trust"
			}
		} else if token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			who = "token=" + token
			if r.Header.Get("X-Remote-User") != "" {
				who += " with X-Remote-User " + r.Header.Get("X-Remote-User")
			}
		}
		fmt.Fprintf(w, "%s from %s", who, r.Header.Get("X-Forwarded-For"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{p.serving}, ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// client trusts the tenant's CA, as its kubeconfig does, and presents certs. Its TLS
// handshake gives up after a second: what matters is that the wake does not happen in it.
func (p *tenantPKI) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: p.clientRoots, Certificates: certs},
		TLSHandshakeTimeout: time.Second, DisableKeepAlives: true, ForceAttemptHTTP2: true,
	}}
}

// serve starts g and has it hold tenant with p's certificates; it returns the tenant's
// address at the gateway.
func (p *tenantPKI) serve(t *testing.T, ctx context.Context, g *Gateway, tenant types.NamespacedName) string {
	t.Helper()
	g.Start(ctx)
	return p.hold(t, g, tenant)
}

// hold has the started g hold tenant with p's certificates; it returns the tenant's address
// at the gateway.
func (p *tenantPKI) hold(t *testing.T, g *Gateway, tenant types.NamespacedName) string {
	t.Helper()
	port, err := g.Hold(tenant)
	if err != nil {
		t.Fatal(err)
	}
	g.SetCredentials(tenant, p.creds)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
}

func get(t *testing.T, c *http.Client, url string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestWakeAndPass: a request to a held tenant wakes it, waits (past its client's handshake
// timeout) until its apiserver is there, and reaches it as the client: a trusted client
// certificate as its user, anything else as what the apiserver makes of it; forged X-Remote-*
// headers never pass. A released tenant's port serves for its grace, waking nothing, then
// refuses connections.
func TestWakeAndPass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newTenantPKI(t)
	backend := p.apiserver(t)
	var wakes atomic.Int32
	up := time.Now().Add(1500 * time.Millisecond) // longer than the clients' TLS handshake timeout
	tenant := types.NamespacedName{Namespace: "tenants", Name: "team-a"}
	g := &Gateway{
		Address:      "127.0.0.1",
		Timeout:      10 * time.Second,
		ReleaseGrace: 200 * time.Millisecond,
		Wake: func(_ context.Context, key types.NamespacedName, from string) error {
			if key != tenant || from == "" {
				t.Errorf("woke %v for %q", key, from)
			}
			wakes.Add(1)
			return nil
		},
		Backend: func(context.Context, types.NamespacedName) (string, bool) {
			return backend.Listener.Addr().String(), time.Now().After(up)
		},
	}
	addr := p.serve(t, ctx, g, tenant)
	if again, _ := g.Hold(tenant); net.JoinHostPort("127.0.0.1", strconv.Itoa(int(again))) != addr {
		t.Errorf("holding the tenant again listens on %d, want the same port as %s", again, addr)
	}
	url := "https://" + addr + "/api"
	forged := map[string]string{"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}

	code, body := get(t, p.client(p.admin), url, map[string]string{"X-Remote-Group": "forged"})
	if code != http.StatusOK || body != "user=kubernetes-admin groups=system:masters from 127.0.0.1" {
		t.Errorf("the tenant's admin through the gateway: %d %q", code, body)
	}
	if time.Now().Before(up) {
		t.Errorf("answered before the tenant was up")
	}
	code, body = get(t, p.client(), url, map[string]string{"Authorization": "Bearer sa-token", "X-Remote-User": "system:admin"})
	if code != http.StatusOK || body != "token=sa-token from 127.0.0.1" {
		t.Errorf("a bearer token with a forged X-Remote-User through the gateway: %d %q", code, body)
	}
	code, body = get(t, p.client(p.stranger), url, forged)
	if code != http.StatusOK || body != "anonymous from 127.0.0.1" {
		t.Errorf("another CA's client certificate with forged X-Remote-* headers through the gateway: %d %q", code, body)
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes, want 1", n)
	}

	g.Release(tenant)
	// For the grace, the port still serves (nodes' kube-proxies still send connections here),
	// and wakes nothing: the tenant is awake, or was put to sleep after such a connection.
	if code, body := get(t, p.client(p.admin), url, nil); code != http.StatusOK || !strings.HasPrefix(body, "user=kubernetes-admin") {
		t.Errorf("a request in the release grace: %d %q", code, body)
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes after a request in the release grace, want still 1", n)
	}
	time.Sleep(400 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("a released tenant's port still accepts connections")
	}
}

// TestGiveUp: a tenant that does not wake in time has its held request answered 503 with a
// Retry-After; a connection that ends no TLS handshake (a port check, plain HTTP) wakes
// nothing.
func TestGiveUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newTenantPKI(t)
	var wakes atomic.Int32
	tenant := types.NamespacedName{Namespace: "tenants", Name: "never"}
	g := &Gateway{
		Address: "127.0.0.1",
		Timeout: 500 * time.Millisecond,
		Wake: func(context.Context, types.NamespacedName, string) error {
			wakes.Add(1)
			return nil
		},
		Backend: func(context.Context, types.NamespacedName) (string, bool) { return "", false },
	}
	addr := p.serve(t, ctx, g, tenant)

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	code, body := get(t, &http.Client{Timeout: 5 * time.Second}, "http://"+addr+"/api", nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "HTTPS") {
		t.Errorf("plain HTTP to the gateway: %d %q", code, body)
	}
	if n := wakes.Load(); n != 0 {
		t.Errorf("a port check and a plain HTTP request woke the tenant %d times", n)
	}

	start := time.Now()
	resp, err := p.client(p.admin).Get("https://" + addr + "/api")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || time.Since(start) > 3*time.Second {
		t.Errorf("a request for a tenant that never woke: %d, Retry-After %q after %s; want 503 with a Retry-After after about 500ms",
			resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(start))
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes, want 1 (the request)", n)
	}
}

// jwt is an unsigned token with subject sub: the gateway reads, never verifies, its claims.
func jwt(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(`{"iss":"https://kubernetes.default.svc.cluster.local","sub":"`+sub+`"}`)) + ".c2ln"
}

// TestOnlyPeopleWake: the tenant's own components (a lent node's kubelet, ServiceAccounts, a
// joining node's bootstrap token), anonymous clients and other CAs' certificates are told to
// come back (503, Retry-After) without waking a sleeping tenant; a person's token wakes it.
func TestOnlyPeopleWake(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newTenantPKI(t)
	backend := p.apiserver(t)
	var wakes atomic.Int32
	tenant := types.NamespacedName{Namespace: "tenants", Name: "lent"}
	g := &Gateway{
		Address: "127.0.0.1",
		Timeout: 10 * time.Second,
		Wake: func(context.Context, types.NamespacedName, string) error {
			wakes.Add(1)
			return nil
		},
		Backend: func(context.Context, types.NamespacedName) (string, bool) {
			return backend.Listener.Addr().String(), wakes.Load() > 0
		},
	}
	url := "https://" + p.serve(t, ctx, g, tenant) + "/api"
	for _, c := range []struct {
		who    string
		client *http.Client
		token  string
	}{
		{"a lent node's kubelet", p.client(p.node), ""},
		{"a ServiceAccount", p.client(), jwt("system:serviceaccount:default:robot")},
		{"a joining node's bootstrap token", p.client(), "abcdef.0123456789abcdef"},
		{"an anonymous client", p.client(), ""},
		{"another CA's admin", p.client(p.stranger), ""},
	} {
		header := map[string]string{}
		if c.token != "" {
			header["Authorization"] = "Bearer " + c.token
		}
		if code, body := get(t, c.client, url, header); code != http.StatusServiceUnavailable || !strings.Contains(body, "a request of a person wakes it") {
			t.Errorf("%s asking the sleeping tenant: %d %q, want 503 saying a person's request wakes it", c.who, code, body)
		}
	}
	if n := wakes.Load(); n != 0 {
		t.Fatalf("%d wakes by requests of no person", n)
	}
	code, body := get(t, p.client(), url, map[string]string{"Authorization": "Bearer " + jwt("alice@example.com")})
	if code != http.StatusOK || !strings.HasPrefix(body, "token=") || wakes.Load() != 1 {
		t.Errorf("a person's token: %d %q after %d wakes; want it to wake the tenant and be answered", code, body, wakes.Load())
	}
	// Once woken, the tenant's components are served too.
	if code, body := get(t, p.client(p.node), url, nil); code != http.StatusOK || body != "user=system:node:worker-1 groups=system:nodes from 127.0.0.1" {
		t.Errorf("the lent node's kubelet once the tenant is up: %d %q", code, body)
	}
}

// TestWokenByHand: a tenant woken without a request here (spec.sleep.asleep: false) and
// released serves its components for the grace too: a kept-alive connection a node's
// kube-proxy sent here before the release (the operator's own probe) is passed on, not told to
// come back until the port closes.
func TestWokenByHand(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newTenantPKI(t)
	backend := p.apiserver(t)
	var wakes atomic.Int32
	tenant := types.NamespacedName{Namespace: "tenants", Name: "by-hand"}
	g := &Gateway{
		Address:      "127.0.0.1",
		Timeout:      10 * time.Second,
		ReleaseGrace: time.Minute,
		Wake: func(context.Context, types.NamespacedName, string) error {
			wakes.Add(1)
			return nil
		},
		Backend: func(context.Context, types.NamespacedName) (string, bool) {
			return backend.Listener.Addr().String(), true
		},
	}
	url := "https://" + p.serve(t, ctx, g, tenant) + "/api"
	kubelet := p.client(p.node)
	if code, _ := get(t, kubelet, url, nil); code != http.StatusServiceUnavailable {
		t.Fatalf("a component asking the sleeping tenant: %d, want 503", code)
	}
	g.Release(tenant) // woken by hand: one of its apiservers is Ready
	if code, body := get(t, kubelet, url, nil); code != http.StatusOK || body != "user=system:node:worker-1 groups=system:nodes from 127.0.0.1" {
		t.Errorf("a component on the same connection once the tenant was woken by hand: %d %q, want it passed on", code, body)
	}
	if n := wakes.Load(); n != 0 {
		t.Errorf("%d wakes by the gateway, want none (the tenant woke by hand)", n)
	}
}

// TestConnectionBound: connections that hold a tenant's port without a word (a flood) take
// at most MaxConnections of it; a client is served once one of them goes, and the other
// tenants' ports are not touched.
func TestConnectionBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := newTenantPKI(t)
	backend := p.apiserver(t)
	g := &Gateway{
		Address:        "127.0.0.1",
		Timeout:        10 * time.Second,
		MaxConnections: 2,
		Wake:           func(context.Context, types.NamespacedName, string) error { return nil },
		Backend: func(context.Context, types.NamespacedName) (string, bool) {
			return backend.Listener.Addr().String(), true
		},
	}
	flooded := p.serve(t, ctx, g, types.NamespacedName{Namespace: "tenants", Name: "flooded"})
	other := p.hold(t, g, types.NamespacedName{Namespace: "tenants", Name: "other"})
	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", flooded)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(100 * time.Millisecond) // both accepted
	if _, err := p.client(p.admin).Get("https://" + flooded + "/api"); err == nil {
		t.Errorf("a third connection was served while two silent ones held the port")
	}
	if code, _ := get(t, p.client(p.admin), "https://"+other+"/api", nil); code != http.StatusOK {
		t.Errorf("another tenant's port during the flood: %d", code)
	}
	silent[0].Close()
	if code, _ := get(t, p.client(p.admin), "https://"+flooded+"/api", nil); code != http.StatusOK {
		t.Errorf("once a silent connection went: %d", code)
	}
}
