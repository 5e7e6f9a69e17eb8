// Command nest-controlplane runs a tenant's control-plane components: kube-apiserver, and
// kube-controller-manager and kube-scheduler (in one process, or each alone), embedded from
// their upstream packages at the version KubeNest is built with (etcd is nest-etcd). The
// operator runs it in the tenant's pods; the flags after the subcommand are the upstream
// components' own.
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
	_ "github.com/kubenest-io/kubenest/internal/workqueuemetrics" // before the components' init sets theirs
	"github.com/kubenest-io/kubenest/pkg/version"
)

// A subcommand runs one component with the arguments after its name and returns the exit code.
type subcommand struct {
	summary string
	run     func(name string, args []string) int
}

var subcommands = map[string]subcommand{
	"apiserver":          {"kube-apiserver, with kube-apiserver's flags", tenantComponent(newAPIServerCommand)},
	"controllers":        {"kube-controller-manager and kube-scheduler in one process, as the operator runs them", func(_ string, args []string) int { return runControllers(args) }},
	"controller-manager": {"kube-controller-manager alone, with its flags; waits for the apiserver first", tenantComponent(newControllerManagerCommand)},
	"scheduler":          {"kube-scheduler alone, with its flags; waits for the apiserver first", tenantComponent(newSchedulerCommand)},
	"kube-proxy":         {"kube-proxy, with its flags (on the nodes lent to a tenant)", command(newKubeProxyCommand)},
	"etcd-snapshot":      {"take a consistent snapshot of a tenant's etcd into a file", command(newEtcdSnapshotCommand)},
	"etcd-restore":       {"restore an etcd snapshot as a member of a new tenant", command(newEtcdRestoreCommand)},
	"version":            {"print the version", command(newVersionCommand)},
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
	os.Exit(sub.run(os.Args[1], os.Args[2:]))
}

// command runs the cobra command build makes. Commands are built only when chosen: the
// upstream apiserver command installs a signal handler when it is built, which may happen once
// per process.
func command(build func() *cobra.Command) func(name string, args []string) int {
	return func(name string, args []string) int {
		cmd := build()
		cmd.Use = "nest-controlplane " + name
		cmd.SetArgs(args)
		return cli.Run(cmd)
	}
}

// tenantComponent is command for a tenant control-plane component, whose collector is paced
// while idle (idlegc) once it runs: not for --help or a flag error, where the pacing's
// start-up log line would land in the help text.
func tenantComponent(build func() *cobra.Command) func(name string, args []string) int {
	return command(func() *cobra.Command {
		cmd := build()
		run := cmd.RunE
		cmd.RunE = func(c *cobra.Command, args []string) error {
			idlegc.Start(context.Background())
			return run(c, args)
		}
		return cmd
	})
}

func usage(w *os.File) {
	fmt.Fprintf(w, "nest-controlplane runs the control-plane components of a KubeNest tenant.\n\n")
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
		"GOGC, its free memory is returned to the system every %s, and it runs on %d thread(s) (GOMAXPROCS;\n"+
		"one set in the environment is kept). %s is a comma-separated list: off keeps GOGC and GOMAXPROCS\n"+
		"as set, no-release paces without returning memory, no-procs leaves GOMAXPROCS alone,\n"+
		"interval=<duration> aims at that time between collections instead.\n",
		idlegc.Default.Floor, idlegc.Default.Interval, idlegc.Default.Release, idlegc.Default.IdleProcs, idlegc.Env)
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
