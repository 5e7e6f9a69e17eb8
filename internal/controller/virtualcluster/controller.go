// Package virtualcluster reconciles VirtualClusters: it issues each tenant's certificates, runs
// its etcd and control plane as pods in the control-plane namespace (cpnamespace.go), checks
// the tenant's apiserver answers, and writes the admin kubeconfig Secret.
package virtualcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	networkingclient "k8s.io/client-go/kubernetes/typed/networking/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/internal/controller/cpnamespace"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/internal/tenantclient"
	"github.com/kubenest-io/kubenest/internal/wakegate"
	"github.com/kubenest-io/kubenest/pkg/clustertree"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// FieldOwner is the server-side apply field manager of everything this controller applies.
const FieldOwner = "kubenest-operator"

var fieldOwner = client.FieldOwner(FieldOwner)

// Named requeue intervals. Everything else is woken by watches.
const (
	// probeRetryInterval: a control-plane pod is Ready, but /readyz through the Service did
	// not answer yet: the host is still programming the Service's new endpoint (kube-proxy
	// takes a few hundred milliseconds after the pod is Ready), which refuses connections at
	// once until then, so trying often costs little and each try is a tenant's creation sooner.
	probeRetryInterval = 250 * time.Millisecond
	// healthCheckInterval: how often a Ready tenant's /readyz is checked again.
	healthCheckInterval = 2 * time.Minute
	// deletionRetryInterval: how often deletion checks whether the tenant's objects are gone.
	deletionRetryInterval = time.Second
	// endpointRetryInterval: waiting for a node address or a load balancer.
	endpointRetryInterval = 5 * time.Second
	// issuerRetryInterval: waiting for a cert-manager issuer to exist, be ready or issue the
	// tenant's CA. The issued Secret itself is watched.
	issuerRetryInterval = 5 * time.Second
	// startQueueRetryInterval: the longest a tenant waiting for a start slot goes without
	// looking again. It is told when its turn comes (StartQueue.Admitted) and looks again
	// when a holder's turn times out; this is for anything missed.
	startQueueRetryInterval = 30 * time.Second
)

// admittedBuffer is how many turns (StartQueue.Admitted) may wait to be reconciled.
const admittedBuffer = 1024

// Reconciler reconciles VirtualClusters.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server directly, where the cache could be stale.
	APIReader client.Reader
	Settings  controlplane.Settings
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	// NodePortAddress, when set, is the address NodePort endpoints use instead of a host
	// node's own address (for example a DNS name in front of the nodes).
	NodePortAddress string
	// Tenants is how the operator reaches tenants: this reconciler keeps it up to date with
	// each tenant's authorities, and every other part of the operator reads it.
	Tenants *tenantclient.Registry
	// SharedNodes runs the virtual nodes of tenants with spec.nodes.shared; nil runs none.
	SharedNodes *SharedNodes
	// Wake answers for sleeping tenants: their first connection wakes them. Nil: a sleeping
	// tenant's endpoint refuses connections, and only spec.sleep.asleep wakes it.
	Wake *wakegate.Gateway
	// AllowedIssuers are the cert-manager issuers tenants may have sign their cluster CA
	// (spec.pki); none when empty.
	AllowedIssuers IssuerAllowList
	// SANDomains are the DNS domains the extraSANs of a tenant with spec.pki may be in; none
	// when empty (IP addresses only).
	SANDomains SANDomains
	// MaxLentNodes is the most host nodes one tenant may have lent (--max-lent-nodes-per-tenant);
	// 0 is no limit.
	MaxLentNodes int
	// AllowTestAnnotations honours annotations meant for tests only, such as a short leaf
	// certificate validity.
	AllowTestAnnotations bool
	// Starts bounds how many tenants start their control planes at once; nil: no bound.
	Starts *StartQueue

	// applier skips the applies of a pass that would change nothing.
	applier ssa.Applier
	// ipAddresses holds the addresses of tenants' Service ranges in the host.
	ipAddresses networkingclient.IPAddressInterface
}

// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclusters,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclusters/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kubenest.io,resources=virtualclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets;services,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=apps,resources=statefulsets;deployments,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups=apps,resources=replicasets;controllerrevisions,verbs=get;list;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=pods;configmaps,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=pods/log,verbs=get
// +kubebuilder:rbac:groups="",resources=pods/ephemeralcontainers;pods/resize,verbs=update;patch
// +kubebuilder:rbac:groups="",resources=pods/exec;pods/attach;pods/portforward,verbs=create;get
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch;patch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=get;list;watch
// +kubebuilder:rbac:groups=kubenest.io,resources=poolnodes,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=kubenest.io,resources=poolnodes/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch;create;update;patch;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=endpoints,verbs=delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete;deletecollection

// SetupWithManager registers the controller. It watches what it owns, so a change to a pod,
// StatefulSet, Deployment, Service or Secret of a tenant wakes that tenant's reconcile.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	networking, err := networkingclient.NewForConfigAndClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	r.ipAddresses = networking.IPAddresses()
	if r.Wake != nil {
		r.Wake.Wake, r.Wake.Backend = r.wakeFor, r.apiServerBackend
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			r.Wake.Start(ctx)
			<-ctx.Done()
			return nil
		})); err != nil {
			return err
		}
	}
	b := ctrl.NewControllerManagedBy(mgr)
	if r.Starts != nil {
		// A tenant waiting for a start slot is reconciled the moment its turn comes.
		admitted := make(chan event.TypedGenericEvent[types.NamespacedName], admittedBuffer)
		r.Starts.Admitted = func(tenant types.NamespacedName) {
			select {
			case admitted <- event.TypedGenericEvent[types.NamespacedName]{Object: tenant}:
			default: // full: the tenant looks again by itself (startQueueRetryInterval)
			}
		}
		b = b.WatchesRawSource(source.Channel(admitted, handler.TypedEnqueueRequestsFromMapFunc(
			func(_ context.Context, tenant types.NamespacedName) []reconcile.Request {
				return []reconcile.Request{{NamespacedName: tenant}}
			})))
	}
	return b.
		For(&v1alpha1.VirtualCluster{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		// By label, not owner: in the control-plane namespace nothing is owned by the
		// VirtualCluster (an owner in another namespace counts as absent), and cert-manager's
		// Secret of the tenant's CA is owned by nobody.
		Watches(&appsv1.StatefulSet{}, byVirtualClusterLabel()).
		Watches(&appsv1.Deployment{}, byVirtualClusterLabel()).
		Watches(&corev1.Service{}, byVirtualClusterLabel(), builder.WithPredicates(notClusterTreeChurn)).
		Watches(&corev1.Secret{}, byVirtualClusterLabel(), builder.WithPredicates(notClusterTreeChurn)).
		Watches(&corev1.Pod{}, byVirtualClusterLabel(), builder.WithPredicates(notClusterTreeChurn)).
		Watches(&v1alpha1.PoolNode{}, r.poolNodeToVirtualClusters(), builder.WithPredicates(notOnlyHeartbeat)).
		Watches(&v1alpha1.VirtualClusterSnapshot{}, r.snapshotToRestores()).
		Watches(&corev1.ResourceQuota{}, r.quotaToVirtualClusters()).
		WithOptions(opts).
		Named("virtualcluster").
		Complete(r)
}

// Reconcile brings one VirtualCluster's host objects to its spec and reports in its status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	vc := &v1alpha1.VirtualCluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, vc); err != nil {
		if apierrors.IsNotFound(err) {
			r.applier.Forget(req.NamespacedName)
			r.Starts.Done(req.NamespacedName)
			return reconcile.Result{}, cpnamespace.RemoveIfUnused(ctx, r.Client, r.APIReader, req.Namespace, "")
		}
		return reconcile.Result{}, err
	}
	// First, whatever else this pass does or fails at: a node lent to a tenant that may run
	// privileged pods is marked to be quarantined when it returns, before the tenant's
	// apiserver is given the grant (nodes.go).
	if err := r.quarantine(ctx, vc); err != nil {
		return reconcile.Result{}, countError(vc, err)
	}
	if !vc.DeletionTimestamp.IsZero() {
		result, err := r.reconcileDelete(ctx, vc)
		return result, countError(vc, err)
	}
	if !controllerutil.ContainsFinalizer(vc, naming.FinalizerVirtualCluster) {
		patch := client.MergeFrom(vc.DeepCopy())
		controllerutil.AddFinalizer(vc, naming.FinalizerVirtualCluster)
		if err := r.Client.Patch(ctx, vc, patch); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding finalizer: %w", err)
		}
	}

	before := vc.DeepCopy()
	// Where its control plane lives is settled before anything else of the status: a first
	// pass that writes conditions without it would make the next one take the VirtualCluster
	// for an earlier release's (controlplane.Namespace).
	vc.Status.ControlPlaneNamespace = controlplane.Namespace(vc)
	conds := conditions{condition.Setter{List: &vc.Status.Conditions, Generation: vc.Generation, Now: r.Clock.Now()}}
	result, err := r.reconcileNormal(ctx, vc, conds)
	conds.ready()
	vc.Status.Phase = phase(vc.Status.Conditions, before.Status.Phase, false)
	if err == nil {
		vc.Status.ObservedGeneration = vc.Generation
	}
	if equality.Semantic.DeepEqual(before.Status, vc.Status) {
		// Nothing to write: an empty patch would still be a request.
	} else if perr := r.Client.Status().Patch(ctx, vc, client.MergeFrom(before)); perr != nil {
		err = errors.Join(err, fmt.Errorf("patching status: %w", perr))
	}
	if err == nil && before.Status.Phase != vc.Status.Phase {
		log := ctrl.LoggerFrom(ctx)
		log.Info("phase changed", "from", before.Status.Phase, "to", vc.Status.Phase)
		if vc.Status.Phase == v1alpha1.PhaseReady {
			r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "Ready", "Reconcile", "tenant apiserver ready at %s", vc.Status.Endpoint)
		}
		firstReady(vc, before.Status.Phase, r.Clock.Now())
	}
	return result, countError(vc, err)
}

