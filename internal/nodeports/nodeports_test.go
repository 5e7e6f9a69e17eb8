package nodeports

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// echoTCP answers each line with prefix and the line, on a free loopback port it returns.
func echoTCP(t *testing.T, prefix string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte(prefix + line))
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// echoUDP answers each datagram with prefix and the datagram, on a free loopback port.
func echoUDP(t *testing.T, prefix string) int {
	t.Helper()
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteTo(append([]byte(prefix), buf[:n]...), from)
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).Port
}

func freePort(t *testing.T) int32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func nodePortService(name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: clusterIP, Ports: ports},
	}
}

// ask sends line over network to the NodePort and returns the answer ("" when none came).
func ask(network string, port int32, line string) string {
	c, err := net.DialTimeout(network, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))), time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return ""
	}
	buf := make([]byte, 256)
	n, _ := c.Read(buf)
	return strings.TrimSpace(string(buf[:n]))
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if f() {
			return
		}
	}
	t.Fatal(what)
}

// TestProxy: a NodePort answers as its Service, over TCP and UDP; it follows the Service to a
// new port and closes with it; a Service whose ClusterIP is outside the tenant's range gets
// no port.
func TestProxy(t *testing.T) {
	tcpA, tcpB, udp := echoTCP(t, "a:"), echoTCP(t, "b:"), echoUDP(t, "u:")
	webPort, dnsPort, outsidePort := freePort(t), freePort(t), freePort(t)
	client := fake.NewClientset(
		nodePortService("web", "127.0.0.1", corev1.ServicePort{Port: int32(tcpA), NodePort: webPort}),
		nodePortService("dns", "127.0.0.1", corev1.ServicePort{Port: int32(udp), NodePort: dnsPort, Protocol: corev1.ProtocolUDP}),
		// Not the tenant's: another address of the host, say.
		nodePortService("outside", "127.0.0.2", corev1.ServicePort{Port: int32(tcpA), NodePort: outsidePort}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- (&Proxy{Client: client, ServiceCIDR: netip.MustParsePrefix("127.0.0.1/32"), ListenHost: "127.0.0.1"}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	eventually(t, "the TCP NodePort does not answer as its Service", func() bool { return ask("tcp", webPort, "hi") == "a:hi" })
	eventually(t, "the UDP NodePort does not answer as its Service", func() bool { return ask("udp", dnsPort, "q") == "u:q" })
	if got := ask("tcp", outsidePort, "hi"); got != "" {
		t.Errorf("a Service with a ClusterIP outside the tenant's range was served: %q", got)
	}

	svc := nodePortService("web", "127.0.0.1", corev1.ServicePort{Port: int32(tcpB), NodePort: webPort})
	if _, err := client.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the NodePort does not follow its Service to its new port", func() bool { return ask("tcp", webPort, "hi") == "b:hi" })

	if err := client.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the NodePort of a deleted Service is still open", func() bool {
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(webPort))))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

func TestTargets(t *testing.T) {
	cidr := netip.MustParsePrefix("10.254.3.0/24")
	lb := nodePortService("lb", "10.254.3.20", corev1.ServicePort{Port: 443, NodePort: 30443}, corev1.ServicePort{Port: 53, NodePort: 30053, Protocol: corev1.ProtocolUDP})
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	plain := nodePortService("plain", "10.254.3.21", corev1.ServicePort{Port: 80})
	plain.Spec.Type = corev1.ServiceTypeClusterIP
	got, refused := Targets([]*corev1.Service{lb, plain, nodePortService("away", "10.96.0.1", corev1.ServicePort{Port: 80, NodePort: 30080})}, cidr)
	want := map[Key]Target{
		{corev1.ProtocolTCP, 30443}: {"default/lb", netip.MustParseAddrPort("10.254.3.20:443")},
		{corev1.ProtocolUDP, 30053}: {"default/lb", netip.MustParseAddrPort("10.254.3.20:53")},
	}
	if len(got) != len(want) {
		t.Fatalf("targets %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s leads to %v, want %v", k, got[k], w)
		}
	}
	if !strings.Contains(refused["default/away"], "not in the tenant's Service range") {
		t.Errorf("a Service outside the range is not refused saying why: %v", refused)
	}
}

// TestProxyBounds: a port serves at most MaxConnections TCP connections and MaxFlows UDP flows
// at once, whoever opens them: past them a connection is closed and a new flow's datagram
// dropped, and the port serves again once some have ended.
func TestProxyBounds(t *testing.T) {
	tcp, udp := echoTCP(t, "a:"), echoUDP(t, "u:")
	webPort, dnsPort := freePort(t), freePort(t)
	client := fake.NewClientset(
		nodePortService("web", "127.0.0.1", corev1.ServicePort{Port: int32(tcp), NodePort: webPort}),
		nodePortService("dns", "127.0.0.1", corev1.ServicePort{Port: int32(udp), NodePort: dnsPort, Protocol: corev1.ProtocolUDP}),
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- (&Proxy{Client: client, ServiceCIDR: netip.MustParsePrefix("127.0.0.1/32"), ListenHost: "127.0.0.1",
			MaxConnections: 2, MaxFlows: 1, UDPIdle: time.Second}).Run(ctx)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	eventually(t, "the TCP NodePort does not answer", func() bool { return ask("tcp", webPort, "hi") == "a:hi" })

	// Two connections that say nothing hold the port's two places. One the proxy closes at
	// once (the last ask's place may not be free yet) is dialled again.
	var held []net.Conn
	for try := 0; len(held) < 2; try++ {
		if try == 20 {
			t.Fatalf("the TCP NodePort closed %d connections at once with %d held", try, len(held))
		}
		c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(webPort))))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); errors.Is(err, os.ErrDeadlineExceeded) {
			held = append(held, c)
			continue
		}
		c.Close()
	}
	eventually(t, "a third connection is served while two are held", func() bool { return ask("tcp", webPort, "hi") == "" })
	for _, c := range held {
		c.Close()
	}
	eventually(t, "the port does not serve again once the held connections end", func() bool { return ask("tcp", webPort, "hi") == "a:hi" })

	// One UDP flow, kept alive: another client's datagrams are dropped until it ends.
	keep, err := net.Dial("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(dnsPort))))
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	eventually(t, "the UDP NodePort does not answer", func() bool {
		_ = keep.SetDeadline(time.Now().Add(200 * time.Millisecond))
		_, _ = keep.Write([]byte("k\n"))
		buf := make([]byte, 64)
		n, _ := keep.Read(buf)
		return strings.TrimSpace(string(buf[:n])) == "u:k"
	})
	if got := ask("udp", dnsPort, "q"); got != "" {
		t.Errorf("a second UDP flow was served past the bound of one: %q", got)
	}
	keep.Close()
	eventually(t, "the UDP port does not serve a new flow once the first has ended", func() bool { return ask("udp", dnsPort, "q") == "u:q" })
}
