package clustertree

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	vklog "github.com/virtual-kubelet/virtual-kubelet/log"
	vkklog "github.com/virtual-kubelet/virtual-kubelet/log/klogv2"
	"github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/iphold"
	"github.com/kubenest-io/kubenest/pkg/naming"
	"github.com/kubenest-io/kubenest/pkg/sharednode"
)

// Config is one tenant's virtual node.
type Config struct {
	// VirtualCluster, VirtualClusterUID and HostNamespace say whose node this is: host objects
	// go into HostNamespace, owned by the VirtualCluster.
	VirtualCluster    string
	VirtualClusterUID types.UID
	HostNamespace     string
	// ControlPlaneNamespace is where the tenant's control-plane pods are
	// (controlplane.Namespace); empty, HostNamespace.
	ControlPlaneNamespace string
	// NodeName is the virtual node's name in the tenant.
	NodeName string
	// Host reaches the host cluster; Tenant reaches the tenant's apiserver as clustertree.
	Host, Tenant *rest.Config
	// ServingCert serves the virtual node's kubelet API; ClientCA verifies the client
	// certificate the tenant's apiserver presents to it.
	ServingCert tls.Certificate
	ClientCA    []byte
	// NodeAddress is the IP the tenant's apiserver reaches the kubelet API at; ListenAddress
	// where it listens (port 0 picks a free one).
	NodeAddress   string
	ListenAddress string
	// APIServerHost and APIServerPort are where host pods reach the tenant's apiserver.
	APIServerHost string
	APIServerPort int32
	// ClusterDNS is the tenant's cluster DNS address, its pods' resolver.
	ClusterDNS string
	// ServiceCIDR is the tenant's Service range, its slice of the host's tenant range, as CIDR
	// text (status.serviceCIDR, "10.254.3.0/24"): a tenant Service is copied into the host, with
	// its ClusterIPs, only when they all are in it; the others get a ClusterIPOutsideRange
	// event. Empty: the caller did not say, and no Service is copied (copies are removed).
	ServiceCIDR string
	// TenantAddresses are the addresses of the tenant's pods the host knows beside those of its
	// shared-node pods (which clustertree knows itself): its control-plane pods' (its cluster
	// DNS answers there), and the ranges of the host nodes lent to it (their spec.podCIDRs,
	// their own addresses as /32 or /128). With its shared-node pods' addresses, they are what
	// the endpoint addresses of its EndpointSlices copied into the host may be; the others are
	// dropped with an EndpointsDropped event. Called on each Service sync, so it should read a
	// cache; an error fails that sync, which is retried. Nil: none.
	TenantAddresses func(context.Context) ([]netip.Prefix, error)
	// WokeAt is when the tenant last woke from sleep (zero: it never slept). Asleep, its host
	// pods were removed: a tenant pod that started before then and has no host pod gets a new
	// one, its containers started afresh as after a node's reboot. Other pods that ran and lost
	// their host pod while nobody watched, and those that never restart (restartPolicy Never),
	// are deleted, as pods of a node that vanished are.
	WokeAt time.Time
	// Capacity is what the host's shared nodes can give, for the virtual node's status.
	Capacity func(context.Context) (corev1.ResourceList, error)
	// Quota is the most of each resource it names that the tenant's pods on the virtual node
	// may ask the host for together (their requests; "pods" counts them): the node's
	// allocatable resources, and what clustertree admits pods against (quota.go). Nil: all the
	// host's shared capacity.
	Quota corev1.ResourceList
	// CopyBytes bounds the bytes of the host copies of the tenant's ConfigMaps and Secrets its
	// pods on the virtual node refer to, and of its Services and EndpointSlices
	// (copybudget.go). 0: no bound.
	CopyBytes int64
	// FinishedPods is how many of the tenant's ended pods on the virtual node keep their host
	// pods, and so their containers' logs; the host pods of older ones are removed
	// (finished.go). 0: all are kept.
	FinishedPods int
	// HostsImage holds nest-hosts (the KubeNest image), pulled with HostsImagePullPolicy: the
	// /etc/hosts writer of pods with a subdomain (Translator.HostsImage).
	HostsImage           string
	HostsImagePullPolicy corev1.PullPolicy
	// OptIn taints the virtual node with sharednode.Taint: the tenant's scheduler puts there
	// only the pods that tolerate it (spec.nodes.sharedPlacement: OptIn). False takes the taint
	// off; other taints (the tenant's own) are left as they are.
	OptIn bool
	// KubeletVersion is the version the virtual node reports.
	KubeletVersion string
	// Workers sync tenant pods in parallel; SyncPeriod paces the upkeep of host copies and
	// the refresh of the node's capacity.
	Workers    int
	SyncPeriod time.Duration
}