// reconcileNormal applies the tenant's objects in dependency order, recording each step in a
// condition. It never waits: what is not ready yet is reported and a watch wakes the next pass.
func (r *Reconciler) reconcileNormal(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions) (reconcile.Result, error) {
	// Checks the CRD's rules cannot make, or that objects created before a rule existed skip.
	if _, err := controlplane.ControlPlaneDeployment(vc, r.Settings, ""); err != nil {
		conds.invalidSpec(err)
		return reconcile.Result{}, reconcile.TerminalError(err)
	}

	if err := r.labelForPodSecurity(ctx, vc.Namespace); err != nil {
		return reconcile.Result{}, err
	}
	if reason, problem, err := r.controlPlaneNamespace(ctx, vc); err != nil || problem != "" {
		if problem != "" {
			conds.Set(v1alpha1.ConditionAPIServerReady, false, reason, problem)
			return reconcile.Result{RequeueAfter: deletionRetryInterval}, nil
		}
		return reconcile.Result{}, err
	}
	quotaUsedUp, err := r.controlPlaneQuotas(ctx, vc)
	if err != nil {
		return reconcile.Result{}, err
	}
	cidr, err := r.serviceCIDR(ctx, vc)
	if err != nil {
		conds.applyFailed(v1alpha1.ConditionAPIServerReady, "tenant's Service range")
		return reconcile.Result{}, err
	}
	vc.Status.ServiceCIDR = cidr
	settings := r.Settings.ForTenant(cidr)

	// Services first: the apiserver's certificate names the address its Service got. While
	// the tenant sleeps the Service leads to the wake gateway instead of its apiservers.
	asleep := vc.Spec.Sleep.Asleep && vc.Spec.Etcd.Storage.Ephemeral == nil // the CRD refuses the latter
	gatewayPort, err := r.gatewayHolds(ctx, vc, asleep)
	if err != nil {
		return reconcile.Result{}, err
	}
	apiSvc := controlplane.APIServerService(vc)
	if gatewayPort != 0 {
		apiSvc.Spec.Selector = nil
	}
	for _, svc := range []*corev1.Service{controlplane.EtcdPeerService(vc), controlplane.EtcdClientService(vc), apiSvc} {
		if err := r.apply(ctx, vc, svc); err != nil {
			conds.applyFailed(v1alpha1.ConditionAPIServerReady, "Service "+svc.Name)
			return reconcile.Result{}, err
		}
	}
	var gatewayRetry time.Duration
	if gatewayPort == 0 {
		released, err := r.releaseWakeGateway(ctx, vc)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !released {
			gatewayRetry = time.Second // nothing this controller watches says when it may
		}
	}
	exposure, err := r.exposure(ctx, vc, apiSvc)
	if err != nil {
		return reconcile.Result{}, err
	}

	pki, err := r.reconcilePKI(ctx, vc, exposure, conds)
	if err != nil {
		return reconcile.Result{}, err
	}
	if pki == nil {
		// Waiting for cert-manager (spec.pki) is looked at again: an issuer may be created or
		// become ready without anything this controller watches changing.
		if vc.Spec.PKI != nil {
			return reconcile.Result{RequeueAfter: issuerRetryInterval}, nil
		}
		return reconcile.Result{}, nil
	}

	if gatewayPort != 0 {
		if err := r.leadToWakeGateway(ctx, vc, pki, gatewayPort); err != nil {
			return reconcile.Result{}, err
		}
	}

	if !asleep {
		if queued, err := r.awaitStartSlot(ctx, vc, conds); err != nil || queued {
			retry := startQueueRetryInterval
			if in := r.Starts.NextTimeout(conds.Now); in > 0 {
				retry = min(retry, in)
			}
			return reconcile.Result{RequeueAfter: retry}, err
		}
	}

	// etcd reads its certificate files at every TLS handshake, so renewed leaves reach it
	// through the mounted Secret without a restart (which would lose an ephemeral member's
	// data); only a new etcd CA rolls it.
	etcd := controlplane.EtcdStatefulSet(vc, settings, controlplane.ContentHash(etcdTrust(pki.etcdSecret)))
	if asleep {
		// etcd stops after the control plane: an apiserver that lost etcd waits out its whole
		// grace period on requests that cannot end. A pod whose containers all ended (its
		// phase says so) runs nothing any more, although the kubelet takes about a second more
		// to remove it.
		cpPods, err := r.componentPods(ctx, vc, naming.ComponentControlPlane)
		if err != nil {
			return reconcile.Result{}, err
		}
		if !slices.ContainsFunc(cpPods, mayRun) {
			etcd.Spec.Replicas = ptr.To[int32](0)
		}
	}
	if waiting, err := r.restore(ctx, vc, etcd, settings); err != nil || waiting != "" {
		if waiting != "" {
			conds.Set(v1alpha1.ConditionEtcdReady, false, ReasonRestoreWaiting, waiting)
		}
		return reconcile.Result{}, err
	}
	if err := r.etcdUpdateStrategy(ctx, etcd); err != nil {
		conds.applyFailed(v1alpha1.ConditionEtcdReady, "etcd StatefulSet")
		return reconcile.Result{}, err
	}
	if err := r.apply(ctx, vc, etcd); err != nil {
		conds.applyFailed(v1alpha1.ConditionEtcdReady, "etcd StatefulSet")
		return reconcile.Result{}, err
	}
	deploy, err := controlplane.ControlPlaneDeployment(vc, settings, controlplane.ContentHash(pki.controlPlaneSecret, pki.kubeletSigner))
	if err != nil {
		return reconcile.Result{}, reconcile.TerminalError(err)
	}
	if asleep {
		deploy.Spec.Replicas = ptr.To[int32](0)
	}
	if err := r.apply(ctx, vc, deploy); err != nil {
		conds.applyFailed(v1alpha1.ConditionAPIServerReady, "control-plane Deployment")
		return reconcile.Result{}, err
	}
	if err := r.reconcileDisruptionBudgets(ctx, vc); err != nil {
		conds.applyFailed(v1alpha1.ConditionAPIServerReady, "PodDisruptionBudgets")
		return reconcile.Result{}, err
	}
	etcdPods, err := r.componentPods(ctx, vc, naming.ComponentEtcd)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, p := range controlplane.EtcdPodsToReplace(etcd, etcdPods) {
		ctrl.LoggerFrom(ctx).Info("replacing an ephemeral etcd member for its new CA; its data is lost", "pod", p.Name)
		r.Recorder.Eventf(vc, nil, corev1.EventTypeWarning, "EtcdReplaced", "Reconcile",
			"etcd pod %s trusts an old etcd CA and is replaced; its storage is ephemeral, so the tenant's data is lost", p.Name)
		if err := r.Client.Delete(ctx, &p); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("replacing etcd pod %s: %w", p.Name, err)
		}
	}
	if !asleep {
		conds.etcd(etcd, cmp.Or(podProblem(etcdPods), quotaUsedUp))
	}
	cpPods, err := r.componentPods(ctx, vc, naming.ComponentControlPlane)
	if err != nil {
		return reconcile.Result{}, err
	}
	// The tenant is probed as soon as one control-plane pod is Ready, which the operator sees
	// directly rather than after the host's ReplicaSet and Deployment controllers count it.
	readyIPs := readyPodIPs(cpPods)

	// The kubeconfig can be written as soon as the endpoint is known.
	names := naming.For(vc.Name)
	result := reconcile.Result{}
	if exposure.Endpoint != "" {
		secret, err := controlplane.KubeconfigSecret(vc, pki.authorities, pki.leaves, exposure.Endpoint)
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := r.apply(ctx, vc, secret); err != nil {
			conds.applyFailed(v1alpha1.ConditionKubeconfigReady, "kubeconfig Secret")
			return reconcile.Result{}, err
		}
		vc.Status.Endpoint = exposure.Endpoint
		vc.Status.KubeconfigSecretRef = &v1alpha1.SecretKeyReference{Name: secret.Name, Key: controlplane.KeyKubeconfig}
	} else {
		result.RequeueAfter = endpointRetryInterval
	}
	conds.kubeconfig(exposure, names.KubeconfigSecret())
	// After the control plane is applied, so that its pods start meanwhile: only the copies of
	// the tenant's Services need it, once its apiserver answers.
	if err := r.registerServiceCIDR(ctx, vc); err != nil {
		conds.applyFailed(v1alpha1.ConditionSharedNodeReady, "tenant's Service range in the host (ServiceCIDR)")
		return reconcile.Result{}, err
	}
	if asleep {
		r.Starts.Done(client.ObjectKeyFromObject(vc))
		return r.reconcileAsleep(ctx, vc, conds, pki, len(etcdPods)+len(cpPods))
	}
	conds.awake()
	startRetry, err := r.retryStalledStarts(ctx, slices.Concat(etcdPods, cpPods))
	if err != nil {
		return reconcile.Result{}, err
	}

	var probeErr error
	var inactiveIn time.Duration
	if len(readyIPs) > 0 {
		version, tenant, err := r.checkTenant(ctx, vc, pki)
		if err == nil {
			err = r.checkEndpoint(ctx, exposure, pki.authorities.CABundle())
		}
		probeErr = err
		if err != nil {
			ctrl.LoggerFrom(ctx).V(1).Info("tenant apiserver not reachable yet", "err", err)
			result.RequeueAfter = probeRetryInterval
		} else {
			vc.Status.Version = version
			if err := r.setupTenant(ctx, vc, tenant, readyIPs, exposure.ClusterIP); err != nil {
				conds.Set(v1alpha1.ConditionAPIServerReady, false, ReasonSetupFailed,
					"the tenant's apiserver answers, but applying its built-in objects (RBAC, cluster DNS, kube-proxy) failed; retrying")
				return reconcile.Result{}, fmt.Errorf("setting up the tenant: %w", err)
			}
			if inactiveIn, err = r.sleepIfInactive(ctx, vc, tenant, conds.Now); err != nil {
				return reconcile.Result{}, err
			}
		}
	}
	conds.apiServer(deploy, len(readyIPs), probeErr, cmp.Or(podProblem(cpPods), quotaUsedUp))
	if conds.IsTrue(v1alpha1.ConditionAPIServerReady) {
		r.Starts.Done(client.ObjectKeyFromObject(vc))
	}
	sharedNodeRetry, err := r.reconcileSharedNode(ctx, vc, pki, exposure, conds)
	if err != nil {
		return reconcile.Result{}, err
	}
	lending, err := r.reconcileNodes(ctx, vc, conds)
	if err != nil {
		return reconcile.Result{}, err
	}
	for _, in := range []time.Duration{sharedNodeRetry, lending, startRetry, gatewayRetry} {
		if in > 0 && (result.RequeueAfter == 0 || in < result.RequeueAfter) {
			result.RequeueAfter = in
		}
	}

	if conds.IsTrue(v1alpha1.ConditionAPIServerReady) && conds.IsTrue(v1alpha1.ConditionKubeconfigReady) &&
		conds.IsTrue(v1alpha1.ConditionEtcdReady) && result.RequeueAfter == 0 {
		result.RequeueAfter = min(healthCheckInterval, max(time.Second, pki.leaves.EarliestRenewal().Sub(conds.Now)))
	}
	if inactiveIn > 0 && (result.RequeueAfter == 0 || inactiveIn < result.RequeueAfter) {
		result.RequeueAfter = inactiveIn
	}
	return result, nil
}

