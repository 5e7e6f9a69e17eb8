package virtualcluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/ssa"
	"github.com/kubenest-io/kubenest/internal/wakegate"
	"github.com/kubenest-io/kubenest/pkg/activity"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// Reasons of the Asleep condition; ReasonAsleep is also that of every other condition a
// sleeping tenant holds False on purpose.
const (
	ReasonAsleep        = "Asleep"
	ReasonFallingAsleep = "FallingAsleep"
	ReasonAwake         = "Awake"
)

// awake marks a tenant that slept awake again. The condition stays, False, its transition
// time saying when the tenant woke: the shared node gives the tenant's pods that ran before
// then new host pods, as a rebooted kubelet restarts its pods. A tenant that never slept has
// no Asleep condition.
func (c conditions) awake() {
	cond := meta.FindStatusCondition(*c.List, v1alpha1.ConditionAsleep)
	if cond == nil || cond.Reason == ReasonAwake {
		return
	}
	c.Remove(v1alpha1.ConditionAsleep) // the transition time is now, also from FallingAsleep
	c.Set(v1alpha1.ConditionAsleep, false, ReasonAwake, "awake (spec.sleep.asleep is not set) since this condition's last transition")
}

// wokeAt is when the tenant last woke from sleep; zero if it never slept.
func wokeAt(vc *v1alpha1.VirtualCluster) time.Time {
	if c := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionAsleep); c != nil && c.Reason == ReasonAwake {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// reconcileAsleep keeps a sleeping tenant asleep (spec.sleep.asleep). The control-plane
// Deployment is already applied with no replicas, and the etcd StatefulSet too once no
// control-plane container runs; here the shared node stops and its host pods of the tenant go,
// lent nodes stay lent, and the Asleep condition says whether anything of the tenant still
// runs in the host. Certificates keep being renewed, so the tenant wakes with valid ones.
func (r *Reconciler) reconcileAsleep(ctx context.Context, vc *v1alpha1.VirtualCluster, conds conditions, p *tenantPKI, controlPlanePods int) (reconcile.Result, error) {
	conds.Set(v1alpha1.ConditionEtcdReady, false, ReasonAsleep, "the tenant is asleep: no etcd member runs, and its data stays on its volumes")
	conds.Set(v1alpha1.ConditionAPIServerReady, false, ReasonAsleep, "the tenant is asleep: no control-plane pod runs")

	sharedPods := 0
	if r.SharedNodes != nil {
		// The virtual node stops first: running, it would take its host pods' deletion for
		// pods that ended, and delete them in the tenant too.
		r.SharedNodes.Manager.Stop(vc.Namespace + "/" + vc.Name)
		var err error
		if sharedPods, err = r.removeSharedPods(ctx, vc); err != nil {
			return reconcile.Result{}, err
		}
		if vc.Spec.Nodes.Shared {
			conds.Set(v1alpha1.ConditionSharedNodeReady, false, ReasonAsleep,
				"the tenant is asleep: the virtual node is stopped and the host pods of its pods are removed; they are made again when it wakes")
		}
	}
	if _, err := r.reconcileNodes(ctx, vc, conds); err != nil {
		return reconcile.Result{}, err
	}

	if running := controlPlanePods + sharedPods; running > 0 {
		conds.Set(v1alpha1.ConditionAsleep, false, ReasonFallingAsleep,
			fmt.Sprintf("falling asleep: %d pods of the tenant still run in the host (%d of etcd and the control plane, %d of the shared node)",
				running, controlPlanePods, sharedPods))
		return reconcile.Result{}, nil // the pods' deletion is watched
	}
	msg := "no process of the tenant runs in the host; its first request of a person wakes it, as does spec.sleep.asleep: false"
	if r.Wake == nil {
		msg = "no process of the tenant runs in the host; spec.sleep.asleep: false wakes it"
	}
	conds.Set(v1alpha1.ConditionAsleep, true, ReasonAsleep, msg)
	return reconcile.Result{RequeueAfter: max(time.Second, p.leaves.EarliestRenewal().Sub(conds.Now))}, nil
}

// wakeHoldWindow is how long after a wake the gateway may still answer for the tenant, until
// one of its apiservers is Ready; as long as the gateway holds a connection.
const wakeHoldWindow = 2 * time.Minute

// gatewayHolds says whether the wake gateway answers for the tenant, and on which port: while
// it sleeps, and while it wakes, until one of its apiservers is Ready. A gateway that cannot
// listen leaves the Service as it is (logged): the tenant is then woken by hand only.
func (r *Reconciler) gatewayHolds(ctx context.Context, vc *v1alpha1.VirtualCluster, asleep bool) (int32, error) {
	if r.Wake == nil {
		return 0, nil
	}
	if !asleep {
		// Waking: the status still says asleep (this pass wakes it), or says since when awake.
		c := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionAsleep)
		if c == nil || (c.Reason == ReasonAwake && r.Clock.Since(c.LastTransitionTime.Time) > wakeHoldWindow) {
			return 0, nil
		}
		pods, err := r.componentPods(ctx, vc, naming.ComponentControlPlane)
		if err != nil || len(readyPodIPs(pods)) > 0 {
			return 0, err
		}
	}
	port, err := r.Wake.Hold(client.ObjectKeyFromObject(vc))
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "the wake gateway cannot hold the tenant's endpoint; it refuses connections while the tenant sleeps")
		return 0, nil
	}
	return port, nil
}