// Run runs the virtual node until ctx ends: it registers the node in the tenant, serves its
// kubelet API, and runs the tenant's pods bound to it as host pods.
func Run(ctx context.Context, cfg Config) error {
	log := klog.FromContext(ctx).WithValues("virtualCluster", klog.KRef(cfg.HostNamespace, cfg.VirtualCluster), "node", cfg.NodeName)
	ctx = klog.NewContext(ctx, log)
	ctx = vklog.WithLogger(ctx, vkklog.New(vklog.Fields{"virtualCluster": cfg.HostNamespace + "/" + cfg.VirtualCluster}))
	if cfg.Workers == 0 {
		cfg.Workers = runtime.NumCPU()
	}
	if cfg.SyncPeriod == 0 {
		cfg.SyncPeriod = 30 * time.Second
	}
	host, err := kubernetes.NewForConfig(cfg.Host)
	if err != nil {
		return err
	}
	var serviceCIDR netip.Prefix
	if cfg.ServiceCIDR != "" {
		if serviceCIDR, err = netip.ParsePrefix(cfg.ServiceCIDR); err != nil {
			return fmt.Errorf("the tenant's Service range: %w", err)
		}
	}
	tenant, err := kubernetes.NewForConfig(cfg.Tenant)
	if err != nil {
		return err
	}
	tenantMeta, err := metadata.NewForConfig(cfg.Tenant)
	if err != nil {
		return err
	}
	hostMeta, err := metadata.NewForConfig(cfg.Host)
	if err != nil {
		return err
	}
	if err := ensureServiceAccount(ctx, host, cfg.HostNamespace); err != nil {
		return err
	}

	// The host objects of this tenant only: its namespace, its labels.
	hostInformers := informers.NewSharedInformerFactoryWithOptions(host, cfg.SyncPeriod,
		informers.WithNamespace(cfg.HostNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.SelectorFromSet(HostSelector(cfg.VirtualCluster)).String()
		}))
	hostPods := hostInformers.Core().V1().Pods()
	// The host copies of the tenant's ConfigMaps and Secrets, by their metadata: what a tenant
	// copies into the host is never all in the operator's memory.
	hostCopies := metadatainformer.NewFilteredSharedInformerFactory(hostMeta, cfg.SyncPeriod, cfg.HostNamespace, func(o *metav1.ListOptions) {
		o.LabelSelector = labels.SelectorFromSet(HostSelector(cfg.VirtualCluster)).String()
	})
	hostConfigMaps := hostCopies.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps"))
	hostSecrets := hostCopies.ForResource(corev1.SchemeGroupVersion.WithResource("secrets"))

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: tenant.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubenest-clustertree", Host: cfg.NodeName})

	capacity, err := cfg.Capacity(ctx)
	if err != nil {
		return fmt.Errorf("reading the host's shared capacity: %w", err)
	}
	listener, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return fmt.Errorf("kubelet API listener: %w", err)
	}
	defer listener.Close()
	port := listener.Addr().(*net.TCPAddr).Port

	// The VirtualCluster controls its host objects: a drain (lending a node) evicts its host
	// pods, and the tenant's own controllers make them again elsewhere.
	owner := metav1.OwnerReference{APIVersion: "kubenest.io/v1alpha1", Kind: "VirtualCluster",
		Name: cfg.VirtualCluster, UID: cfg.VirtualClusterUID, Controller: ptr.To(true)}
	// The resources the host's nodes have had, since this run started: the extended resources a
	// host pod may ask the host for. A resource stays once seen, so a pod asks for a GPU even
	// while the GPU nodes are not Ready (and waits for them).
	hostResources := &resourceNames{}
	hostResources.add(capacity)
	tr := Translator{VirtualCluster: cfg.VirtualCluster, HostNamespace: cfg.HostNamespace, NodeName: cfg.NodeName,
		APIServerHost: cfg.APIServerHost, APIServerPort: cfg.APIServerPort, ClusterDNS: cfg.ClusterDNS,
		ServiceCIDR: serviceCIDR.Masked(), HostsImage: cfg.HostsImage, HostsImagePullPolicy: cfg.HostsImagePullPolicy,
		HostHas: hostResources.has}
	// The node's address: its own ClusterIP, where its NodePorts are served (nodeaddress.go);
	// the operator's address when the tenant has no Service range, or holds that ClusterIP for a
	// Service of its own.
	address, kubeletPort := cfg.NodeAddress, port
	var nodeAddr *nodeAddress
	var held *iphold.Range
	if serviceCIDR.IsValid() {
		held = &iphold.Range{Client: host.NetworkingV1().IPAddresses(), CIDR: serviceCIDR.Masked(), Name: naming.ServiceCIDR(cfg.ServiceCIDR)}
		kubeletAddr, err := netip.ParseAddr(cfg.NodeAddress)
		if err != nil {
			return fmt.Errorf("the virtual node's kubelet address: %w", err)
		}
		nodeAddr = &nodeAddress{
			tr: tr, owner: owner,
			addr: SharedNodeAddress(serviceCIDR), kubelet: netip.AddrPortFrom(kubeletAddr, uint16(port)),
			host: host, tenant: tenant, held: held, log: log.WithName("address"),
		}
		switch err := nodeAddr.reserve(ctx); {
		case apierrors.IsInvalid(err) || apierrors.IsAlreadyExists(err):
			log.Error(err, "the shared node keeps the operator's address, and serves no NodePort")
			nodeAddr = nil
		case err != nil:
			return err
		default:
			address, kubeletPort = nodeAddr.addr.String(), KubeletPort
		}
	}

	mux := http.NewServeMux()
	var prov *provider
	copies := newCopyBudget(cfg.CopyBytes) // counted once the host copies' cache is synced
	vkTenant := &statusOnlyClient{Interface: tenant, meta: tenantMeta}
	vnode, err := nodeutil.NewNode(cfg.NodeName, func(pc nodeutil.ProviderConfig) (nodeutil.Provider, node.NodeProvider, error) {
		prov = &provider{
			tr:    tr,
			owner: owner,
			host:  host, hostREST: cfg.Host, hostPods: hostPods.Lister(), hostPodIndex: hostPods.Informer().GetIndexer(), tenant: tenant,
			tenantPods: pc.Pods, tenantConfigMaps: pc.ConfigMaps, tenantSecrets: pc.Secrets, tenantServices: pc.Services,
			recorder: recorder, log: log, refused: map[string]*corev1.Pod{},
			quota: cfg.Quota, admitted: map[types.UID]admission{}, copies: copies,
			finishedPods: cfg.FinishedPods, ended: make(chan struct{}, 1),
			unreferencedGrace: max(cfg.SyncPeriod, 5*time.Second), wokeAt: cfg.WokeAt,
		}
		vkTenant.pods = pc.Pods
		mux.Handle("/metrics", metricsHandler(cfg.NodeName, pc.Pods)) // the provider's routes serve the rest, /metrics/resource among them
		describeNode(pc.Node, cfg, address, kubeletPort, capacity)
		return prov, &nodeProvider{node: pc.Node.DeepCopy(), capacity: cfg.Capacity, quota: cfg.Quota, read: hostResources.add, period: cfg.SyncPeriod}, nil
	},
		nodeutil.WithClient(vkTenant),
		nodeutil.AttachProviderRoutes(mux),
		func(c *nodeutil.NodeConfig) error {
			c.NumWorkers = cfg.Workers
			c.InformerResyncPeriod = cfg.SyncPeriod
			c.EventRecorder = recorder
			// Environment variables are translated here, keeping Secret references; virtual-kubelet
			// would write Secret values into the host pod's spec.
			c.SkipDownwardAPIResolution = true
			return nil
		})
	if err != nil {
		return fmt.Errorf("creating the virtual node: %w", err)
	}

	_, err = hostPods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { prov.onHostPod(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { prov.onHostPod(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				prov.onHostPodDeleted(pod)
			}
		},
	})
	if err != nil {
		return err
	}
	if err := hostPods.Informer().AddIndexers(cache.Indexers{indexRefs: refsIndex}); err != nil {
		return err
	}
	hostConfigMaps.Informer()
	hostSecrets.Informer()
	hostCopies.Start(ctx.Done())
	defer hostCopies.Shutdown()
	for typ, ok := range hostCopies.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("host %v cache did not sync", typ)
		}
	}
	for kind, copied := range map[string]cache.GenericLister{kindConfigMap: hostConfigMaps.Lister(), kindSecret: hostSecrets.Lister()} {
		objs, err := metadataObjects(copied.List(labels.Everything()))
		if err != nil {
			return err
		}
		copies.count(kind, objs)
	}
	factories := []informers.SharedInformerFactory{hostInformers}
	var controlPlane cache.SharedIndexInformer
	if nodeAddr != nil {
		// The tenant's control-plane pods, where its NodePorts lead.
		f := informers.NewSharedInformerFactoryWithOptions(host, cfg.SyncPeriod,
			informers.WithNamespace(cmp.Or(cfg.ControlPlaneNamespace, cfg.HostNamespace)),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.LabelSelector = labels.SelectorFromSet(naming.For(cfg.VirtualCluster).Labels(naming.ComponentControlPlane)).String()
			}))
		controlPlane = f.Core().V1().Pods().Informer()
		factories = append(factories, f)
	}
	for _, f := range factories {
		f.Start(ctx.Done())
		defer f.Shutdown()
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				return fmt.Errorf("host %v cache did not sync", typ)
			}
		}
	}

	auth, err := kubeletAuth(tenant, cfg)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: nodeutil.WithAuth(auth, mux), ReadHeaderTimeout: 30 * time.Second}
	tlsListener := tls.NewListener(listener, &tls.Config{
		Certificates: []tls.Certificate{cfg.ServingCert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    certPool(cfg.ClientCA),
		MinVersion:   tls.VersionTLS12,
	})
	var wg sync.WaitGroup
	defer wg.Wait()
	// What runs beside the node stops with it, also when it stops on an error of its own.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() {
		if err := server.Serve(tlsListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "kubelet API server stopped")
		}
	})
	defer server.Close()
	wg.Go(func() {
		prov.maintain(ctx, cfg.SyncPeriod,
			func() ([]metav1.Object, error) {
				return metadataObjects(hostConfigMaps.Lister().List(labels.Everything()))
			},
			func() ([]metav1.Object, error) {
				return metadataObjects(hostSecrets.Lister().List(labels.Everything()))
			})
	})

	wg.Go(func() { prov.keepFinished(ctx, cfg.FinishedPods) })

	// Event times have whole seconds: one of this second may be new.
	started := time.Now().Truncate(time.Second)
	wg.Go(func() {
		if err := prov.mirrorHostEvents(ctx, host, started); err != nil {
			log.Error(err, "the host kubelet's events about the tenant's pods are not passed to the tenant")
		}
	})
	wg.Go(func() {
		if err := prov.followTenantRefs(ctx, cfg.Tenant, cfg.SyncPeriod); err != nil {
			log.Error(err, "host copies of tenant ConfigMaps and Secrets follow the tenant only every sync period")
		}
	})
	wg.Go(func() {
		if err := runServiceMirror(ctx, mirrorConfig{
			tr: prov.tr, owner: prov.owner, host: host, held: held, tenant: tenant, hostPods: hostPods.Informer(),
			lent: cfg.TenantAddresses, recorder: recorder, resync: cfg.SyncPeriod, workers: 2, copies: copies,
			node: nodeAddr, controlPlane: controlPlane,
		}); err != nil {
			log.Error(err, "tenant Services are not copied into the host")
		}
	})

	wg.Go(func() {
		select {
		case <-vnode.Ready():
			keepTaint(ctx, tenant, cfg.NodeName, cfg.OptIn)
		case <-vnode.Done():
		case <-ctx.Done():
		}
	})

	log.Info("starting the virtual node", "kubeletAPI", net.JoinHostPort(cfg.NodeAddress, strconv.Itoa(port)), "optIn", cfg.OptIn)
	err = vnode.Run(ctx)
	if ctx.Err() != nil {
		log.Info("virtual node stopped")
		return nil
	}
	return err
}

