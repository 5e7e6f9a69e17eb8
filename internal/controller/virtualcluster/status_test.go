package virtualcluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/condition"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/pki"
)

var statusNow = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

var leafConditions = []string{
	v1alpha1.ConditionCertificatesReady, v1alpha1.ConditionEtcdReady,
	v1alpha1.ConditionAPIServerReady, v1alpha1.ConditionKubeconfigReady,
}

func cond(typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: reason}
}

func newConditions(list *[]metav1.Condition) conditions {
	return conditions{condition.Setter{List: list, Generation: 7, Now: statusNow}}
}

func TestPhase(t *testing.T) {
	readyTrue := cond(v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonReady)
	readyFalse := cond(v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonNotReady)
	tests := []struct {
		name     string
		conds    []metav1.Condition
		previous v1alpha1.VirtualClusterPhase
		deleting bool
		want     v1alpha1.VirtualClusterPhase
	}{
		{name: "deleting", conds: []metav1.Condition{readyTrue}, previous: v1alpha1.PhaseReady, deleting: true, want: v1alpha1.PhaseDeleting},
		{name: "deleting before anything", deleting: true, want: v1alpha1.PhaseDeleting},
		{name: "deleting a failed one", conds: []metav1.Condition{readyFalse, cond(v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, ReasonInvalidSpec)}, deleting: true, want: v1alpha1.PhaseDeleting},
		{name: "no conditions", want: v1alpha1.PhasePending},
		{name: "no Ready condition", conds: []metav1.Condition{cond(v1alpha1.ConditionEtcdReady, metav1.ConditionTrue, ReasonMembersReady)}, want: v1alpha1.PhasePending},
		{name: "Ready", conds: []metav1.Condition{readyTrue}, want: v1alpha1.PhaseReady},
		{name: "asleep", conds: []metav1.Condition{readyFalse, cond(v1alpha1.ConditionAsleep, metav1.ConditionTrue, ReasonAsleep)}, previous: v1alpha1.PhaseReady, want: v1alpha1.PhaseSleeping},
		{name: "falling asleep", conds: []metav1.Condition{readyFalse, cond(v1alpha1.ConditionAsleep, metav1.ConditionFalse, ReasonFallingAsleep)}, previous: v1alpha1.PhaseReady, want: v1alpha1.PhaseSleeping},
		{name: "waking", conds: []metav1.Condition{readyFalse, cond(v1alpha1.ConditionAsleep, metav1.ConditionFalse, ReasonAwake)}, previous: v1alpha1.PhaseSleeping, want: v1alpha1.PhaseProvisioning},
		{name: "awake", conds: []metav1.Condition{readyTrue, cond(v1alpha1.ConditionAsleep, metav1.ConditionFalse, ReasonAwake)}, previous: v1alpha1.PhaseProvisioning, want: v1alpha1.PhaseReady},
		{name: "Ready again after Degraded", conds: []metav1.Condition{readyTrue}, previous: v1alpha1.PhaseDegraded, want: v1alpha1.PhaseReady},
		{
			name:     "invalid spec",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionAPIServerReady, metav1.ConditionFalse, ReasonInvalidSpec)},
			previous: v1alpha1.PhaseProvisioning, want: v1alpha1.PhaseFailed,
		},
		{
			name:     "invalid spec of a tenant that was Ready",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, ReasonInvalidSpec)},
			previous: v1alpha1.PhaseReady, want: v1alpha1.PhaseFailed,
		},
		{
			name:     "unusable CA",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionCertificatesReady, metav1.ConditionFalse, ReasonCAInvalid)},
			previous: v1alpha1.PhaseDegraded, want: v1alpha1.PhaseFailed,
		},
		{
			name:     "was Ready",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionAPIServerReady, metav1.ConditionFalse, ReasonNotReachable)},
			previous: v1alpha1.PhaseReady, want: v1alpha1.PhaseDegraded,
		},
		{
			name:     "was Degraded",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, ReasonWaitingForPods)},
			previous: v1alpha1.PhaseDegraded, want: v1alpha1.PhaseDegraded,
		},
		{name: "first pass", conds: []metav1.Condition{readyFalse}, want: v1alpha1.PhaseProvisioning},
		{name: "was Pending", conds: []metav1.Condition{readyFalse}, previous: v1alpha1.PhasePending, want: v1alpha1.PhaseProvisioning},
		{name: "still Provisioning", conds: []metav1.Condition{readyFalse}, previous: v1alpha1.PhaseProvisioning, want: v1alpha1.PhaseProvisioning},
		{name: "was Failed, spec fixed", conds: []metav1.Condition{readyFalse}, previous: v1alpha1.PhaseFailed, want: v1alpha1.PhaseProvisioning},
		{
			name:     "apply failed is not a failure",
			conds:    []metav1.Condition{readyFalse, cond(v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, ReasonApplyFailed)},
			previous: v1alpha1.PhaseProvisioning, want: v1alpha1.PhaseProvisioning,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := phase(tt.conds, tt.previous, tt.deleting); got != tt.want {
				t.Errorf("phase = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPodProblem(t *testing.T) {
	pod := func(name string, modify ...func(*corev1.Pod)) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
		for _, m := range modify {
			m(&p)
		}
		return p
	}
	unschedulable := func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/3 nodes are available: 3 Insufficient memory.",
		}}
	}
	waiting := func(container, reason string, lastExit *int32) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			cs := corev1.ContainerStatus{Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "details"}}}
			if lastExit != nil {
				cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: *lastExit}
			}
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, cs)
		}
	}
	initWaiting := func(container, reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{
				Name: container, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}},
			})
		}
	}
	running := func(container string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
				Name: container, Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			})
		}
	}
	terminating := func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(statusNow)) }

	tests := []struct {
		name string
		pods []corev1.Pod
		want string
	}{
		{name: "no pods", want: ""},
		{name: "healthy", pods: []corev1.Pod{pod("etcd-0", running("etcd")), pod("etcd-1", running("etcd"))}, want: ""},
		{
			name: "unschedulable",
			pods: []corev1.Pod{pod("etcd-0", unschedulable)},
			want: "pod etcd-0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory.",
		},
		{
			name: "image pull back-off after a run",
			pods: []corev1.Pod{pod("cp-1", running("kube-apiserver"), waiting("kube-scheduler", "ImagePullBackOff", ptr.To[int32](2)))},
			want: "container kube-scheduler of pod cp-1 is waiting: ImagePullBackOff (last exit code 2)",
		},
		{
			name: "image pull back-off, never ran",
			pods: []corev1.Pod{pod("cp-1", waiting("kube-apiserver", "ImagePullBackOff", nil))},
			want: "container kube-apiserver of pod cp-1 is waiting: ImagePullBackOff",
		},
		{
			name: "crash loop",
			pods: []corev1.Pod{pod("etcd-0", waiting("etcd", "CrashLoopBackOff", ptr.To[int32](1)))},
			want: "container etcd of pod etcd-0 is waiting: CrashLoopBackOff (last exit code 1)",
		},
		{
			name: "init container",
			pods: []corev1.Pod{pod("etcd-0", initWaiting("setup", "CreateContainerConfigError"), waiting("etcd", "PodInitializing", nil))},
			want: "container setup of pod etcd-0 is waiting: CreateContainerConfigError",
		},
		{name: "container creating is normal", pods: []corev1.Pod{pod("etcd-0", waiting("etcd", "ContainerCreating", nil))}, want: ""},
		{name: "pod initializing is normal", pods: []corev1.Pod{pod("etcd-0", waiting("etcd", "PodInitializing", nil))}, want: ""},
		{name: "waiting without a reason", pods: []corev1.Pod{pod("etcd-0", waiting("etcd", "", nil))}, want: ""},
		{
			name: "terminating pods are ignored",
			pods: []corev1.Pod{pod("cp-old", terminating, waiting("kube-apiserver", "CrashLoopBackOff", ptr.To[int32](1))), pod("cp-new", running("kube-apiserver"))},
			want: "",
		},
		{
			name: "the first pod with a problem",
			pods: []corev1.Pod{
				pod("etcd-0", running("etcd")),
				pod("etcd-1", terminating, unschedulable),
				pod("etcd-2", waiting("etcd", "ErrImagePull", nil)),
				pod("etcd-3", unschedulable),
			},
			want: "container etcd of pod etcd-2 is waiting: ErrImagePull",
		},
		{
			name: "scheduling reported before containers",
			pods: []corev1.Pod{pod("etcd-0", unschedulable, waiting("etcd", "ErrImagePull", nil))},
			want: "pod etcd-0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := podProblem(tt.pods); got != tt.want {
				t.Errorf("podProblem = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestConditionsReady(t *testing.T) {
	set := func(c conditions, typ string, ok bool, msg string) { c.Set(typ, ok, "Test", msg) }
	tests := []struct {
		name       string
		setup      func(conditions)
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{
			name:       "nothing set",
			setup:      func(conditions) {},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNotReady, wantMsg: "CertificatesReady is not True",
		},
		{
			name: "first false one is named, with its message",
			setup: func(c conditions) {
				set(c, v1alpha1.ConditionCertificatesReady, true, "certs ok")
				set(c, v1alpha1.ConditionEtcdReady, false, "0/3 etcd members ready")
				set(c, v1alpha1.ConditionAPIServerReady, false, "apiserver waiting")
				set(c, v1alpha1.ConditionKubeconfigReady, true, "written")
			},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNotReady, wantMsg: "EtcdReady: 0/3 etcd members ready",
		},
		{
			name: "a missing one is named",
			setup: func(c conditions) {
				set(c, v1alpha1.ConditionCertificatesReady, true, "")
				set(c, v1alpha1.ConditionEtcdReady, true, "")
				set(c, v1alpha1.ConditionKubeconfigReady, true, "")
			},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNotReady, wantMsg: "APIServerReady is not True",
		},
		{
			name: "last one false",
			setup: func(c conditions) {
				set(c, v1alpha1.ConditionCertificatesReady, true, "")
				set(c, v1alpha1.ConditionEtcdReady, true, "")
				set(c, v1alpha1.ConditionAPIServerReady, true, "")
				set(c, v1alpha1.ConditionKubeconfigReady, false, "waiting for the endpoint")
			},
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNotReady, wantMsg: "KubeconfigReady: waiting for the endpoint",
		},
		{
			name: "all four true",
			setup: func(c conditions) {
				for _, t := range leafConditions {
					set(c, t, true, "ok")
				}
			},
			wantStatus: metav1.ConditionTrue, wantReason: ReasonReady,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list []metav1.Condition
			c := newConditions(&list)
			tt.setup(c)
			c.ready()
			got := meta.FindStatusCondition(list, v1alpha1.ConditionReady)
			if got == nil {
				t.Fatal("no Ready condition")
			}
			if got.Status != tt.wantStatus || got.Reason != tt.wantReason {
				t.Errorf("Ready = %s/%s, want %s/%s", got.Status, got.Reason, tt.wantStatus, tt.wantReason)
			}
			if tt.wantMsg != "" && got.Message != tt.wantMsg {
				t.Errorf("Ready message %q, want %q", got.Message, tt.wantMsg)
			}
			if got.Message == "" {
				t.Error("Ready has no message")
			}
			if got.ObservedGeneration != 7 || !got.LastTransitionTime.Time.Equal(statusNow) {
				t.Errorf("Ready generation %d at %s, want 7 at %s", got.ObservedGeneration, got.LastTransitionTime, statusNow)
			}
		})
	}
}

func TestConditionsEtcd(t *testing.T) {
	sts := func(replicas *int32, generation, observed int64, ready, updated int32) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: generation}}
		s.Spec.Replicas = replicas
		s.Status = appsv1.StatefulSetStatus{ObservedGeneration: observed, ReadyReplicas: ready, UpdatedReplicas: updated}
		return s
	}
	tests := []struct {
		name       string
		sts        *appsv1.StatefulSet
		problem    string
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{"all ready", sts(ptr.To[int32](3), 2, 2, 3, 3), "", metav1.ConditionTrue, ReasonMembersReady, "3/3 etcd members ready"},
		{"default replicas", sts(nil, 1, 1, 1, 1), "", metav1.ConditionTrue, ReasonMembersReady, "1/1 etcd members ready"},
		{"none yet", sts(ptr.To[int32](1), 1, 0, 0, 0), "", metav1.ConditionFalse, ReasonWaitingForPods, "0/1 etcd members ready"},
		{
			"some ready, with the pods' problem", sts(ptr.To[int32](3), 1, 1, 1, 3),
			"pod tenant-etcd-1 cannot be scheduled: no nodes", metav1.ConditionFalse, ReasonWaitingForPods,
			"1/3 etcd members ready; pod tenant-etcd-1 cannot be scheduled: no nodes",
		},
		{"status of an older generation", sts(ptr.To[int32](1), 3, 2, 1, 1), "", metav1.ConditionFalse, ReasonWaitingForPods, "1/1 etcd members ready"},
		{"not all updated", sts(ptr.To[int32](3), 1, 1, 3, 2), "", metav1.ConditionFalse, ReasonWaitingForPods, "3/3 etcd members ready"},
		// An ephemeral member keeps its revision across upgrades, on purpose.
		{"ephemeral, of an older revision", func() *appsv1.StatefulSet {
			s := sts(ptr.To[int32](1), 2, 2, 1, 0)
			s.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
			return s
		}(), "", metav1.ConditionTrue, ReasonMembersReady, "1/1 etcd members ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list []metav1.Condition
			newConditions(&list).etcd(tt.sts, tt.problem)
			assertCondition(t, list, v1alpha1.ConditionEtcdReady, tt.wantStatus, tt.wantReason, tt.wantMsg)
		})
	}
}

