// Command nest-etcd runs one member of a tenant's etcd: go.etcd.io/etcd/server/v3/embed, with
// etcd's own flags. The operator runs it in the tenant's etcd pods; the local host cluster
// runs its etcd with it too.
//
// It is a binary of its own, not a subcommand of nest-controlplane: a process of that binary
// initialises the packages of all of Kubernetes' components it embeds, about 7 MiB that an
// idle etcd, one per tenant, would hold for nothing.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/kubenest-io/kubenest/internal/idlegc"
	"github.com/kubenest-io/kubenest/pkg/version"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "version") {
		fmt.Println(version.String())
		return
	}
	cfg, waitDNS, err := parseEtcdFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // parseEtcdFlags printed them
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "nest-etcd: %v\n'nest-etcd --help' lists the flags.\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	idlegc.Start(ctx)
	if err := runEtcd(ctx, cfg, waitDNS); err != nil {
		klog.ErrorS(err, "etcd failed")
		klog.Flush()
		stop()
		os.Exit(1)
	}
}
