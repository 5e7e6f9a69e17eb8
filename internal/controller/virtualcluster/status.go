package virtualcluster

import (
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

// Reasons of the VirtualCluster's conditions. Messages are written here, never copied from
// errors, so they stay stable and carry no secrets.
const (
	ReasonIssued              = "Issued"
	ReasonCAInvalid           = "CAInvalid"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonApplyFailed         = "ApplyFailed"
	ReasonWaitingForPods      = "WaitingForPods"
	ReasonMembersReady        = "MembersReady"
	ReasonNotReachable        = "NotReachable"
	ReasonReady               = "Ready"
	ReasonWaitingForEndpoint  = "WaitingForEndpoint"
	ReasonWritten             = "Written"
	ReasonNotReady            = "NotReady"
	ReasonDeleting            = "Deleting"
	ReasonWaitingForAPIServer = "WaitingForAPIServer"
	ReasonNotEnoughNodes      = "NotEnoughNodes"
	ReasonOverNodeLimit       = "OverNodeLimit"
	ReasonLending             = "Lending"
	ReasonCertManagerMissing  = "CertManagerMissing"
	ReasonIssuerNotReady      = "IssuerNotReady"
	ReasonIssuerNotAllowed    = "IssuerNotAllowed"
	ReasonExtraSANNotAllowed  = "ExtraSANNotAllowed"
	ReasonCAPending           = "CAPending"
	ReasonSetupFailed         = "SetupFailed"
	ReasonQueued              = "Queued"
)

// conditions are the VirtualCluster's conditions during one pass, with a setter per step.
type conditions struct{ condition.Setter }

// invalidSpec marks every condition false: the spec must change before anything proceeds.
func (c conditions) invalidSpec(err error) {
	msg := "the spec cannot be carried out: " + err.Error()
	for _, t := range []string{v1alpha1.ConditionCertificatesReady, v1alpha1.ConditionEtcdReady,
		v1alpha1.ConditionAPIServerReady, v1alpha1.ConditionKubeconfigReady} {
		c.Set(t, false, ReasonInvalidSpec, msg)
	}
}

func (c conditions) applyFailed(typ, what string) {
	c.Set(typ, false, ReasonApplyFailed, "could not apply the "+what+" in the host; retrying")
}

func (c conditions) certificatesIssued(leaves controlplane.Leaves, caProblem string) {
	leaf, at := leaves.EarliestExpiry()
	msg := fmt.Sprintf("%d certificates valid; the first to expire is %s, at %s", len(leaves), leaf, at.UTC().Format(time.RFC3339))
	if caProblem != "" {
		msg += "; " + caProblem
	}
	c.Set(v1alpha1.ConditionCertificatesReady, true, ReasonIssued, msg)
}

func (c conditions) caInvalid(problem string) {
	c.Set(v1alpha1.ConditionCertificatesReady, false, ReasonCAInvalid,
		"the tenant's CA Secret is unusable ("+problem+"); it is never replaced automatically, see the CA rotation procedure")
}

// caNotIssued says why the CA a cert-manager issuer is asked for is not there yet.
func (c conditions) caNotIssued(reason, message string) {
	c.Set(v1alpha1.ConditionCertificatesReady, false, reason, message)
}

// etcd reports the etcd StatefulSet's readiness; problem is what its pods are waiting for.
func (c conditions) etcd(sts *appsv1.StatefulSet, problem string) {
	want := ptr.Deref(sts.Spec.Replicas, 1)
	ready := sts.Status.ReadyReplicas
	// An ephemeral member (OnDelete) keeps the revision it started with, by design.
	updated := sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || sts.Status.UpdatedReplicas >= want
	if sts.Status.ObservedGeneration >= sts.Generation && ready >= want && updated {
		c.Set(v1alpha1.ConditionEtcdReady, true, ReasonMembersReady, fmt.Sprintf("%d/%d etcd members ready", ready, want))
		return
	}
	c.Set(v1alpha1.ConditionEtcdReady, false, ReasonWaitingForPods, withProblem(fmt.Sprintf("%d/%d etcd members ready", ready, want), problem))
}

// apiServer reports whether the tenant's apiserver answered /readyz; ready is how many of the
// Deployment's pods are Ready.
func (c conditions) apiServer(d *appsv1.Deployment, ready int, probeErr error, problem string) {
	pods := fmt.Sprintf("%d/%d control-plane pods ready", ready, ptr.Deref(d.Spec.Replicas, 1))
	var notServing *endpointNotServingError
	switch {
	case ready == 0:
		c.Set(v1alpha1.ConditionAPIServerReady, false, ReasonWaitingForPods, withProblem(pods, problem))
	case errors.As(probeErr, &notServing):
		c.Set(v1alpha1.ConditionAPIServerReady, false, ReasonNotReachable, "/readyz answered ok through the tenant's Service, but "+notServing.Error())
	case probeErr != nil:
		c.Set(v1alpha1.ConditionAPIServerReady, false, ReasonNotReachable,
			"control-plane pods are ready but the operator could not reach the tenant's /readyz through its Service yet")
	default:
		c.Set(v1alpha1.ConditionAPIServerReady, true, ReasonReady, "/readyz answered ok; "+pods)
	}
}

func (c conditions) kubeconfig(exp controlplane.Exposure, secret string) {
	if exp.Endpoint == "" {
		c.Set(v1alpha1.ConditionKubeconfigReady, false, ReasonWaitingForEndpoint, "waiting for the endpoint: "+exp.Waiting)
		return
	}
	c.Set(v1alpha1.ConditionKubeconfigReady, true, ReasonWritten,
		fmt.Sprintf("Secret %s holds the admin kubeconfig for %s", secret, exp.Endpoint))
}

// ready is true when every other condition is.
func (c conditions) ready() {
	for _, t := range []string{v1alpha1.ConditionCertificatesReady, v1alpha1.ConditionEtcdReady,
		v1alpha1.ConditionAPIServerReady, v1alpha1.ConditionKubeconfigReady} {
		if !c.IsTrue(t) {
			cond := meta.FindStatusCondition(*c.List, t)
			msg := t + " is not True"
			if cond != nil {
				msg = t + ": " + cond.Message
			}
			c.Set(v1alpha1.ConditionReady, false, ReasonNotReady, msg)
			return
		}
	}
	c.Set(v1alpha1.ConditionReady, true, ReasonReady, "the tenant's apiserver answers and its kubeconfig is written")
}

// phase summarises conditions for people: previous is the phase before this pass.
func phase(conds []metav1.Condition, previous v1alpha1.VirtualClusterPhase, deleting bool) v1alpha1.VirtualClusterPhase {
	ready := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	switch {
	case deleting:
		return v1alpha1.PhaseDeleting
	case sleeping(conds):
		return v1alpha1.PhaseSleeping
	case ready == nil:
		return v1alpha1.PhasePending
	case ready.Status == metav1.ConditionTrue:
		return v1alpha1.PhaseReady
	}
	for _, c := range conds {
		if c.Reason == ReasonInvalidSpec || c.Reason == ReasonCAInvalid {
			return v1alpha1.PhaseFailed
		}
	}
	if previous == v1alpha1.PhaseReady || previous == v1alpha1.PhaseDegraded {
		return v1alpha1.PhaseDegraded
	}
	return v1alpha1.PhaseProvisioning
}

// sleeping: the tenant is asleep or falling asleep.
func sleeping(conds []metav1.Condition) bool {
	c := meta.FindStatusCondition(conds, v1alpha1.ConditionAsleep)
	return c != nil && (c.Status == metav1.ConditionTrue || c.Reason == ReasonFallingAsleep)
}

// podProblem describes, for people, why the first of pods that is not ready is not: a
// scheduling failure or a container waiting (image, crash loop). A running pod that fails its
// readiness probe reports nothing here; the condition says how many pods are ready.
func podProblem(pods []corev1.Pod) string {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				return fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, cond.Message)
			}
		}
		for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
				msg := fmt.Sprintf("container %s of pod %s is waiting: %s", cs.Name, p.Name, w.Reason)
				if t := cs.LastTerminationState.Terminated; t != nil {
					msg += fmt.Sprintf(" (last exit code %d)", t.ExitCode)
				}
				return msg
			}
		}
	}
	return ""
}

func withProblem(msg, problem string) string {
	if problem == "" {
		return msg
	}
	return msg + "; " + problem
}
