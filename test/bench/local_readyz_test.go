//go:build benchlocal

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// TestStartupChecks starts a tenant control plane as processes of this machine (as
// TestIdleProcessMemory does) and reports when each of the apiserver's /readyz checks first
// passed, counted from the processes' start: which post-start hook the apiserver's readiness
// waits for last.
//
//	go test -tags benchlocal -run TestStartupChecks -v ./test/bench/
func TestStartupChecks(t *testing.T) {
	bin := testtenant.Binaries(t)
	tenant, cfg := testtenant.RunStandalone(t, bin, testtenant.VirtualCluster("bench", "6b1f7a52-0000-4000-8000-0000000000b2"))
	cfg.Timeout = time.Second
	rest := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()
	passed := map[string]time.Duration{}
	var order []string
	var serving time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		// Errors carry the body too: a failing /readyz answers 500 with the same list.
		body, err := rest.Get().AbsPath("/readyz").Param("verbose", "true").DoRaw(context.Background())
		if len(body) == 0 && err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if serving == 0 {
			serving = time.Since(tenant.Started)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if name, ok := strings.CutPrefix(line, "[+]"); ok {
				name = strings.TrimSuffix(name, " ok")
				if _, seen := passed[name]; !seen {
					passed[name] = time.Since(tenant.Started)
					order = append(order, name)
				}
			}
		}
		if err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("first answer (serving) at %.2fs; each check first passed at:", serving.Seconds())
	for _, name := range order {
		t.Logf("  %6.2fs %s", passed[name].Seconds(), name)
	}
	t.Logf("ready at %.2fs", time.Since(tenant.Started).Seconds())
}