// awaitStartSlot holds back a tenant whose control plane does not run (a new tenant, or one
// waking) until the StartQueue lets it start, and says so in its APIServerReady condition. A
// control plane that runs or is starting is never held back.
func (r *Reconciler) awaitStartSlot(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions) (queued bool, err error) {
	if r.Starts == nil || r.Starts.Max <= 0 {
		return false, nil
	}
	d := &appsv1.Deployment{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace(vc), Name: naming.For(vc.Name).ControlPlaneDeployment()}, d)
	if err == nil && (d.Spec.Replicas == nil || *d.Spec.Replicas > 0) {
		return false, nil
	}
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	ok, ahead := r.Starts.Admit(client.ObjectKeyFromObject(vc), conds.Now)
	if ok {
		return false, nil
	}
	conds.Set(v1alpha1.ConditionAPIServerReady, false, ReasonQueued, fmt.Sprintf(
		"waiting to start: %d tenants are starting or ahead in the queue, and this host starts %d at a time (the operator's --max-starting-tenants)",
		ahead, r.Starts.Max))
	return true, nil
}

// apply server-side applies obj, one of vc's objects of a kind the operator's cache watches,
// unless that would change nothing (ssa.Applier).
func (r *Reconciler) apply(ctx context.Context, vc *v1alpha1.VirtualCluster, obj client.Object) error {
	return r.applier.Apply(ctx, r.Client, client.ObjectKeyFromObject(vc), obj, FieldOwner)
}

