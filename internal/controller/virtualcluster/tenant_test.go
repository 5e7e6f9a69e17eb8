package virtualcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

// The published endpoint holds Ready back while it refuses connections or serves a certificate
// the tenant's CA did not issue for its address.
func TestCheckEndpoint(t *testing.T) {
	now := time.Now()
	must := func(kp *pki.KeyPair, err error) *pki.KeyPair {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return kp
	}
	ca := must(pki.NewCA("tenant-ca", now))
	other := must(pki.NewCA("another-ca", now))
	forAddress := must(ca.Issue(pki.CertSpec{CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: pki.UsageServer}, now))
	withoutAddress := must(ca.Issue(pki.CertSpec{CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP("10.96.0.1")}, Usage: pki.UsageServer}, now))
	ofAnotherCA := must(other.Issue(pki.CertSpec{CommonName: "kube-apiserver", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Usage: pki.UsageServer}, now))
	// What a certificate says is chosen by whoever answers at the endpoint: it must not reach the
	// VirtualCluster's status.
	chosenText := []string{"10.96.0.1", "another-ca"}
	serve := func(kp *pki.KeyPair) string {
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{kp.TLSCertificate()}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { _ = c.(*tls.Conn).Handshake(); _ = c.Close() }()
			}
		}()
		return l.Addr().String()
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusing := closed.Addr().String()
	_ = closed.Close()

	ctx := context.Background()
	direct := &Reconciler{}
	nodePort := func(hostPort string) controlplane.Exposure {
		return controlplane.Exposure{Address: "127.0.0.1", Endpoint: "https://" + hostPort}
	}
	if err := direct.checkEndpoint(ctx, nodePort(serve(forAddress)), ca.CertPEM()); err != nil {
		t.Errorf("an endpoint serving the tenant's certificate for its address: %v", err)
	}
	for name, tc := range map[string]struct {
		hostPort, says string
	}{
		"refusing":                         {refusing, "still refuses connections"},
		"serving a certificate without it": {serve(withoutAddress), "serves a certificate not valid for it yet (not issued for 127.0.0.1)"},
		"serving another CA's certificate": {serve(ofAnotherCA), "serves a certificate not valid for it yet (not issued by the tenant's CA)"},
	} {
		var notServing *endpointNotServingError
		err := direct.checkEndpoint(ctx, nodePort(tc.hostPort), ca.CertPEM())
		if !errors.As(err, &notServing) || notServing.endpoint != "https://"+tc.hostPort || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("an endpoint %s: %v; want an endpointNotServingError naming it and saying %q", name, err, tc.says)
		}
		for _, chosen := range chosenText {
			if err != nil && strings.Contains(err.Error(), chosen) {
				t.Errorf("an endpoint %s: %v repeats %q, which the served certificate chose", name, err, chosen)
			}
		}
	}

	unreachable := &Reconciler{Tenants: &tenantclient.Registry{Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no route to host")
	}}}
	if err := unreachable.checkEndpoint(ctx, nodePort(refusing), ca.CertPEM()); err != nil {
		t.Errorf("an endpoint the operator cannot reach: %v, want no error (nothing is known about it)", err)
	}
	dialed := false
	inCluster := &Reconciler{Tenants: &tenantclient.Registry{Dial: func(context.Context, string, string) (net.Conn, error) {
		dialed = true
		return nil, errors.New("unexpected")
	}}}
	if err := inCluster.checkEndpoint(ctx, controlplane.Exposure{Endpoint: "https://vc-apiserver.ns.svc:443"}, ca.CertPEM()); err != nil || dialed {
		t.Errorf("ClusterIP endpoint: %v, dialed %v; want nothing checked (the Service was probed)", err, dialed)
	}
}
