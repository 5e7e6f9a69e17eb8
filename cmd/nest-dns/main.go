// Command nest-dns is the tenant's cluster DNS (and the local host cluster's): CoreDNS with
// only the plugins their Corefiles use (errors, cache, kubernetes, forward; health, ready and
// reload for the host's), in CoreDNS's own order and with its own flags (-conf, -dns.port,
// -version, -plugins, ...). Upstream's coredns binary compiles in every plugin
// (cloud DNS providers, tracing, ...), whose package state an idle tenant's DNS held for
// nothing: 8.7 MiB of anonymous memory against 6.1 (BENCHMARKS.md).
//
// With NEST_DNS_WAIT_FOR_APISERVER set to a kubeconfig, it waits until that apiserver is
// ready before CoreDNS starts. A tenant's DNS starts in the same pod as its apiserver: started
// at once, the kubernetes plugin waited 5 s, then served unsynced while its watches backed off
// (up to tens of seconds), answering SERVFAIL for names it did not know yet.
//
// It is a module of its own, so that CoreDNS's dependencies do not move the versions the
// Kubernetes components are built with.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/coredns/coredns/coremain"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// waitEnv names the kubeconfig of the apiserver to wait for.
const waitEnv = "NEST_DNS_WAIT_FOR_APISERVER"

func main() {
	if kubeconfig := os.Getenv(waitEnv); kubeconfig != "" {
		waitForAPIServer(kubeconfig, 10*time.Minute)
	}
	coremain.Run()
}

// waitForAPIServer polls the apiserver's /readyz every 250 ms until it answers, for at most
// timeout; CoreDNS starts either way.
func waitForAPIServer(kubeconfig string, timeout time.Duration) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		log.Printf("[WARNING] nest-dns: %s=%s: %v; not waiting for the apiserver", waitEnv, kubeconfig, err)
		return
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		log.Printf("[WARNING] nest-dns: %v; not waiting for the apiserver", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start, lastLog := time.Now(), time.Now()
	for {
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil {
			log.Printf("[INFO] nest-dns: apiserver %s ready after %s", cfg.Host, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(lastLog) > 10*time.Second {
			log.Printf("[INFO] nest-dns: waiting for apiserver %s: %v", cfg.Host, err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			log.Printf("[WARNING] nest-dns: apiserver %s not ready after %s; starting anyway: %v", cfg.Host, timeout, err)
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}