// etcdUpdateStrategy moves an existing etcd StatefulSet to the update strategy of want before
// want is applied, when that is OnDelete: the API server defaulted rollingUpdate under the old
// RollingUpdate, which no manager owns and an apply cannot remove, and which OnDelete forbids.
// Only the strategy changes here, so nothing rolls.
func (r *Reconciler) etcdUpdateStrategy(ctx context.Context, want *appsv1.StatefulSet) error {
	current := &appsv1.StatefulSet{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: want.Namespace, Name: want.Name}, current)
	if apierrors.IsNotFound(err) || (err == nil && (want.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType ||
		current.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType)) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading StatefulSet %s: %w", want.Name, err)
	}
	patch := []byte(`{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`)
	if err := r.Client.Patch(ctx, current, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("updating StatefulSet %s OnDelete: %w", want.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("etcd's StatefulSet updates OnDelete now: its ephemeral member is not restarted by upgrades", "statefulSet", want.Name)
	return nil
}

// reconcileDisruptionBudgets keeps a PodDisruptionBudget for a 3-member etcd and for a control
// plane of several replicas, and none for a single pod.
func (r *Reconciler) reconcileDisruptionBudgets(ctx context.Context, vc *v1alpha1.VirtualCluster) error {
	want, unwanted := controlplane.DisruptionBudgets(vc)
	for _, pdb := range want {
		if err := r.apply(ctx, vc, pdb); err != nil {
			return err
		}
	}
	for _, name := range unwanted {
		pdb := &policyv1.PodDisruptionBudget{}
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: controlplane.Namespace(vc), Name: name}, pdb)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading PodDisruptionBudget %s: %w", name, err)
		}
		if err := r.Client.Delete(ctx, pdb); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting PodDisruptionBudget %s: %w", name, err)
		}
	}
	return nil
}

