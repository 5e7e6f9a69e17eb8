package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// A lone member starts at once although its advertised peer name does not resolve (yet): it
// dials no peer.
func TestLoneEtcdMemberDoesNotWaitForItsName(t *testing.T) {
	client, peer := testtenant.FreePort(t), testtenant.FreePort(t)
	cfg, wait, err := parseEtcdFlags([]string{
		"--name=m0", "--data-dir=" + t.TempDir(),
		"--initial-advertise-peer-urls=http://m0.peers.invalid:2380",
		"--initial-cluster=m0=http://m0.peers.invalid:2380",
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peer),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", client),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", client),
	})
	if err != nil {
		t.Fatal(err)
	}
	if wait < time.Minute {
		t.Fatalf("--wait-for-dns defaults to %s, want minutes", wait)
	}
	// etcd's own default, not 0 (which logs every request as expensive).
	if cfg.WarningUnaryRequestDuration != 300*time.Millisecond {
		t.Errorf("--warning-unary-request-duration defaults to %s, want etcd's 300ms", cfg.WarningUnaryRequestDuration)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runEtcd(ctx, cfg, wait) }()
	deadline := time.After(20 * time.Second)
	for {
		conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", client))
		if err == nil {
			conn.Close()
			break
		}
		select {
		case err := <-done:
			t.Fatalf("etcd stopped: %v", err)
		case <-deadline:
			t.Fatalf("etcd does not listen after 20 s: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("etcd: %v", err)
	}
}

// A lone member leads sooner: its election timeout defaults to loneElectionMs, unless set;
// members of several keep etcd's default.
func TestLoneMemberElectionTimeout(t *testing.T) {
	base := []string{"--name=m0", "--data-dir=" + t.TempDir(), "--initial-advertise-peer-urls=http://m0:2380"}
	for _, tt := range []struct {
		name string
		args []string
		want uint
	}{
		{"lone", []string{"--initial-cluster=m0=http://m0:2380"}, loneElectionMs},
		{"lone, set", []string{"--initial-cluster=m0=http://m0:2380", "--election-timeout=2000"}, 2000},
		{"three", []string{"--initial-cluster=m0=http://m0:2380,m1=http://m1:2380,m2=http://m2:2380"}, 1000},
	} {
		cfg, _, err := parseEtcdFlags(append(base, tt.args...))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if cfg.ElectionMs != tt.want {
			t.Errorf("%s: election timeout %d ms, want %d", tt.name, cfg.ElectionMs, tt.want)
		}
	}
}