// releaseWakeGateway leads the apiserver Service back to the apiservers, and says whether it
// did. The gateway's EndpointSlice goes once the host's EndpointSlice controller leads the
// Service to a Ready apiserver, not before: a Service with neither (the gateway's removed, the
// controller's not made yet) refuses connections, to kubectl calls made the moment the tenant
// is Ready among them; until then the gateway splices what it receives to the awake apiserver.
// It is removed on every pass of an awake tenant that ever slept, as one left behind by an
// operator that restarted meanwhile would lead connections to an address that no longer
// answers.
func (r *Reconciler) releaseWakeGateway(ctx context.Context, vc *v1alpha1.VirtualCluster) (bool, error) {
	if r.Wake == nil || meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionAsleep) == nil {
		return true, nil
	}
	// Read live, and the controller's slices only while the gateway's is there: the operator
	// caches no EndpointSlices.
	gateway := controlplane.WakeEndpointSlice(vc, r.Wake.Address, 0)
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(gateway), &discoveryv1.EndpointSlice{})
	if apierrors.IsNotFound(err) {
		r.Wake.Release(client.ObjectKeyFromObject(vc))
		return true, nil
	}
	if err != nil {
		return false, err
	}
	led := &discoveryv1.EndpointSliceList{}
	if err := r.APIReader.List(ctx, led, client.InNamespace(controlplane.Namespace(vc)), client.MatchingLabels{
		discoveryv1.LabelServiceName: naming.For(vc.Name).APIServerService(),
		discoveryv1.LabelManagedBy:   endpointSliceControllerName,
	}); err != nil {
		return false, err
	}
	if !slices.ContainsFunc(led.Items, func(s discoveryv1.EndpointSlice) bool {
		return slices.ContainsFunc(s.Endpoints, func(e discoveryv1.Endpoint) bool { return ptr.Deref(e.Conditions.Ready, false) })
	}) {
		return false, nil
	}
	r.Wake.Release(client.ObjectKeyFromObject(vc))
	return true, client.IgnoreNotFound(r.Client.Delete(ctx, gateway))
}

// endpointSliceControllerName is the managed-by label of the host's EndpointSlice controller's
// slices.
const endpointSliceControllerName = "endpointslice-controller.k8s.io"

// leadToWakeGateway gives the gateway, listening for the tenant on port, the certificates it
// answers with, and leads the apiserver Service (applied without its selector) there.
func (r *Reconciler) leadToWakeGateway(ctx context.Context, vc *v1alpha1.VirtualCluster, p *tenantPKI, port int32) error {
	creds, err := gatewayCredentials(p)
	if err != nil {
		return err
	}
	r.Wake.SetCredentials(client.ObjectKeyFromObject(vc), creds)
	if err := ssa.Apply(ctx, r.Client, controlplane.WakeEndpointSlice(vc, r.Wake.Address, port), FieldOwner); err != nil {
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // the tenant's namespace is going, and the tenant with it
		}
		return err
	}
	// Without a selector the Service keeps what led to its apiservers: the Endpoints the
	// endpoints controller no longer updates (which the mirroring controller then copies into
	// a slice) and the EndpointSlice controller's slices. Connections sent there would hang.
	svc := naming.For(vc.Name).APIServerService()
	err = r.Client.Delete(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace(vc), Name: svc}})
	if client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing the apiserver Service's Endpoints: %w", err)
	}
	others, err := labels.Parse(discoveryv1.LabelServiceName + "=" + svc + "," + discoveryv1.LabelManagedBy + "!=" + controlplane.WakeSliceManager)
	if err != nil {
		return err
	}
	err = r.Client.DeleteAllOf(ctx, &discoveryv1.EndpointSlice{}, client.InNamespace(controlplane.Namespace(vc)), client.MatchingLabelsSelector{Selector: others})
	return client.IgnoreNotFound(err)
}