func TestConditionsAPIServer(t *testing.T) {
	deploy := func(replicas *int32, ready int32) *appsv1.Deployment {
		d := &appsv1.Deployment{}
		d.Spec.Replicas = replicas
		d.Status.ReadyReplicas = ready
		return d
	}
	secretErr := errors.New("Get https://10.0.0.1:6443/readyz: x509: certificate signed by unknown authority (token abc123)")
	tests := []struct {
		name       string
		d          *appsv1.Deployment
		probeErr   error
		problem    string
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{
			"no pods ready", deploy(ptr.To[int32](2), 0), nil, "container kube-apiserver of pod cp-1 is waiting: CrashLoopBackOff",
			metav1.ConditionFalse, ReasonWaitingForPods, "0/2 control-plane pods ready; container kube-apiserver of pod cp-1 is waiting: CrashLoopBackOff",
		},
		{"no pods ready, default replicas", deploy(nil, 0), nil, "", metav1.ConditionFalse, ReasonWaitingForPods, "0/1 control-plane pods ready"},
		{
			"pods ready, probe fails", deploy(ptr.To[int32](1), 1), secretErr, "",
			metav1.ConditionFalse, ReasonNotReachable, "control-plane pods are ready but the operator could not reach the tenant's /readyz through its Service yet",
		},
		{
			"pods ready, endpoint not serving", deploy(ptr.To[int32](1), 1), &endpointNotServingError{endpoint: "https://10.0.0.1:30443", why: "still refuses connections"}, "",
			metav1.ConditionFalse, ReasonNotReachable, "/readyz answered ok through the tenant's Service, but the tenant's endpoint https://10.0.0.1:30443 still refuses connections",
		},
		{"probe ok", deploy(ptr.To[int32](2), 1), nil, "", metav1.ConditionTrue, ReasonReady, "/readyz answered ok; 1/2 control-plane pods ready"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list []metav1.Condition
			newConditions(&list).apiServer(tt.d, int(tt.d.Status.ReadyReplicas), tt.probeErr, tt.problem)
			got := assertCondition(t, list, v1alpha1.ConditionAPIServerReady, tt.wantStatus, tt.wantReason, tt.wantMsg)
			if got != nil && (strings.Contains(got.Message, "x509") || strings.Contains(got.Message, "abc123")) {
				t.Errorf("message %q carries the raw error", got.Message)
			}
		})
	}
}