// etcdTrust is the part of the etcd certificates Secret etcd does not reload: the CA.
func etcdTrust(s *corev1.Secret) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: s.ObjectMeta, Data: map[string][]byte{controlplane.KeyCACert: s.Data[controlplane.KeyCACert]}}
}

// exposure reads where the apiserver Service was published.
func (r *Reconciler) exposure(ctx context.Context, vc *v1alpha1.VirtualCluster, svc *corev1.Service) (controlplane.Exposure, error) {
	addr := ""
	if svc.Spec.Type == corev1.ServiceTypeNodePort {
		addr = r.NodePortAddress
		if addr == "" {
			nodes := &corev1.NodeList{}
			if err := r.Client.List(ctx, nodes); err != nil {
				return controlplane.Exposure{}, fmt.Errorf("listing nodes: %w", err)
			}
			current := ""
			if u, err := url.Parse(vc.Status.Endpoint); err == nil {
				current = u.Hostname()
			}
			addr = controlplane.PickNodeAddress(nodes.Items, current)
		}
	}
	return controlplane.ResolveExposure(vc, svc, addr), nil
}

// componentPods lists a tenant's pods of one component, from the operator's cache.
func (r *Reconciler) componentPods(ctx context.Context, vc *v1alpha1.VirtualCluster, component string) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(controlplane.Namespace(vc)), client.MatchingLabels(naming.For(vc.Name).Labels(component))); err != nil {
		return nil, fmt.Errorf("listing %s pods: %w", component, err)
	}
	return pods.Items, nil
}