// kubeletAuth authenticates the tenant apiserver's client certificate (or a tenant token) and
// asks the tenant whether the caller may use this node's kubelet API, as a kubelet does.
func kubeletAuth(tenant kubernetes.Interface, cfg Config) (nodeutil.Auth, error) {
	ca, err := dynamiccertificates.NewStaticCAContent("tenant-ca", cfg.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("tenant CA: %w", err)
	}
	return nodeutil.WebhookAuth(tenant, cfg.NodeName, func(c *nodeutil.WebhookAuthConfig) error {
		c.AuthnConfig.ClientCertificateCAContentProvider = ca
		return nil
	})
}

func certPool(pem []byte) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pool
}

// metadataObjects are the objects of a metadata informer's lister.
func metadataObjects(items []kruntime.Object, err error) ([]metav1.Object, error) {
	out := make([]metav1.Object, 0, len(items))
	for _, i := range items {
		if m, ok := i.(*metav1.PartialObjectMetadata); ok {
			out = append(out, m)
		}
	}
	return out, err
}

// Labels of the virtual node.
const (
	LabelVirtualNode = sharednode.LabelVirtualNode
)

// describeNode fills in what the virtual node tells the tenant about itself.
func describeNode(n *corev1.Node, cfg Config, address string, port int, capacity corev1.ResourceList) {
	n.Labels = map[string]string{
		corev1.LabelHostname:   cfg.NodeName,
		corev1.LabelOSStable:   "linux",
		corev1.LabelArchStable: runtime.GOARCH,
		"kubernetes.io/role":   "shared",
		"type":                 "virtual-kubelet",
		LabelVirtualNode:       "true",
		naming.LabelManagedBy:  naming.ManagedByValue,
	}
	n.Spec.Taints, _ = withTaint(n.Spec.Taints, cfg.OptIn)
	now := metav1.Now()
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	n.Status = corev1.NodeStatus{
		Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{
			cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "the shared node runs pods on the host cluster's nodes"),
			cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", ""),
			cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", ""),
			cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", ""),
			cond(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "RouteCreated", ""),
		},
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: address},
			{Type: corev1.NodeHostName, Address: cfg.NodeName},
		},
		Capacity:        capacity,
		Allocatable:     Allocatable(capacity, cfg.Quota),
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:          cfg.KubeletVersion,
			OperatingSystem:         "linux",
			Architecture:            runtime.GOARCH,
			ContainerRuntimeVersion: "kubenest://clustertree",
			OSImage:                 "KubeNest shared node",
		},
	}
}

