// Command nest-controlplane runs one of a tenant's control-plane components: kube-apiserver,
// kube-controller-manager or kube-scheduler, each embedded from its upstream package at the
// version KubeNest is built with (etcd is nest-etcd). The operator runs it in the tenant's
// pods; the flags after the subcommand are the upstream component's own.
package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"

	"github.com/kubenest-io/kubenest/internal/idlegc"
	"github.com/kubenest-io/kubenest/pkg/version"
)

// subcommand builds the command of one component. Commands are built only when chosen: the
// upstream apiserver and scheduler commands install signal handlers when they are built, which
// may happen once per process.
type subcommand struct {
	summary string
	build   func() *cobra.Command
	tenant  bool // a tenant control-plane component: its collector is paced (idlegc)
}

var subcommands = map[string]subcommand{
	"apiserver":          {"kube-apiserver, with kube-apiserver's flags", newAPIServerCommand, true},
	"controller-manager": {"kube-controller-manager, with its flags; waits for the apiserver first", newControllerManagerCommand, true},
	"scheduler":          {"kube-scheduler, with its flags; waits for the apiserver first", newSchedulerCommand, true},
	"kube-proxy":         {"kube-proxy, with its flags (on the nodes lent to a tenant)", newKubeProxyCommand, false},
	"version":            {"print the version", newVersionCommand, false},
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage(os.Stdout)
		return
	}
	sub, ok := subcommands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "nest-controlplane: unknown component %q\n\n", os.Args[1])
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd := sub.build()
	cmd.Use = "nest-controlplane " + os.Args[1]
	cmd.SetArgs(os.Args[2:])
	if sub.tenant {
		paceWhenRun(cmd)
	}
	os.Exit(cli.Run(cmd))
}

// paceWhenRun starts the collector's pacing (idlegc) when cmd runs its component, not for
// --help or a flag error, where its start-up log line would land in the help text.
func paceWhenRun(cmd *cobra.Command) {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		idlegc.Start(context.Background())
		return run(c, args)
	}
}

func usage(w *os.File) {
	fmt.Fprintf(w, "nest-controlplane runs one control-plane component of a KubeNest tenant.\n\n")
	fmt.Fprintf(w, "Usage: nest-controlplane <component> [flags of that component]\n\nComponents:\n")
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-20s %s\n", n, subcommands[n].summary)
	}
	fmt.Fprintf(w, "\nWhile the apiserver, the controller-manager or the scheduler allocates little, its GOGC is\n"+
		"lowered (down to %d) so that its heap grows by what it allocates in about %s, never beyond its own\n"+
		"GOGC; %s=off keeps its GOGC as set.\n", idlegc.Default.Floor, idlegc.Default.Interval, idlegc.DisableEnv)
	fmt.Fprintf(w, "\n'nest-controlplane <component> --help' lists the component's flags.\n%s\n", version.String())
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Short: "print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), version.String())
		},
	}
}

// flagValue finds the value of --name in args, in the forms --name=value and --name value.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
