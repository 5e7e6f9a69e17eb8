package main

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func TestWaitForEtcd(t *testing.T) {
	// A port nothing listens on: taken, then released.
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	t.Run("returns once a server listens", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// pflag prints a string slice as [a,b].
		servers := "[https://" + closedAddr + ",https://" + l.Addr().String() + "]"
		if err := waitForEtcd(context.Background(), servers, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a server that does not answer does not hold up one that listens", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		// 192.0.2.1 (TEST-NET-1) is routed nowhere: a dial to it hangs until its timeout, as
		// one to a Service address the node's kube-proxy has not programmed yet may.
		start := time.Now()
		if err := waitForEtcd(context.Background(), "https://192.0.2.1:2379,https://"+l.Addr().String(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("waited %s for a server that listened from the start", d)
		}
	})
	t.Run("gives up after the timeout, naming the servers", func(t *testing.T) {
		err := waitForEtcd(context.Background(), "https://"+closedAddr, 300*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), closedAddr) {
			t.Fatalf("err = %v, want one naming %s", err, closedAddr)
		}
	})
	t.Run("a value that is not a URL names the flag", func(t *testing.T) {
		err := waitForEtcd(context.Background(), "etcd:2379", time.Second)
		if err == nil || !strings.Contains(err.Error(), "--etcd-servers") {
			t.Fatalf("err = %v, want one naming --etcd-servers", err)
		}
	})
}

func TestControllersArguments(t *testing.T) {
	if code := runControllers([]string{"--kubeconfig=/x"}); code != 2 {
		t.Errorf("without \"--\": exit code %d, want 2", code)
	}
	// A flag error stops the process before anything starts.
	if code := runControllers([]string{"--no-such-flag", "--"}); code != 1 {
		t.Errorf("an unknown controller-manager flag: exit code %d, want 1", code)
	}
}

// The ValidatingAdmissionPolicy status controller leaves the controller-manager's list when
// the list enables it, and only then starts lazily.
func TestLazyVAPStatus(t *testing.T) {
	const name = "validatingadmissionpolicy-status-controller"
	for _, tt := range []struct {
		controllers string
		wantLazy    bool
		wantList    []string
	}{
		{"*,bootstrapsigner,tokencleaner", true, []string{"*", "bootstrapsigner", "tokencleaner", "-" + name}},
		{"", true, []string{"*", "-" + name}}, // the flag's default, "*"
		{"*,-" + name, false, []string{"*", "-" + name}},
		{"deployment," + name, true, []string{"deployment", "-" + name}},
		{"deployment,replicaset", false, []string{"deployment", "replicaset"}},
	} {
		cmd := controllermanager.NewControllerManagerCommand()
		var args []string
		if tt.controllers != "" {
			args = []string{"--controllers=" + tt.controllers}
		}
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		run, err := lazyVAPStatus(cmd.Flags())
		if err != nil {
			t.Fatalf("--controllers=%s: %v", tt.controllers, err)
		}
		got, _ := cmd.Flags().GetStringSlice("controllers")
		if (run != nil) != tt.wantLazy || !slices.Equal(got, tt.wantList) {
			t.Errorf("--controllers=%s: lazy start %v, list %q; want %v, %q", tt.controllers, run != nil, got, tt.wantLazy, tt.wantList)
		}
	}
}