// nodeProvider keeps the virtual node's capacity that of the host's shared nodes (its
// allocatable resources within quota), and passes what it read to read. Only what the host
// gives is written: a resource the tenant adds to the node's status itself (an extended
// resource of its own accounting) stays, as virtual-kubelet patches only what it wrote before.
type nodeProvider struct {
	node     *corev1.Node
	capacity func(context.Context) (corev1.ResourceList, error)
	quota    corev1.ResourceList
	read     func(corev1.ResourceList)
	period   time.Duration
}

// resourceNames is a set of resource names that only grows.
type resourceNames struct{ names sync.Map }

func (r *resourceNames) add(l corev1.ResourceList) {
	for name := range l {
		r.names.Store(name, true)
	}
}

func (r *resourceNames) has(name corev1.ResourceName) bool {
	_, ok := r.names.Load(name)
	return ok
}

func (np *nodeProvider) Ping(context.Context) error { return nil }

func (np *nodeProvider) NotifyNodeStatus(ctx context.Context, cb func(*corev1.Node)) {
	go func() {
		t := time.NewTicker(np.period)
		defer t.Stop()
		for {
			if res, err := np.capacity(ctx); err == nil {
				np.read(res)
				n := np.node.DeepCopy()
				n.Status.Capacity, n.Status.Allocatable = res, Allocatable(res, np.quota)
				cb(n)
			} else if ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "reading the host's shared capacity")
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// HostServiceAccount is the host ServiceAccount of every host pod of the tenants of a host
// namespace: KubeNest's own, with no token and no image pull Secrets. Under the namespace's
// default ServiceAccount, the host's admission would give a tenant pod that names no pull
// Secret those of the default one: a platform's registry credentials, put there for its own
// pods, would pull any image they reach for the tenant.
const HostServiceAccount = "kubenest-shared-node"

// ensureServiceAccount creates HostServiceAccount in the host namespace if it is not there.
func ensureServiceAccount(ctx context.Context, host kubernetes.Interface, namespace string) error {
	sa := &corev1.ServiceAccount{
		ObjectMeta:                   metav1.ObjectMeta{Name: HostServiceAccount, Namespace: namespace, Labels: map[string]string{naming.LabelManagedBy: naming.ManagedByValue}},
		AutomountServiceAccountToken: ptr.To(false),
	}
	_, err := host.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating the host ServiceAccount of the tenant's pods, %s/%s: %w", namespace, HostServiceAccount, err)
	}
	return nil
}

// keepTaint puts sharednode.Taint on the tenant's node when want, and takes it off when not:
// virtual-kubelet writes a node's spec only when it creates the node, and a node made before
// spec.nodes.sharedPlacement changed keeps what it had. With want, it watches the node and puts
// the taint on whenever it lacks it (at the watch's first list, and when the tenant's admin
// took it off): the VirtualCluster's spec decides, as it does the rest of the node.
func keepTaint(ctx context.Context, tenant kubernetes.Interface, name string, want bool) {
	if !want {
		setTaint(ctx, tenant, name, false)
		return
	}
	lost := make(chan struct{}, 1)
	check := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			if _, changed := withTaint(n.Spec.Taints, true); changed {
				select {
				case lost <- struct{}{}:
				default:
				}
			}
		}
	}
	lw := cache.NewListWatchFromClient(tenant.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll, fields.OneTermEqualSelector("metadata.name", name))
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{ListerWatcher: lw, ObjectType: &corev1.Node{},
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: check, UpdateFunc: func(_, obj any) { check(obj) }}})
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { informer.Run(ctx.Done()) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			setTaint(ctx, tenant, name, true)
		}
	}
}