// mayRun says whether a container of p may still run: its phase is not Succeeded or Failed,
// which the kubelet sets once every container has ended.
func mayRun(p corev1.Pod) bool {
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// readyPodIPs are the addresses of the pods that are Ready and not going away.
func readyPodIPs(pods []corev1.Pod) []string {
	var ips []string
	for _, p := range pods {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && podutils.IsPodReady(&p) {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips
}

// poolNodeToVirtualClusters maps a PoolNode to the tenants it concerns: the one it is lent
// to, the one its kubelet still serves, and every tenant asking for nodes (a node that became
// free may be theirs now).
func (r *Reconciler) poolNodeToVirtualClusters() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		pn, ok := obj.(*v1alpha1.PoolNode)
		if !ok {
			return nil
		}
		vcs := &v1alpha1.VirtualClusterList{}
		if err := r.Client.List(ctx, vcs); err != nil {
			return nil
		}
		var out []reconcile.Request
		for _, vc := range vcs.Items {
			concerned := len(vc.Spec.Nodes.Promotions) > 0 || pn.Status.Agent.TenantUID == vc.UID ||
				(pn.Spec.Tenant != nil && pn.Spec.Tenant.UID == vc.UID)
			if concerned {
				out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: vc.Namespace, Name: vc.Name}})
			}
		}
		return out
	})
}

// notOnlyHeartbeat passes every PoolNode event but an update that only moved its agent's
// heartbeat: each would re-run the reconcile of every tenant asking for nodes. A heartbeat
// that matters to a tenant changes more: the first one, and one after the node was
// unreachable, which its controller's phase follows.
var notOnlyHeartbeat = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	before, bok := e.ObjectOld.(*v1alpha1.PoolNode)
	after, aok := e.ObjectNew.(*v1alpha1.PoolNode)
	if !bok || !aok || before.Status.Agent.HeartbeatTime.IsZero() {
		return true
	}
	b, a := before.DeepCopy(), after.DeepCopy()
	for _, pn := range []*v1alpha1.PoolNode{b, a} {
		pn.ResourceVersion, pn.ManagedFields, pn.Status.Agent.HeartbeatTime = "", nil, metav1.Time{}
	}
	return !equality.Semantic.DeepEqual(b, a)
}}

// notClusterTreeChurn passes every event but the creation and change of what clustertree
// makes in the host for a tenant's workloads (the shared node's host pods, its copies of
// Services, ConfigMaps and Secrets): they come and change with the tenant's workloads, and
// each would run the tenant's whole reconcile again (its applies, its probe). Only their
// deletion matters to it: a tenant falling asleep waits for its host pods to go.
var notClusterTreeChurn = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return !madeByClusterTree(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool { return !madeByClusterTree(e.ObjectNew) },
}

func madeByClusterTree(obj client.Object) bool {
	return obj.GetLabels()[clustertree.LabelOrigin] == clustertree.OriginClusterTree
}

// byVirtualClusterLabel maps a tenant's host object (a component's pod, a Secret) to its
// VirtualCluster, by its labels: in a control-plane namespace, the VirtualCluster is in the
// namespace it was made for.
func byVirtualClusterLabel() handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []reconcile.Request {
		name := obj.GetLabels()[naming.LabelVirtualCluster]
		if name == "" {
			return nil
		}
		ns := obj.GetNamespace()
		if tenants := obj.GetLabels()[naming.LabelVirtualClusterNamespace]; tenants != "" && ns == naming.ControlPlaneNamespace(tenants) {
			ns = tenants
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
	})
}
