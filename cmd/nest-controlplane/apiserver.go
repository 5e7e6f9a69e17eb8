package main

import (
	"context"
	"fmt"
	"os"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
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
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/validation/spec"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

// newAPIServerCommand is kube-apiserver with upstream's flags, help and option checks (as
// k8s.io/kubernetes/cmd/kube-apiserver/app.NewAPIServerCommand sets them up) and upstream's
// server chain, run by runAPIServer, which builds the OpenAPI v2 document when it is first
// asked for instead of at start-up. Before starting, it waits for etcd (waitForEtcd).
func newAPIServerCommand() *cobra.Command {
	s := options.NewServerRunOptions()
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
			return runAPIServer(ctx, completed)
		},
		Args: cobra.NoArgs,
	}
	cmd.SetContext(ctx)

	named := s.Flags()
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
// upstream's app.Run does, except that the kube-apiserver's OpenAPI v2 document is built on
// its first request rather than before the server starts. Built at start-up, it cost an idle
// apiserver 6 MB of its 78 MB live heap and 0.2 CPU-seconds of its start, and a tenant may
// never ask for it: kubectl and the tenant's own components use OpenAPI v3, which stays as
// upstream has it.
func runAPIServer(ctx context.Context, opts options.CompletedOptions) error {
	klog.Infof("Version: %+v", utilversion.Get())
	klog.InfoS("Golang settings", "GOGC", os.Getenv("GOGC"), "GOMAXPROCS", os.Getenv("GOMAXPROCS"), "GOMEMLIMIT", os.Getenv("GOMEMLIMIT"))
	config, err := apiserver.NewConfig(opts)
	if err != nil {
		return err
	}
	completed, err := config.Complete()
	if err != nil {
		return err
	}
	generic := completed.KubeAPIs.ControlPlane.Generic
	openAPIV2 := generic.OpenAPIConfig
	generic.OpenAPIConfig = nil // upstream builds the document at PrepareRun when this is set
	server, err := apiserver.CreateServerChain(completed)
	if err != nil {
		return err
	}
	kube, ok := server.GenericAPIServer.NextDelegate().(*genericapiserver.GenericAPIServer)
	if !ok || openAPIV2 == nil {
		return fmt.Errorf("kube-apiserver's server chain is not the one this build knows (aggregator, then kube-apiserver with OpenAPI v2)")
	}
	// Before PrepareRun, where upstream registers it: the aggregator's merged /openapi/v2 asks
	// this server for its document on the aggregator's own first request.
	installLazyOpenAPIV2(kube, openAPIV2)
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	return prepared.Run(ctx)
}

// installLazyOpenAPIV2 serves /openapi/v2 of s from a document built from s's routes on the
// first request, as upstream's routes.OpenAPI.InstallV2 builds it at start-up.
func installLazyOpenAPIV2(s *genericapiserver.GenericAPIServer, config *common.Config) {
	etag := uuid.NewString() // the routes never change once the server runs
	build := cached.Func(func() (*spec.Swagger, string, error) {
		doc, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices(s.Handler.GoRestfulContainer.RegisteredWebServices()), config)
		if err != nil {
			return nil, "", fmt.Errorf("building the OpenAPI v2 document: %w", err)
		}
		doc.Definitions = handler.PruneDefaults(doc.Definitions)
		klog.InfoS("Built the OpenAPI v2 document on its first request", "definitions", len(doc.Definitions))
		return doc, etag, nil
	})
	handler.NewOpenAPIServiceLazy(cached.Once(build)).RegisterOpenAPIVersionedService("/openapi/v2", s.Handler.NonGoRestfulMux)
}
