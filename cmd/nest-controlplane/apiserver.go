package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/flagz"
	"k8s.io/client-go/rest"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/cli/globalflag"
	basecompatibility "k8s.io/component-base/compatibility"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/term"
	utilversion "k8s.io/component-base/version"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kubecontrolplane "k8s.io/kubernetes/pkg/controlplane"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	psapi "k8s.io/pod-security-admission/api"
)

// newAPIServerCommand is kube-apiserver with upstream's flags, help and option checks (as
// k8s.io/kubernetes/cmd/kube-apiserver/app.NewAPIServerCommand sets them up) and upstream's
// server chain, run by runAPIServer (which says what differs). Before starting, it waits for
// etcd (waitForEtcd).
func newAPIServerCommand() *cobra.Command {
	s := options.NewServerRunOptions()
	guard := guardOptions{nodePodSecurity: string(psapi.LevelBaseline)}
	endpoints := endpointOptions{interval: kubecontrolplane.DefaultEndpointReconcilerInterval}
	handBack := handBackOptions{wait: 2 * time.Second}
	ctx := genericapiserver.SetupSignalContext()
	featureGate := s.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)
	cmd := &cobra.Command{
		Use:          "kube-apiserver",
		Long:         "The Kubernetes API server, as upstream's kube-apiserver, with its flags.",
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
				return err
			}
			// The apiserver's loopback clients should not log the warnings it sends itself.
			rest.SetDefaultWarningHandler(rest.NoWarnings{})
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := logsapi.ValidateAndApply(s.Logs, featureGate); err != nil {
				return err
			}
			cliflag.PrintFlags(cmd.Flags())
			completed, err := s.Complete(ctx)
			if err != nil {
				return err
			}
			if errs := completed.Validate(); len(errs) != 0 {
				return utilerrors.NewAggregate(errs)
			}
			featureGate.(featuregate.MutableFeatureGate).AddMetrics()
			s.GenericServerRunOptions.ComponentGlobalsRegistry.AddMetrics()
			if endpoints.interval < time.Second {
				return fmt.Errorf("--kubenest-endpoint-reconcile-interval=%s: must be a second or more", endpoints.interval)
			}
			if err := handBack.validate(); err != nil {
				return err
			}
			return runAPIServer(ctx, completed, guard, endpoints, handBack)
		},
		Args: cobra.NoArgs,
	}
	cmd.SetContext(ctx)

	named := s.Flags()
	guard.addFlags(named.FlagSet("kubenest"))
	endpoints.addFlags(named.FlagSet("kubenest"))
	handBack.addFlags(named.FlagSet("kubenest"))
	s.Flagz = flagz.NamedFlagSetsReader{FlagSets: named}
	verflag.AddFlags(named.FlagSet("global"))
	globalflag.AddGlobalFlags(named.FlagSet("global"), cmd.Name(), logs.SkipLoggingConfigurationFlags())
	for _, f := range named.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	cols, _, _ := term.TerminalSize(cmd.OutOrStdout())
	cliflag.SetUsageAndHelpFunc(cmd, named, cols)
	return waitFirst(cmd, "etcd-servers", waitForEtcd)
}

// runAPIServer runs upstream's server chain (aggregator, kube-apiserver, apiextensions) as
// upstream's app.Run does, except that the kube-apiserver's OpenAPI documents are built when
// first asked for (openapi.go), its bootstrap RBAC roles and PriorityClasses are created
// without upstream's one-second wait (bootstrap.go), its etcd clients share one connection
// (etcdclients.go), its admission ends with KubeNest's tenant guard (guard.go), it records when people
// last used it (activity.go), it renews its identity Lease once a minute, its entry in
// the kubernetes Service's endpoints as --kubenest-endpoint-reconcile-interval says, and
// when it stops it serves until its pod's controllers handed back their lease (leading.go).
func runAPIServer(ctx context.Context, opts options.CompletedOptions, guard guardOptions, endpoints endpointOptions, handBack handBackOptions) error {
	klog.Infof("Version: %+v", utilversion.Get())
	// Upstream renews the apiserver's identity Lease every 10 s, a write to etcd each time,
	// although the Lease lasts an hour (IdentityLeaseDurationSeconds) and what reads it (the
	// garbage collection of storage versions and of the Leases of apiservers gone) looks only
	// at whether it expired. Once a minute is 5 writes a minute fewer per idle tenant.
	controlplaneapiserver.IdentityLeaseRenewIntervalPeriod = time.Minute
	klog.InfoS("Golang settings", "GOGC", os.Getenv("GOGC"), "GOMAXPROCS", os.Getenv("GOMAXPROCS"), "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	if os.Getenv(sharedETCDEnv) != "off" {
		shareETCDConnections()
	}
	config, err := apiserver.NewConfig(opts)
	if err != nil {
		return err
	}
	if err := guard.install(config, opts); err != nil {
		return err
	}
	endpoints.apply(config)
	recorder := recordActivity(config)
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	generic := completed.KubeAPIs.ControlPlane.Generic
	if generic.OpenAPIConfig == nil || generic.OpenAPIV3Config == nil {
		return fmt.Errorf("kube-apiserver's configuration has no OpenAPI settings, which this build expects")
	}
	generic.SkipOpenAPIInstallation = true // installed below, built lazily; the settings stay for server-side apply
	generic.DisabledPostStartHooks.Insert(replacedHooks...)
	server, err := apiserver.CreateServerChain(completed)
	if err != nil {
		return err
	}
	kube, ok := server.GenericAPIServer.NextDelegate().(*genericapiserver.GenericAPIServer)
	if !ok {
		return fmt.Errorf("kube-apiserver's server chain is not the one this build knows (aggregator, then kube-apiserver)")
	}
	installLazyOpenAPIV2(kube, generic.OpenAPIConfig)
	installLazyOpenAPIV3(kube, generic.OpenAPIV3Config)
	addBootstrapHooks(server.GenericAPIServer) // the outermost server runs the hooks of the chain, copied when it was built
	addActivityHook(server.GenericAPIServer, recorder)
	if err := handBack.addHook(server.GenericAPIServer); err != nil {
		return err
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}

// endpointOptions say how often the apiserver renews its master lease: the etcd entry, with a
// time to live, by which the apiservers of a cluster keep their addresses in the kubernetes
// Service's endpoints and take out those of apiservers gone. Upstream renews every 10 s with a
// 15 s time to live; each renewal grants a new etcd lease, writes the entry, and the old lease
// expires: three raft proposals, each about 3.5 ms of an idle etcd's CPU on this project's
// machine (BENCHMARKS.md). The time to live stays one and a half times the interval.
type endpointOptions struct {
	interval time.Duration
}

func (o *endpointOptions) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.interval, "kubenest-endpoint-reconcile-interval", o.interval,
		"How often this apiserver renews its address in the kubernetes Service's endpoints; an apiserver that stops without removing it (a crash, a lost node) stays there one and a half times as long. "+
			"Upstream's 10s suits several apiservers. The operator sets 1m for a tenant of one: its apiserver removes its address when it stops, and after a crash restarts in its own pod, at the same address (KubeNest).")
}

func (o endpointOptions) apply(config *apiserver.Config) {
	config.KubeAPIs.Extra.EndpointReconcilerConfig.Interval = o.interval
	config.KubeAPIs.Extra.MasterEndpointReconcileTTL = o.interval * 3 / 2
	klog.InfoS("Endpoint reconciler", "interval", o.interval, "ttl", o.interval*3/2)
}
