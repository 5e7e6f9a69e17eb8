package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubenest-io/kubenest/pkg/nodepool/install"
)

// runInstall installs this binary as the node's agent service, then stays (as the installer
// DaemonSet's pod) until it is told to stop. It leaves the service running when it stops:
// removing the agent from a node is deliberate (see the chart's README).
func runInstall(args []string) error {
	fs := flag.NewFlagSet("node-agent install", flag.ContinueOnError)
	hostRoot := fs.String("host-root", "/host", "Where the host's root filesystem is mounted.")
	once := fs.Bool("once", false, "Exit after installing instead of staying (for running on the host by hand).")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `node-agent install [flags] -- [agent flags]

Installs this binary as the node agent of a systemd host and starts it:
  %s            the binary
  %s/%s   the unit; its ExecStart gets the agent flags after "--"
and enables and (re)starts the unit through systemd's D-Bus socket (/run/systemd/private,
which must be the host's). Running it again changes nothing unless the binary or the flags
changed, in which case the agent restarts. The agent must run outside any pod: it stops the
kubelet and removes the node's pods when the node changes clusters.

Flags:
`, install.BinaryPath, install.UnitDir, install.Unit)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	agentArgs := fs.Args()
	if len(agentArgs) == 0 {
		return fmt.Errorf("no agent flags after \"--\"; the agent needs at least --node-name")
	}
	// The flags must be ones the agent takes: a typo would leave a unit that fails forever.
	if err := checkAgentFlags(agentArgs); err != nil {
		return fmt.Errorf("agent flags after \"--\": %w", err)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sd, err := install.ConnectDBus(cctx)
	if err != nil {
		return err
	}
	defer sd.Close()
	changed, err := install.Install(cctx, install.Options{HostRoot: *hostRoot, Binary: self, Args: agentArgs}, sd)
	if err != nil {
		return err
	}
	if changed {
		klog.InfoS("installed and (re)started the node agent", "unit", install.Unit, "binary", install.BinaryPath)
	} else {
		klog.InfoS("the node agent is installed and up to date; made sure it runs", "unit", install.Unit)
	}
	if *once {
		return nil
	}
	<-ctx.Done()
	return nil
}

// checkAgentFlags parses the agent's flags as the agent would, without acting on them.
func checkAgentFlags(args []string) error {
	fs := flag.NewFlagSet("node-agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	defineAgentFlags(fs, &agentFlags{})
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
