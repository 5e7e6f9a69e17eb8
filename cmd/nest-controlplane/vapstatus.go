package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	apiextensionsscheme "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	validating "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/validatingadmissionpolicystatus"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

// The controller-manager's ValidatingAdmissionPolicy status controller type-checks the CEL
// expressions of each ValidatingAdmissionPolicy against the schemas of the types the policy
// matches and writes what it finds into the policy's status. Upstream builds the OpenAPI schema
// of every built-in type when the controller-manager starts and keeps it (8 MiB of an idle
// tenant's controllers process of 39), whether or not the tenant ever has a policy.
//
// In the controllers process, that controller is taken out of the controller-manager's list
// (lazyVAPStatus) and upstream's code runs it, as the controller-manager would (its service
// account's credentials, five workers, a REST mapper reset every 30 s), once the tenant has its
// first policy; until then the process only watches policies. It runs while the
// controller-manager leads, under its lease, as the controller-manager's own controllers do
// (leading.go).

const (
	vapStatusWorkers        = 5 // the controller-manager's --concurrent-validating-admission-policy-status-syncs
	vapStatusMapperInterval = 30 * time.Second
)

// lazyVAPStatus takes the status controller out of the controller-manager's --controllers and
// returns a function that runs it lazily with the controller-manager's settings, or nil when
// the flags leave it off. flags are the controller-manager's, parsed.
func lazyVAPStatus(flags *pflag.FlagSet) (func(ctx context.Context) error, error) {
	f := flags.Lookup("controllers")
	list, ok := f.Value.(pflag.SliceValue)
	if !ok {
		return nil, fmt.Errorf("the controller-manager's --controllers is not a list")
	}
	controllers := list.GetSlice()
	name := names.ValidatingAdmissionPolicyStatusController
	// As the controller-manager reads the list: named, or "*" and not "-named" (the controller
	// is on by default).
	on := slices.Contains(controllers, name) || (slices.Contains(controllers, "*") && !slices.Contains(controllers, "-"+name))
	if !on {
		return nil, nil
	}
	controllers = slices.DeleteFunc(slices.Clone(controllers), func(c string) bool { return c == name })
	if err := list.Replace(append(controllers, "-"+name)); err != nil {
		return nil, err
	}

	kubeconfig := flags.Lookup("kubeconfig").Value.String()
	return func(ctx context.Context) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return runVAPStatusOnFirstPolicy(ctx, cfg)
	}, nil
}

// runVAPStatusOnFirstPolicy watches the tenant's ValidatingAdmissionPolicies and, once one
// exists, runs the status controller until ctx ends. It returns an error when the controller
// cannot be set up.
func runVAPStatusOnFirstPolicy(ctx context.Context, cfg *rest.Config) error {
	name := names.ValidatingAdmissionPolicyStatusController
	root, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, name))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	factory := informers.NewSharedInformerFactory(root, 0)
	policies := factory.Admissionregistration().V1().ValidatingAdmissionPolicies()
	first := make(chan struct{})
	var once sync.Once
	if _, err := policies.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { once.Do(func() { close(first) }) },
	}); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	factory.Start(ctx.Done())
	select {
	case <-ctx.Done():
		return nil
	case <-first:
	}
	klog.InfoS("The tenant has a ValidatingAdmissionPolicy; starting the controller that type-checks policies", "controller", name)

	// The controller-manager's service-account credentials for the controller, as it would
	// run it (--use-service-account-credentials).
	builder := clientbuilder.NewDynamicClientBuilder(rest.AnonymousClientConfig(cfg), root.CoreV1(), metav1.NamespaceSystem)
	client, err := builder.Client(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	discovery, err := builder.DiscoveryClient(name)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery))
	checker := &validating.TypeChecker{
		SchemaResolver: resolver.NewDefinitionsSchemaResolver(openapi.GetOpenAPIDefinitions, k8sscheme.Scheme, apiextensionsscheme.Scheme).
			Combine(&resolver.ClientDiscoveryResolver{Discovery: discovery}),
		RestMapper: mapper,
	}
	c, err := validatingadmissionpolicystatus.NewController(policies, client.AdmissionregistrationV1().ValidatingAdmissionPolicies(), checker)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	go wait.UntilWithContext(ctx, func(context.Context) { mapper.Reset() }, vapStatusMapperInterval)
	c.Run(ctx, vapStatusWorkers)
	return nil
}