func TestConditionsKubeconfig(t *testing.T) {
	tests := []struct {
		name       string
		exp        controlplane.Exposure
		wantStatus metav1.ConditionStatus
		wantReason string
		wantMsg    string
	}{
		{
			"no endpoint yet", controlplane.Exposure{Waiting: "the host's load balancer has not published an address yet"},
			metav1.ConditionFalse, ReasonWaitingForEndpoint, "waiting for the endpoint: the host's load balancer has not published an address yet",
		},
		{
			"written", controlplane.Exposure{Endpoint: "https://192.0.2.10:31443"},
			metav1.ConditionTrue, ReasonWritten, "Secret tenant-kubeconfig holds the admin kubeconfig for https://192.0.2.10:31443",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list []metav1.Condition
			newConditions(&list).kubeconfig(tt.exp, "tenant-kubeconfig")
			assertCondition(t, list, v1alpha1.ConditionKubeconfigReady, tt.wantStatus, tt.wantReason, tt.wantMsg)
		})
	}
}

func TestConditionsInvalidSpec(t *testing.T) {
	tests := []struct {
		name  string
		setup func(conditions)
	}{
		{name: "first pass", setup: func(conditions) {}},
		{name: "partly provisioned", setup: func(c conditions) {
			c.Set(v1alpha1.ConditionCertificatesReady, true, ReasonIssued, "")
			c.Set(v1alpha1.ConditionEtcdReady, false, ReasonWaitingForPods, "")
		}},
		{name: "Ready before", setup: func(c conditions) {
			for _, t := range leafConditions {
				c.Set(t, true, "Ok", "")
			}
			c.ready()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var list []metav1.Condition
			c := newConditions(&list)
			tt.setup(c)
			previous := phase(list, "", false)
			c.invalidSpec(errors.New("spec.controlPlane.apiServer.extraArgs: flag --etcd-servers is set by the operator and cannot be overridden"))
			c.ready()
			for _, typ := range leafConditions {
				assertCondition(t, list, typ, metav1.ConditionFalse, ReasonInvalidSpec,
					"the spec cannot be carried out: spec.controlPlane.apiServer.extraArgs: flag --etcd-servers is set by the operator and cannot be overridden")
			}
			if meta.IsStatusConditionTrue(list, v1alpha1.ConditionReady) {
				t.Error("Ready is True with an invalid spec")
			}
			if got := phase(list, previous, false); got != v1alpha1.PhaseFailed {
				t.Errorf("phase = %s, want Failed", got)
			}
		})
	}
}

