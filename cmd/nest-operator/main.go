// Command nest-operator runs KubeNest's controllers in the host cluster: for every
// VirtualCluster it issues the tenant's certificates, runs its etcd and control plane as pods in
// the VirtualCluster's namespace and writes its admin kubeconfig Secret.
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	cmapi "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/poolnode"
	"github.com/kubenest-io/kubenest/internal/controller/snapshot"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/internal/wakegate"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/version"
)

// startSlotTimeout is the longest a starting tenant holds its turn (--max-starting-tenants):
// one that cannot start does not block the others.
const startSlotTimeout = 3 * time.Minute

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "nest-operator: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	settings := controlplane.DefaultSettings()
	settings.Image = "kubenest.io/kubenest:" + version.Version
	var (
		metricsAddr, probeAddr, pullPolicy             string
		leaderElect, showVersion, allowTestAnnotations bool
		secureMetrics                                  bool
		leaderElectionNamespace                        string
		workers, maxStarting, maxLentNodes             int
		nodePortAddress                                string
		virtualNodeAddress, virtualNodeName            string
		wakeAddress                                    string
		namespace                                      string
		issuers, sanDomains                            string
		sharedQuota, copyBytes                         string
		finishedPods                                   int
	)
	fs := flag.CommandLine
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `nest-operator runs KubeNest's controllers in the host cluster.

For each VirtualCluster it issues the tenant's certificates, runs the tenant's etcd,
kube-apiserver, kube-controller-manager and kube-scheduler as pods in the VirtualCluster's
namespace, checks the tenant's /readyz and writes the admin kubeconfig Secret
<name>-kubeconfig (key "value").

It reaches the host cluster through --kubeconfig, or in-cluster configuration when run as a pod.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint listens on; \"0\" turns it off.")
	fs.BoolVar(&secureMetrics, "metrics-secure", true, "Serve metrics over HTTPS (a self-signed certificate) only to scrapers the host's RBAC allows: a bearer token, checked with a TokenReview, allowed get on the non-resource URL (/metrics; /tenants/<namespace>/<name>/metrics for a tenant apiserver's own metrics, served only then). false serves /metrics over HTTP to whoever reaches the port, tenant pods included.")
	fs.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz endpoints listen on.")
	fs.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader among replicas, so only one reconciles at a time.")
	fs.StringVar(&leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease; defaults to the pod's own namespace.")
	fs.IntVar(&workers, "workers", 8, "VirtualClusters reconciled at the same time.")
	fs.IntVar(&maxLentNodes, "max-lent-nodes-per-tenant", 0, "Most host nodes one tenant may have lent (the sum of its spec.nodes.promotions counts): a tenant that asks for more gets none more, and its NodesReady condition (reason OverNodeLimit) says so. Anyone who may edit a VirtualCluster may ask for nodes: this keeps one tenant from draining every lendable node. 0: no limit.")
	fs.IntVar(&maxStarting, "max-starting-tenants", 0, "Tenants that start their control planes at the same time (new ones, and sleeping ones waking); the others wait their turn, first come first served (one namespace holds all turns but one at most, and half while other namespaces' tenants wait), with an APIServerReady condition (reason Queued) saying so, and a tenant holds its turn at most "+startSlotTimeout.String()+". A start is mostly CPU: too many at once on a small host all miss their probes and deadlines and start again. 0: no limit.")
	fs.StringVar(&settings.Image, "controlplane-image", settings.Image, "Image the tenant pods run (it holds nest-controlplane).")
	fs.StringVar(&settings.DNSImage, "tenant-dns-image", settings.DNSImage, "CoreDNS image of each tenant's cluster DNS (a container of its control-plane pods).")
	fs.StringVar(&pullPolicy, "image-pull-policy", string(settings.ImagePullPolicy), "Pull policy of the tenant pods: Always, IfNotPresent or Never.")
	fs.StringVar(&settings.HostClusterDomain, "host-cluster-domain", settings.HostClusterDomain, "DNS domain of the host cluster, for the Service names in tenant certificates.")
	fs.StringVar(&settings.ServiceCIDRPool, "tenant-service-cidr", settings.ServiceCIDRPool, "Range tenants' Services get ClusterIPs from, a slice per tenant (registered in the host as a ServiceCIDR for a tenant with the shared node); must not overlap the host's Service or pod ranges.")
	fs.IntVar(&settings.ServiceCIDRPrefix, "tenant-service-cidr-prefix", settings.ServiceCIDRPrefix, "Prefix length of each tenant's slice of --tenant-service-cidr: /24 gives each tenant 254 ClusterIPs, and a /16 range 256 tenants. /20 at most (4094 ClusterIPs): the host holds each free address of a slice as an IPAddress object, so that it gives none to a Service of its own.")
	fs.StringVar(&nodePortAddress, "nodeport-address", "", "Address in NodePort endpoints and certificates; empty uses the address of the oldest Ready host node.")
	fs.StringVar(&virtualNodeAddress, "virtual-node-address", os.Getenv("POD_IP"), "IP tenants' apiservers reach the shared virtual nodes' kubelet API at: this pod's IP (the chart sets $POD_IP). Empty runs no virtual node.")
	fs.StringVar(&wakeAddress, "wake-gateway-address", os.Getenv("POD_IP"), "IP the host's Services reach this pod's wake gateway at, which holds a sleeping tenant's first connection while it wakes: this pod's IP (the chart sets $POD_IP). Empty: a sleeping tenant's endpoint refuses connections, and only spec.sleep.asleep wakes it.")
	fs.StringVar(&sharedQuota, "shared-node-quota", "", "Each tenant's share of the host's shared nodes: the most its pods on the shared virtual node may request together, as comma-separated name=quantity pairs (cpu=2,memory=4Gi,pods=110; any resource a pod requests, such as ephemeral-storage or nvidia.com/gpu, and pods, their number). The virtual node's allocatable resources are the host's within it, so the tenant's scheduler places no more; a pod bound to the node that does not fit fails with reason OutOf<resource>, as on a full kubelet, and an in-place resize that does not fit is not made. A VirtualCluster's spec.nodes.sharedQuota, which only a host user with the verb grant-shared-quota may set, replaces it for the resources it names. Empty: every tenant may take all the shared nodes have.")
	fs.StringVar(&copyBytes, "shared-node-copy-bytes", "32Mi", "Most bytes of each tenant's ConfigMaps and Secrets that its pods on the shared virtual node may have copied into the host (a quantity: 32Mi, 1Gi), their keys and values counted: what a tenant can add to the host's etcd that way. A pod whose ConfigMaps and Secrets would take it past this fails with reason "+clustertree.ReasonCopyBudget+", and a change that would grow a copy past it is not copied. 0: no bound.")
	fs.IntVar(&finishedPods, "shared-node-finished-pods", 100, "How many of each tenant's ended pods on the shared virtual node keep their containers, and so their logs, on the host: the host pods of older ones are removed, oldest first (each is an object in the host's etcd and a dead container with its logs on a host node's disk). The tenant's pods stay, with their status; asking for the logs of one removed says why. 0: all are kept, as a kubelet keeps them.")
	fs.StringVar(&virtualNodeName, "virtual-node-name", "kubenest-shared", "Name of the shared virtual node in every tenant.")
	fs.StringVar(&namespace, "namespace", envOr("POD_NAMESPACE", "kubenest-system"), "The operator's own namespace, where lent nodes' join Secrets go.")
	fs.BoolVar(&settings.ControlPlanesOnLendableNodes, "control-planes-on-lendable-nodes", false, "Let tenant etcd and control-plane pods run on nodes labelled "+v1alpha1.LabelLendable+"=true when the other nodes have no room (the scheduler still prefers the others). A node that runs one is never lent. Off, they run only on nodes without the label, and wait Pending when those are full.")
	fs.DurationVar(&settings.LeafValidity, "leaf-certificate-validity", 0, "Validity of tenant leaf certificates; 0 means one year. Short values are for testing rotation.")
	fs.StringVar(&sanDomains, "cert-manager-san-domains", "", "DNS domains, comma-separated, that a tenant whose cluster CA a cert-manager issuer signs may name in spec.controlPlane.exposure.extraSANs, each with its subdomains; {name} and {namespace} stand for the VirtualCluster's, giving each tenant names of its own ({name}.{namespace}.tenants.example.com). Its CA, under the platform's root, may sign for every name of its certificates: an extra SAN outside these leaves the tenant's CA unissued (reason ExtraSANNotAllowed). Empty allows none (IP addresses are always allowed: a CA's addresses are not constrained).")
	fs.StringVar(&issuers, "cert-manager-issuers", "", "cert-manager issuers tenants may have sign their cluster CA (spec.pki.issuerRef), comma-separated: ClusterIssuer/<name>, Issuer/<name> (in the tenant's control-plane namespace, kubenest-cp-<namespace>, where its Certificate is), Kind.group/<name> for an external issuer, \"*\" as the name for any. Empty allows none: such a CA is an intermediate of the platform's, whose certificates the tenant's admin holds.")
	fs.BoolVar(&allowTestAnnotations, "allow-test-annotations", false, "Honour annotations meant for tests, such as "+v1alpha1.AnnotationTestLeafValidity+". Never on in production.")
	fs.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	klog.InitFlags(fs)
	flag.Parse()
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))
	}
	if showVersion {
		fmt.Println(version.String())
		return nil
	}
	settings.ImagePullPolicy = corev1.PullPolicy(pullPolicy)
	switch settings.ImagePullPolicy {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("--image-pull-policy %q: must be Always, IfNotPresent or Never", pullPolicy)
	}
	if err := settings.Validate(); err != nil {
		return err
	}
	allowedIssuers, err := virtualcluster.ParseIssuerAllowList(issuers)
	if err != nil {
		return fmt.Errorf("--cert-manager-issuers: %w", err)
	}
	allowedSANDomains, err := virtualcluster.ParseSANDomains(sanDomains)
	if err != nil {
		return fmt.Errorf("--cert-manager-san-domains: %w", err)
	}
	quota, err := clustertree.ParseQuota(sharedQuota)
	if err != nil {
		return fmt.Errorf("--shared-node-quota: %w", err)
	}
	copyLimit, err := resource.ParseQuantity(copyBytes)
	if err != nil || copyLimit.Sign() < 0 {
		return fmt.Errorf("--shared-node-copy-bytes %q: not a quantity of bytes such as 32Mi", copyBytes)
	}
	if finishedPods < 0 {
		return fmt.Errorf("--shared-node-finished-pods %d: a number of pods, 0 or more", finishedPods)
	}
	ctrl.SetLogger(klog.Background())
	log := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	// cert-manager's kinds, for tenants whose CA a cert-manager issuer signs (spec.pki). They
	// are read directly, never cached, so a host without cert-manager runs the operator too.
	if err := cmapi.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("host cluster configuration: %w", err)
	}
	// A warning of the host (a deprecated API, such as the v1 Endpoints removed on every pass
	// of a sleeping tenant) is logged once, not at every request that draws it.
	cfg.WarningHandlerWithContext = ctrllog.NewKubeAPIWarningLogger(ctrllog.KubeAPIWarningLoggerOptions{Deduplicate: true})
	// The operator caches only what belongs to tenants, not every Secret and pod of the host.
	tenantOwned, err := labels.NewRequirement(naming.LabelVirtualCluster, selection.Exists, nil)
	if err != nil {
		return err
	}
	owned := cache.ByObject{Label: labels.NewSelector().Add(*tenantOwned)}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr, SecureServing: secureMetrics, FilterProvider: metricsFilter(secureMetrics)},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "kubenest-operator.kubenest.io",
		LeaderElectionNamespace: leaderElectionNamespace,
		// Give the lease up on shutdown (safe: the process ends when Start returns), so that a
		// rolling upgrade's new operator takes over at once, not when the old lease expires:
		// tenants created during an upgrade waited 15 s more for it.
		LeaderElectionReleaseOnCancel: true,
		Cache: cache.Options{
			DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{
				&corev1.Secret{}:                owned,
				&corev1.ConfigMap{}:             owned,
				&corev1.Pod{}:                   owned,
				&corev1.Service{}:               owned,
				&appsv1.StatefulSet{}:           owned,
				&appsv1.Deployment{}:            owned,
				&policyv1.PodDisruptionBudget{}: owned,
			},
		},
	})
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	// Each tenant's phase, readiness, sleep, lent nodes and shared-node pods, read from the
	// cache when scraped.
	ctrlmetrics.Registry.MustRegister(&virtualcluster.TenantCollector{Reader: mgr.GetCache(), Elected: mgr.Elected()})
	ctx := ctrl.SetupSignalHandler()
	// The one place the operator reaches tenants from: the VirtualCluster reconciler loads each
	// tenant's authorities into it, and everything else reads it.
	tenants := &tenantclient.Registry{}
	var shared *virtualcluster.SharedNodes
	if virtualNodeAddress != "" {
		if net.ParseIP(virtualNodeAddress) == nil {
			return fmt.Errorf("--virtual-node-address %q is not an IP address", virtualNodeAddress)
		}
		shared = &virtualcluster.SharedNodes{
			Manager:      clustertree.NewManager(ctx),
			Host:         cfg,
			Address:      virtualNodeAddress,
			NodeName:     virtualNodeName,
			Quota:        quota,
			CopyBytes:    copyLimit.Value(),
			FinishedPods: finishedPods,
		}
	} else {
		log.Info("no --virtual-node-address (nor $POD_IP): tenants asking for the shared node will not get one")
	}
	var wake *wakegate.Gateway
	if wakeAddress != "" {
		if net.ParseIP(wakeAddress) == nil {
			return fmt.Errorf("--wake-gateway-address %q is not an IP address", wakeAddress)
		}
		wake = &wakegate.Gateway{Address: wakeAddress, Timeout: 2 * time.Minute}
	}
	if err := (&virtualcluster.Reconciler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Settings:        settings,
		Recorder:        mgr.GetEventRecorder("kubenest-operator"),
		NodePortAddress: nodePortAddress,
		SharedNodes:     shared,
		Wake:            wake,
		Tenants:         tenants,
		AllowedIssuers:  allowedIssuers,
		SANDomains:      allowedSANDomains,
		MaxLentNodes:    maxLentNodes,

		AllowTestAnnotations: allowTestAnnotations,
		Starts:               &virtualcluster.StartQueue{Max: maxStarting, Timeout: startSlotTimeout},
	}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: workers}); err != nil {
		return fmt.Errorf("setting up the VirtualCluster controller: %w", err)
	}
	if err := (&snapshot.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Settings:  settings,
		Recorder:  mgr.GetEventRecorder("kubenest-operator"),
	}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: workers}); err != nil {
		return fmt.Errorf("setting up the VirtualClusterSnapshot controller: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := (&poolnode.Reconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Kube:          kube,
		Namespace:     namespace,
		ClusterDomain: controlplane.TenantClusterDomain,
		Tenants:       tenants,
		Recorder:      mgr.GetEventRecorder("kubenest-poolnode"),
	}).SetupWithManager(mgr, controller.Options{MaxConcurrentReconciles: workers}); err != nil {
		return fmt.Errorf("setting up the PoolNode controller: %w", err)
	}
	if secureMetrics {
		// The tenants' apiservers' own metrics, behind the same authentication and authorization.
		if err := mgr.AddMetricsServerExtraHandler(virtualcluster.TenantMetricsPath,
			&virtualcluster.TenantMetrics{Reader: mgr.GetClient(), Tenants: tenants}); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting", "version", version.String(), "controlplaneImage", settings.Image,
		"tenantServiceCIDR", settings.ServiceCIDR, "workers", workers, "maxStartingTenants", maxStarting, "startedAt", time.Now().UTC().Format(time.RFC3339))
	return mgr.Start(ctx)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// metricsFilter is the metrics server's authentication and authorization: the host's, for
// secure serving; none otherwise.
func metricsFilter(secure bool) func(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	if !secure {
		return nil
	}
	return filters.WithAuthenticationAndAuthorization
}
