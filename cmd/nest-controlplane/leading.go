package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// One lease for the process. The scheduler and the ValidatingAdmissionPolicy status
// controller run only while this process's controller-manager leads, under its lease, instead
// of under leases of their own: an idle tenant's lease renewals are writes to etcd (each
// renewal of each lease every few seconds), and a second lease doubled them. Fail-over is
// the controller-manager's: when it loses its lease it ends the process, and with it the
// scheduler (upstream exits; nest-controlplane ends the process when any component stops).

// cmLease is the controller-manager's leader election, as its parsed flags set it.
type cmLease struct {
	kubeconfig      string
	namespace, name string
}

// controllerManagerLease reads the controller-manager's leader-election flags; nil when it
// does not elect a leader (then the others start at once).
func controllerManagerLease(flags *pflag.FlagSet) (*cmLease, error) {
	elect, err := flags.GetBool("leader-elect")
	if err != nil || !elect {
		return nil, err
	}
	if lock := flags.Lookup("leader-elect-resource-lock").Value.String(); lock != "leases" {
		return nil, fmt.Errorf("--leader-elect-resource-lock=%s: the controllers process follows the controller-manager's lease, so it must be \"leases\"", lock)
	}
	return &cmLease{
		kubeconfig: flags.Lookup("kubeconfig").Value.String(),
		namespace:  flags.Lookup("leader-elect-resource-namespace").Value.String(),
		name:       flags.Lookup("leader-elect-resource-name").Value.String(),
	}, nil
}

// client is a client of the lease, with the controller-manager's credentials (it may read
// and renew only its own lease).
func (l *cmLease) client() (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("the controller-manager's lease: %w", err)
	}
	return kubernetes.NewForConfig(rest.AddUserAgent(cfg, "controllers-leader"))
}

// The controller-manager names itself <host name>_<random>: a pod's host name is its name, and
// only one controllers container runs in a pod, so a holder of this host name is this
// process or an earlier run of its container, and which one its acquireTime says (the
// controller-manager sets it when it takes the lease; this process reads the clock of the
// same node).
func heldByHost(lease *coordinationv1.Lease, host string) bool {
	return lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, host+"_")
}

func acquiredSince(lease *coordinationv1.Lease, t time.Time) bool {
	return lease.Spec.AcquireTime != nil && !lease.Spec.AcquireTime.Time.Before(t)
}