func TestConditionsCertificates(t *testing.T) {
	t.Run("issued", func(t *testing.T) {
		ca, err := pki.NewCA("ca", statusNow)
		if err != nil {
			t.Fatal(err)
		}
		leaves := controlplane.Leaves{}
		for name, validity := range map[controlplane.Leaf]time.Duration{
			controlplane.LeafAdmin: 0, controlplane.LeafScheduler: 24 * time.Hour, controlplane.LeafAPIServer: 0,
		} {
			kp, err := ca.Issue(pki.CertSpec{CommonName: string(name), Usage: pki.UsageClient, Validity: validity}, statusNow)
			if err != nil {
				t.Fatal(err)
			}
			leaves[name] = kp
		}
		var list []metav1.Condition
		newConditions(&list).certificatesIssued(leaves, "")
		assertCondition(t, list, v1alpha1.ConditionCertificatesReady, metav1.ConditionTrue, ReasonIssued,
			"3 certificates valid; the first to expire is scheduler, at 2026-03-02T12:00:00Z")
	})
	t.Run("CA invalid", func(t *testing.T) {
		list := []metav1.Condition{}
		c := newConditions(&list)
		c.caInvalid("ca.key: no key")
		c.ready()
		got := assertCondition(t, list, v1alpha1.ConditionCertificatesReady, metav1.ConditionFalse, ReasonCAInvalid, "")
		if got != nil && !strings.Contains(got.Message, "ca.key: no key") {
			t.Errorf("message %q does not say what is wrong", got.Message)
		}
		if p := phase(list, v1alpha1.PhaseReady, false); p != v1alpha1.PhaseFailed {
			t.Errorf("phase = %s, want Failed", p)
		}
	})
	t.Run("apply failed", func(t *testing.T) {
		var list []metav1.Condition
		newConditions(&list).applyFailed(v1alpha1.ConditionEtcdReady, "etcd StatefulSet")
		assertCondition(t, list, v1alpha1.ConditionEtcdReady, metav1.ConditionFalse, ReasonApplyFailed,
			"could not apply the etcd StatefulSet in the host; retrying")
	})
}