// gatewayCredentials are the certificates the wake gateway stands in for the tenant's
// apiserver with: the ones this pass issued or checked, as the apiserver mounts them.
func gatewayCredentials(p *tenantPKI) (*wakegate.Credentials, error) {
	serving, frontProxy := p.leaves[controlplane.LeafAPIServer], p.leaves[controlplane.LeafFrontProxyClient]
	if serving == nil || frontProxy == nil {
		return nil, errors.New("the tenant has no apiserver or front-proxy client certificate")
	}
	clientCAs, apiServerCAs := x509.NewCertPool(), x509.NewCertPool()
	if !clientCAs.AppendCertsFromPEM(p.authorities.ClientCABundle()) || !apiServerCAs.AppendCertsFromPEM(p.authorities.CABundle()) {
		return nil, errors.New("the tenant's CA bundle holds no certificate")
	}
	return &wakegate.Credentials{
		Serving:       serving.TLSCertificate(),
		ClientCAs:     clientCAs,
		FrontProxy:    frontProxy.TLSCertificate(),
		APIServerCAs:  apiServerCAs,
		APIServerName: "kubernetes", // one of the names the serving certificate holds
	}, nil
}

// wakeFor wakes the tenant for a request of a person the wake gateway holds.
func (r *Reconciler) wakeFor(ctx context.Context, key types.NamespacedName, from string) error {
	vc := &v1alpha1.VirtualCluster{}
	if err := r.Client.Get(ctx, key, vc); err != nil {
		return err
	}
	if !vc.Spec.Sleep.Asleep {
		return nil // awake, or woken by an earlier connection
	}
	patch := client.MergeFrom(vc.DeepCopy())
	vc.Spec.Sleep.Asleep = false
	if err := r.Client.Patch(ctx, vc, patch); err != nil {
		return fmt.Errorf("setting spec.sleep.asleep to false: %w", err)
	}
	ctrl.LoggerFrom(ctx).Info("a connection to the sleeping tenant's endpoint woke it", "from", from)
	r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "Woken", "Wake", "a connection to the tenant's endpoint from %s woke it", from)
	return nil
}

// apiServerBackend is the address of a Ready apiserver of the tenant, if it has one: a pod
// that is Ready, or whose apiserver answers /readyz already (its probe comes seconds later).
func (r *Reconciler) apiServerBackend(ctx context.Context, key types.NamespacedName) (string, bool) {
	vc := &v1alpha1.VirtualCluster{}
	if err := r.Client.Get(ctx, key, vc); err != nil { // its status says where its pods are
		return "", false
	}
	pods, err := r.componentPods(ctx, vc, naming.ComponentControlPlane)
	if err != nil {
		return "", false
	}
	for _, p := range pods {
		if p.Status.PodIP == "" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(controlplane.APIServerPort))
		if podutils.IsPodReady(&p) || wakegate.Ready(ctx, addr) {
			return addr, true
		}
	}
	return "", false
}

// sleepIfInactive puts the tenant to sleep once spec.sleep.afterInactivity has passed without
// a request of a person (package activity: the tenant's apiservers record the last one in a
// Lease), counted from the latest of that request, the tenant's creation and its last wake.
// Until then it returns how long is left. The Lease is read only when the time would be up.
func (r *Reconciler) sleepIfInactive(ctx context.Context, vc *v1alpha1.VirtualCluster, tenant kubernetes.Interface, now time.Time) (time.Duration, error) {
	if vc.Spec.Sleep.AfterInactivity == nil || vc.Spec.Sleep.Asleep {
		return 0, nil
	}
	after := vc.Spec.Sleep.AfterInactivity.Duration
	since := vc.CreationTimestamp.Time
	if w := wokeAt(vc); w.After(since) {
		since = w
	}
	if left := since.Add(after).Sub(now); left > 0 {
		return left, nil
	}
	last, err := activity.Read(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("reading the tenant's last activity (Lease %s/%s): %w", activity.LeaseNamespace, activity.LeaseName, err)
	}
	if last.After(since) {
		since = last
	}
	if left := since.Add(after).Sub(now); left > 0 {
		return left, nil
	}
	patch := client.MergeFrom(vc.DeepCopy())
	vc.Spec.Sleep.Asleep = true
	if err := r.Client.Patch(ctx, vc, patch); err != nil {
		return 0, fmt.Errorf("setting spec.sleep.asleep after %s of inactivity: %w", after, err)
	}
	idle := now.Sub(since).Round(time.Second)
	ctrl.LoggerFrom(ctx).Info("no request of a person for spec.sleep.afterInactivity: the tenant sleeps", "afterInactivity", after, "idleFor", idle)
	r.Recorder.Eventf(vc, nil, corev1.EventTypeNormal, "Inactive", "Sleep",
		"no request of a person for %s (spec.sleep.afterInactivity %s): the tenant sleeps until its next request", idle, after)
	return 0, nil
}