// waitLeading returns once this process's controller-manager holds its lease, or ctx ends:
// a holder of this host name that acquired it before this process started is an earlier run
// of this container, not this process. The lease is read every 200 ms at first, then every
// 2 s at most.
func (l *cmLease) waitLeading(ctx context.Context, client kubernetes.Interface, host string, started time.Time) error {
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 2*time.Second) {
		lease, err := client.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
		if err == nil && heldByHost(lease, host) && acquiredSince(lease, started) {
			klog.InfoS("The controller-manager leads; starting the components that run under its lease", "lease", l.namespace+"/"+l.name, "holder", *lease.Spec.HolderIdentity)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// A holder that stops without handing its lease back keeps it until the lease expires, as
// its successor sees it: the successor counts the lease's duration from when it first read
// the holder's last renewal, however old that renewal is. Upstream's controller-manager keeps
// its lease when it stops, so a tenant woken from sleep, a controllers container restarted
// after a crash and a rolled control plane each waited out a whole lease before their
// controllers and scheduler ran (15.3 s measured after a wake). This process hands the lease
// back instead: when it is told to stop (release, below), and, when it starts, a lease still
// held by an earlier run of its own container, which has ended (releaseEarlierRun). Handing
// back is what client-go's leader election does with ReleaseOnCancel: no holder, a duration
// of 1 s, so the next candidate takes the lease on its next try.

// releaseEarlierRun hands back the lease when an earlier run of this container holds it.
// Called before this process's controller-manager starts.
func (l *cmLease) releaseEarlierRun(ctx context.Context, client kubernetes.Interface, host string) error {
	return l.handBack(ctx, client, func(lease *coordinationv1.Lease) bool { return heldByHost(lease, host) }, "an earlier run of this container")
}

// release hands back the lease when this process's controller-manager holds it (it took
// it after started). Called when the process is told to stop, just before it ends; the
// controller-manager, which renews it only every retry period, is not given the time to take
// it again.
func (l *cmLease) release(ctx context.Context, client kubernetes.Interface, host string, started time.Time) error {
	return l.handBack(ctx, client, func(lease *coordinationv1.Lease) bool {
		return heldByHost(lease, host) && acquiredSince(lease, started)
	}, "this process")
}

// handBack clears the lease's holder when held says the holder is the one to hand it back,
// once more after a conflicting update (the controller-manager renewing it meanwhile).
func (l *cmLease) handBack(ctx context.Context, client kubernetes.Interface, held func(*coordinationv1.Lease) bool, holder string) error {
	leases := client.CoordinationV1().Leases(l.namespace)
	var was string
	err := retry.RetryOnConflict(wait.Backoff{Steps: 2}, func() error {
		lease, err := leases.Get(ctx, l.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !held(lease) {
			return nil
		}
		was = *lease.Spec.HolderIdentity
		now := metav1.NowMicro()
		lease.Spec.HolderIdentity = ptr.To("")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		lease.Spec.AcquireTime, lease.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("handing back the lease %s/%s: %w", l.namespace, l.name, err)
	}
	if was != "" {
		klog.InfoS("Handed back the controller-manager's lease", "lease", l.namespace+"/"+l.name, "holder", was, "heldBy", holder)
	}
	return nil
}

// handBackOptions make the apiserver, when it stops, serve until the controllers of its pod
// handed back their lease. The kubelet stops a pod's containers together, and the
// controllers reach their apiserver in the pod: upstream's apiserver stops taking requests
// once its pre-shutdown hooks are done, a few milliseconds after the signal, and on a busy
// host the controllers' hand-back came later (TestSleepWake, 2026-11-29): their successor
// then waited out the lease.
type handBackOptions struct {
	lease string // namespace/name; empty: no wait
	wait  time.Duration
}

func (o *handBackOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.lease, "kubenest-controllers-lease", o.lease,
		"The lease (namespace/name) of the controllers that run in this apiserver's pod (a pod's containers share its host name, which names the holder). When the apiserver stops, it keeps serving until they handed it back, or --kubenest-controllers-lease-wait passed. Empty: no wait. The operator sets kube-system/kube-controller-manager (KubeNest).")
	fs.DurationVar(&o.wait, "kubenest-controllers-lease-wait", o.wait,
		"How long a stopping apiserver waits at most for its pod's controllers to hand back --kubenest-controllers-lease (KubeNest).")
}

func (o handBackOptions) validate() error {
	if o.lease == "" {
		return nil
	}
	if ns, name, ok := strings.Cut(o.lease, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("--kubenest-controllers-lease=%q: want namespace/name", o.lease)
	}
	if o.wait <= 0 {
		return fmt.Errorf("--kubenest-controllers-lease-wait=%s: must be positive", o.wait)
	}
	return nil
}

// addHook adds the wait to s's pre-shutdown hooks: the apiserver takes requests until they
// are done.
func (o handBackOptions) addHook(s *genericapiserver.GenericAPIServer) error {
	if o.lease == "" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	ns, name, _ := strings.Cut(o.lease, "/")
	return s.AddPreShutdownHook("kubenest/controllers-lease", func() error {
		client, err := kubernetes.NewForConfig(s.LoopbackClientConfig)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), o.wait)
		defer cancel()
		(&cmLease{namespace: ns, name: name}).waitHandedBack(ctx, client, host)
		return nil
	})
}

// waitHandedBack returns once no holder of this host name holds the lease, or ctx ends.
func (l *cmLease) waitHandedBack(ctx context.Context, client kubernetes.Interface, host string) {
	start := time.Now()
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		lease, err := client.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || err == nil && !heldByHost(lease, host), nil
	})
	waited := time.Since(start).Round(time.Millisecond)
	switch {
	case err != nil:
		klog.InfoS("Stopping although the controllers of this pod still hold their lease; their successor takes it once it expires", "lease", l.namespace+"/"+l.name, "waited", waited)
	case waited > 100*time.Millisecond:
		klog.InfoS("The controllers of this pod handed back their lease", "lease", l.namespace+"/"+l.name, "waited", waited)
	}
}