func TestConditionsKeepTransitionTime(t *testing.T) {
	var list []metav1.Condition
	d := &appsv1.Deployment{}
	d.Spec.Replicas = ptr.To[int32](1)
	newConditions(&list).apiServer(d, 1, nil, "")
	later := conditions{condition.Setter{List: &list, Generation: 8, Now: statusNow.Add(time.Hour)}}
	later.apiServer(d, 1, nil, "")
	got := meta.FindStatusCondition(list, v1alpha1.ConditionAPIServerReady)
	if !got.LastTransitionTime.Time.Equal(statusNow) {
		t.Errorf("LastTransitionTime moved to %s without a transition", got.LastTransitionTime)
	}
	if got.ObservedGeneration != 8 {
		t.Errorf("ObservedGeneration = %d, want 8", got.ObservedGeneration)
	}
	later.apiServer(d, 0, nil, "")
	got = meta.FindStatusCondition(list, v1alpha1.ConditionAPIServerReady)
	if !got.LastTransitionTime.Time.Equal(statusNow.Add(time.Hour)) {
		t.Errorf("LastTransitionTime = %s after a transition, want %s", got.LastTransitionTime, statusNow.Add(time.Hour))
	}
}

func assertCondition(t *testing.T, list []metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string) *metav1.Condition {
	t.Helper()
	got := meta.FindStatusCondition(list, typ)
	if got == nil {
		t.Errorf("no %s condition", typ)
		return nil
	}
	if got.Status != status || got.Reason != reason {
		t.Errorf("%s = %s/%s, want %s/%s", typ, got.Status, got.Reason, status, reason)
	}
	if msg != "" && got.Message != msg {
		t.Errorf("%s message %q, want %q", typ, got.Message, msg)
	}
	return got
}
