package wakegate

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestHoldWakeJoin: a connection to a held tenant wakes it, waits while its apiserver is not
// there, and is then joined to it; a released tenant's port refuses new connections while the
// joined one goes on.
func TestHoldWakeJoin(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The apiserver: echoes each line back.
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	go func() {
		for {
			c, err := backend.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					_, _ = c.Write([]byte("echo " + line))
				}
			}()
		}
	}()

	var wakes atomic.Int32
	up := time.Now().Add(300 * time.Millisecond) // the tenant takes a while to wake
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
			return backend.Addr().String(), time.Now().After(up)
		},
	}
	g.Start(ctx)
	port, err := g.Hold(tenant)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := g.Hold(tenant); again != port {
		t.Errorf("holding the tenant again listens on %d, want the same port %d", again, port)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// The client speaks first and waits, as a TLS client's hello does.
	if _, err := conn.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil || line != "echo hello\n" {
		t.Fatalf("through the gateway: %q, %v", line, err)
	}
	if time.Now().Before(up) {
		t.Errorf("answered before the tenant was up")
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes, want 1", n)
	}

	g.Release(tenant)
	// For the grace, the port still serves (nodes' kube-proxies still send connections here),
	// and wakes nothing: the tenant is awake, or was put to sleep after such a connection.
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("a just released tenant's port: %v", err)
	}
	_, _ = c.Write([]byte("late\n"))
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "echo late\n" {
		t.Errorf("a connection in the release grace: %q, %v", line, err)
	}
	c.Close()
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes after a connection in the release grace, want still 1", n)
	}
	time.Sleep(400 * time.Millisecond)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("a released tenant's port still accepts connections")
	}
	if _, err := conn.Write([]byte("still there\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "echo still there\n" {
		t.Errorf("the joined connection after the release: %q, %v", line, err)
	}
}

// TestGiveUp: a tenant that does not wake in time has its held connection closed; a
// connection that sends nothing (a port check) does not wake the tenant.
func TestGiveUp(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wakes atomic.Int32
	g := &Gateway{
		Address: "127.0.0.1",
		Timeout: 500 * time.Millisecond,
		Wake: func(context.Context, types.NamespacedName, string) error {
			wakes.Add(1)
			return nil
		},
		Backend: func(context.Context, types.NamespacedName) (string, bool) { return "", false },
	}
	g.Start(ctx)
	port, err := g.Hold(types.NamespacedName{Namespace: "tenants", Name: "never"})
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
	for _, say := range []string{"", "hello\n"} {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if say != "" {
			if _, err := conn.Write([]byte(say)); err != nil {
				t.Fatal(err)
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		if _, err := conn.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
			t.Errorf("held connection (sent %q) of a tenant that never woke: read %v after %s, want it closed after about 500ms", say, err, time.Since(start))
		}
		conn.Close()
		if say == "" && wakes.Load() != 0 {
			t.Errorf("a connection that sent nothing woke the tenant")
		}
	}
	if n := wakes.Load(); n != 1 {
		t.Errorf("%d wakes, want 1 (the connection that sent something)", n)
	}
}
