package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"

	"github.com/kubenest-io/kubenest/internal/idlegc"
	"github.com/kubenest-io/kubenest/internal/nodeports"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// runControllers runs kube-controller-manager and kube-scheduler in one process:
//
//	nest-controlplane controllers [controller-manager flags] -- [scheduler flags]
//
// Apart, each process pays the package state and runtime of the whole Kubernetes code base it
// imports; together an idle pair held 37.8 MiB instead of 35.5 + 16.2 (BENCHMARKS.md). Each
// keeps its own flags, serving port and clients. What is the process's is shared: logging,
// feature gates and metrics settings must be the same on both sides (the operator gives both
// the same), and when either component stops, for an error or a lost lease, the process ends
// with its exit code and the kubelet restarts both. The scheduler runs while the
// controller-manager leads, under its lease (leading.go); the controller-manager's
// ValidatingAdmissionPolicy status controller too, once the tenant has a policy
// (vapstatus.go).
func runControllers(args []string) int {
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" }) {
		controllersUsage(os.Stdout)
		return 0
	}
	i := slices.Index(args, "--")
	if i < 0 {
		fmt.Fprintf(os.Stderr, "nest-controlplane controllers: no \"--\" between the controller-manager's flags and the scheduler's\n\n")
		controllersUsage(os.Stderr)
		return 2
	}
	cmArgs, schedArgs := args[:i], args[i+1:]
	started := time.Now()
	// Each component applies its logging configuration; the second application is accepted
	// when it is the same as the first.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged

	// The scheduler starts once the controller-manager has parsed its flags (feature gates
	// and other process-wide settings are set once at a time), found the apiserver ready and
	// taken its lease. The ValidatingAdmissionPolicy status controller leaves the
	// controller-manager's list for a lazy start (vapstatus.go).
	type exit struct {
		component string
		code      int
	}
	exits := make(chan exit, 4)
	// A termination signal (the tenant sleeps, its pod goes) ends the process with exit code
	// 0, whatever its components then return: upstream's controller-manager does not stop on
	// one (it relies on the signal's default action, which any handler in the process turns
	// off), its scheduler ends with "finished without leader elect", exit code 1, and a
	// component still waiting for the apiserver with an error; the pod would end Failed.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	cmStarted := make(chan struct{})
	var (
		kubeconfig  string
		lease       *cmLease
		leaseClient kubernetes.Interface
		vapStatus   func(context.Context) error
	)
	host, err := os.Hostname()
	if err != nil {
		klog.ErrorS(err, "The host name, which the controller-manager names its lease's holder after")
		return 1
	}
	upstream := controllermanager.NewControllerManagerCommand()
	run := upstream.RunE
	upstream.RunE = func(c *cobra.Command, args []string) error {
		var err error
		if vapStatus, err = lazyVAPStatus(c.Flags()); err != nil {
			return err
		}
		if lease, err = controllerManagerLease(c.Flags()); err != nil {
			return err
		}
		if lease != nil {
			if leaseClient, err = lease.client(); err != nil {
				return err
			}
			// Not handed back, the controller-manager takes it once it expires.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := lease.releaseEarlierRun(ctx, leaseClient, host)
			cancel()
			if err != nil {
				klog.ErrorS(err, "The lease of an earlier run of this container")
			}
		}
		kubeconfig = c.Flags().Lookup("kubeconfig").Value.String()
		close(cmStarted)
		return run(c, args)
	}
	cm := waitFirst(upstream, "kubeconfig", waitForAPIServer)
	sched := newSchedulerCommand()
	for _, c := range []struct {
		cmd        *cobra.Command
		name, side string // side of the "--"
		flags      []string
	}{{cm, "controller-manager", "before", cmArgs}, {sched, "scheduler", "after", schedArgs}} {
		c.cmd.Use = "nest-controlplane controllers"
		c.cmd.SetArgs(c.flags)
		// A flag error names the side it is on, instead of the whole flag listing.
		c.cmd.SilenceUsage = true
		c.cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
			return fmt.Errorf("%w (in the kube-%s flags, %s \"--\"; 'nest-controlplane %s --help' lists them)", err, c.name, c.side, c.name)
		})
	}

	// releaseLease hands back the lease on a termination signal, when this process's
	// controller-manager took it (leading.go).
	releaseLease := func() {
		select {
		case <-cmStarted:
		default:
			return
		}
		if leaseClient == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := lease.release(ctx, leaseClient, host, started); err != nil {
			klog.ErrorS(err, "Handing back the controller-manager's lease; its successor takes it once it expires")
		}
	}

	// end waits for the first component to stop, or for a termination signal, and returns the
	// process's exit code. A signal is in this channel before any component's handler acts on
	// it, so a component it stopped is told apart from one that failed.
	end := func() int {
		var e exit
		select {
		case sig := <-signals:
			e = exit{"all (" + sig.String() + ")", 0}
			releaseLease()
		case e = <-exits:
			select {
			case sig := <-signals:
				klog.InfoS("Component stopped on a termination signal", "component", e.component, "signal", sig.String(), "componentExitCode", e.code)
				e.code = 0
			default:
			}
		}
		klog.InfoS("Component stopped; ending the process, and with it the others", "component", e.component, "exitCode", e.code)
		klog.Flush()
		return e.code
	}
	cmEnded := make(chan struct{})
	go func() {
		exits <- exit{"kube-controller-manager", cli.Run(cm)}
		close(cmEnded)
	}()
	select {
	case <-cmEnded: // a flag error, or the wait for the apiserver failed or was interrupted
		return end()
	case <-cmStarted:
	}
	idlegc.Start(context.Background())
	go func() {
		if lease != nil {
			if err := lease.waitLeading(context.Background(), leaseClient, host, started); err != nil {
				klog.ErrorS(err, "Waiting for the controller-manager's lease")
				exits <- exit{"kube-scheduler", 1}
				return
			}
		}
		if vapStatus != nil {
			go func() {
				if err := vapStatus(context.Background()); err != nil {
					klog.ErrorS(err, "Component failed")
					exits <- exit{"validatingadmissionpolicy-status-controller", 1}
				}
			}()
		}
		exits <- exit{"kube-scheduler", cli.Run(sched)}
	}()
	if cidr := os.Getenv(controlplane.ServiceCIDREnv); cidr != "" {
		go func() {
			if err := serveNodePorts(context.Background(), kubeconfig, cidr); err != nil {
				klog.ErrorS(err, "Component failed")
				exits <- exit{"nodeports", 1}
			}
		}()
	}
	return end()
}

func controllersUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: nest-controlplane controllers [kube-controller-manager flags] -- [kube-scheduler flags]

Runs kube-controller-manager and kube-scheduler in one process, each with its own flags,
serving port and clients; they share the process's memory and runtime. Settings
of the process itself (--v, --vmodule, the --log-* and --logging-format flags, --feature-gates,
--emulated-version, the metrics flags) must be the same on both sides. When either component
stops, the process ends with its exit code; on SIGTERM or SIGINT it ends with 0. Both wait for
the apiserver their --kubeconfig names before they start.

One lease for both: with the controller-manager's --leader-elect (the default), the scheduler
starts once this process's controller-manager holds its lease, and runs until the process
ends (the controller-manager ends it when it loses the lease). Give the scheduler
--leader-elect=false, as the operator does; with true it also takes a lease of its own.

With $KUBENEST_SERVICE_CIDR set (the tenant's Service range; the operator sets it), the
process also serves the tenant's NodePorts: it listens on each NodePort (TCP or UDP) of the
Services its --kubeconfig sees and passes each connection on to the Service's ClusterIP, when
that is in the range. The shared node's address leads its NodePorts here (clustertree).

The controller-manager's validatingadmissionpolicy-status-controller (when --controllers
enables it) starts once the cluster has a ValidatingAdmissionPolicy and the controller-manager
leads: upstream builds the schemas it type-checks policies against when the
controller-manager starts, policies or not.

'nest-controlplane controller-manager --help' and 'nest-controlplane scheduler --help' list
the flags of each.
`)
}

// newControllerManagerCommand and newSchedulerCommand (sharednodefilter.go) are the components
// run apart. They wait until the apiserver their --kubeconfig points at answers /readyz. Upstream, the
// controller-manager exits when it starts before the apiserver has bootstrapped its RBAC
// roles, and its container then waits out a crash-loop back-off; waiting here starts it as
// soon as the apiserver is ready.
func newControllerManagerCommand() *cobra.Command {
	return waitFirst(controllermanager.NewControllerManagerCommand(), "kubeconfig", waitForAPIServer)
}

// serveNodePorts serves the NodePorts of the Services of the cluster kubeconfig reaches, to
// their ClusterIPs in serviceCIDR, until ctx ends.
func serveNodePorts(ctx context.Context, kubeconfig, serviceCIDR string) error {
	cidr, err := netip.ParsePrefix(serviceCIDR)
	if err != nil {
		return fmt.Errorf("$%s: %w", controlplane.ServiceCIDREnv, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("nodeports: %w", err)
	}
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "nodeports"))
	if err != nil {
		return err
	}
	return (&nodeports.Proxy{Client: client, ServiceCIDR: cidr.Masked()}).Run(ctx)
}
