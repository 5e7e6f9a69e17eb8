package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
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
	retry           time.Duration
}

// controllerManagerLease reads the controller-manager's leader-election flags; nil when it
// does not elect a leader (then the others start at once).
func controllerManagerLease(flags *pflag.FlagSet) (*cmLease, error) {
	elect, err := flags.GetBool("leader-elect")
	if err != nil || !elect {
		return nil, err
	}
	retry, err := flags.GetDuration("leader-elect-retry-period")
	if err != nil {
		return nil, err
	}
	if lock := flags.Lookup("leader-elect-resource-lock").Value.String(); lock != "leases" {
		return nil, fmt.Errorf("--leader-elect-resource-lock=%s: the controllers process follows the controller-manager's lease, so it must be \"leases\"", lock)
	}
	return &cmLease{
		kubeconfig: flags.Lookup("kubeconfig").Value.String(),
		namespace:  flags.Lookup("leader-elect-resource-namespace").Value.String(),
		name:       flags.Lookup("leader-elect-resource-name").Value.String(),
		retry:      retry,
	}, nil
}

// waitLeading returns once this process's controller-manager holds its lease, or ctx ends.
// The controller-manager names itself <host name>_<random>, and sets the lease's acquireTime
// when it takes the lease; a holder of this host name that acquired it before started (an
// earlier run of this container, whose lease has not expired yet) is not this process. The
// lease is read with the controller-manager's credentials (it may read only its own lease),
// every 200 ms at first and then as often as the controller-manager tries to take it.
func (l *cmLease) waitLeading(ctx context.Context, started time.Time) error {
	host, err := os.Hostname()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.kubeconfig)
	if err != nil {
		return fmt.Errorf("the controller-manager's lease: %w", err)
	}
	client, err := kubernetes.NewForConfig(rest.AddUserAgent(cfg, "controllers-leader"))
	if err != nil {
		return err
	}
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, l.retry) {
		lease, err := client.CoordinationV1().Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, host+"_") &&
			lease.Spec.AcquireTime != nil && !lease.Spec.AcquireTime.Time.Before(started) {
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
