package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// apiServerWait bounds how long the apiserver waits for etcd, and the controller-manager and
// scheduler for the apiserver.
const apiServerWait = 10 * time.Minute

// waitFirst makes cmd run wait(value of --flag) before it starts, unless the flag is empty or
// only --version is asked for.
func waitFirst(cmd *cobra.Command, flag string, wait func(ctx context.Context, value string, timeout time.Duration) error) *cobra.Command {
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if f := c.Flags().Lookup("version"); f != nil && f.Value.String() != "false" {
			return run(c, args)
		}
		if f := c.Flags().Lookup(flag); f != nil && f.Value.String() != "" && f.Value.String() != "[]" {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			err := wait(ctx, f.Value.String(), apiServerWait)
			stop()
			if err != nil {
				return err
			}
		}
		return run(c, args)
	}
	return cmd
}

// waitForEtcd waits until one of the --etcd-servers accepts a TCP connection. The apiserver's
// etcd client backs off between failed connection attempts (1 s, 1.6 s, 2.6 s, ...): started
// before etcd listens, as it is when a tenant is created, the apiserver would find etcd seconds
// after it is up. Polling here every 100 ms, every server at once (one whose address is not
// routed yet must not hold up one that is), starts it as soon as etcd is.
func waitForEtcd(ctx context.Context, servers string, timeout time.Duration) error {
	var addrs []string
	for _, s := range strings.Split(strings.Trim(servers, "[]"), ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || u.Host == "" {
			return fmt.Errorf("--etcd-servers: %q is not a URL like https://etcd:2379", s)
		}
		addrs = append(addrs, u.Host)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start, lastLog := time.Now(), time.Now()
	for {
		addr, err := dialAny(ctx, addrs, time.Second)
		if err == nil {
			klog.InfoS("etcd accepts connections", "server", addr, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(lastLog) > 10*time.Second {
			klog.InfoS("waiting for etcd", "servers", addrs, "err", err)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no etcd server of %v accepts connections after %s: %w", addrs, time.Since(start).Round(time.Second), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dialAny dials every address at once and returns the first that accepts a TCP connection,
// or, when none does within timeout, the errors.
func dialAny(ctx context.Context, addrs []string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		addr string
		err  error
	}
	results := make(chan result, len(addrs))
	var dialer net.Dialer
	for _, addr := range addrs {
		go func() {
			conn, err := dialer.DialContext(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			results <- result{addr, err}
		}()
	}
	var errs []error
	for range addrs {
		r := <-results
		if r.err == nil {
			return r.addr, nil
		}
		errs = append(errs, r.err)
	}
	return "", errors.Join(errs...)
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
