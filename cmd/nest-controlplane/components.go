package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// apiServerWait bounds how long the controller-manager and scheduler wait for the apiserver.
const apiServerWait = 10 * time.Minute

func newAPIServerCommand() *cobra.Command { return apiserver.NewAPIServerCommand() }

func newControllerManagerCommand() *cobra.Command {
	return waitForAPIServerFirst(controllermanager.NewControllerManagerCommand())
}

func newSchedulerCommand() *cobra.Command {
	return waitForAPIServerFirst(scheduler.NewSchedulerCommand())
}

// waitForAPIServerFirst makes cmd wait until the apiserver its --kubeconfig points at answers
// /readyz. Upstream, the controller-manager exits when it starts before the apiserver has
// bootstrapped its RBAC roles, and its container then waits out a crash-loop back-off; waiting
// here starts it as soon as the apiserver is ready.
func waitForAPIServerFirst(cmd *cobra.Command) *cobra.Command {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("version"); f != nil && f.Value.String() != "false" {
			return run(c, args)
		}
		if f := c.Flags().Lookup("kubeconfig"); f != nil && f.Value.String() != "" {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			err := waitForAPIServer(ctx, f.Value.String(), apiServerWait)
			stop()
			if err != nil {
				return err
			}
		}
		return run(c, args)
	}
	return cmd
}

func waitForAPIServer(ctx context.Context, kubeconfig string, timeout time.Duration) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading --kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = 5 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start, lastLog := time.Now(), time.Now()
	for {
		err := client.Discovery().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
		if err == nil {
			klog.InfoS("apiserver is ready", "server", cfg.Host, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(lastLog) > 10*time.Second {
			klog.InfoS("waiting for the apiserver", "server", cfg.Host, "err", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("apiserver %s not ready after %s: %w", cfg.Host, time.Since(start).Round(time.Second), err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