// setTaint puts sharednode.Taint on the tenant's node, or takes it off, trying every 5 s until
// it is done.
func setTaint(ctx context.Context, tenant kubernetes.Interface, name string, want bool) {
	log := klog.FromContext(ctx)
	_ = wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			n, err := tenant.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			taints, changed := withTaint(n.Spec.Taints, want)
			if !changed {
				return nil
			}
			n.Spec.Taints = taints
			if _, err := tenant.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return err
			}
			log.Info("the shared node's taint changed", "taint", sharednode.Taint.ToString(), "tainted", want)
			return nil
		})
		if err != nil && ctx.Err() == nil {
			log.Error(err, "the shared node's taint is not as spec.nodes.sharedPlacement says yet; trying again in 5s", "tainted", want)
		}
		return err == nil, nil
	})
}

// withTaint is taints with sharednode.Taint when want and without it when not, and whether
// that changed them.
func withTaint(taints []corev1.Taint, want bool) ([]corev1.Taint, bool) {
	i := slices.IndexFunc(taints, func(t corev1.Taint) bool { return t.MatchTaint(&sharednode.Taint) })
	switch {
	case want && i < 0:
		return append(slices.Clip(taints), sharednode.Taint), true
	case !want && i >= 0:
		return slices.Delete(slices.Clone(taints), i, i+1), true
	}
	return taints, false
}
