// Command nest-dns is the tenant's cluster DNS (and the local host cluster's): CoreDNS with
// only the plugins their Corefiles use (errors, cache, kubernetes, forward; health, ready and
// reload for the host's), in CoreDNS's own order and with its own flags (-conf, -dns.port,
// -version, -plugins, ...). Upstream's coredns binary compiles in every plugin
// (cloud DNS providers, tracing, ...), whose package state an idle tenant's DNS held for
// nothing: 8.7 MiB of anonymous memory against 6.1 (BENCHMARKS.md).
//
// It is a module of its own, so that CoreDNS's dependencies do not move the versions the
// Kubernetes components are built with.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }
