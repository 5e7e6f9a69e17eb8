package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kubenest-io/kubenest/internal/etcdsnapshot"
)

// newEtcdSnapshotCommand takes a snapshot of a tenant's etcd, as the operator's snapshot jobs
// run it. What it took is printed as JSON and written to the termination message file.
func newEtcdSnapshotCommand() *cobra.Command {
	var endpoint, cacert, cert, key, out, message string
	cmd := &cobra.Command{
		Short: "take a consistent snapshot of a tenant's etcd into a file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"endpoint": endpoint, "cacert": cacert, "cert": cert, "key": key, "out": out} {
				if v == "" {
					return fmt.Errorf("--%s is required", flag)
				}
			}
			tlsInfo := transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: key}
			tlsConfig, err := tlsInfo.ClientConfig()
			if err != nil {
				return fmt.Errorf("the etcd client certificate: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			lg := zap.NewExample()
			res, err := etcdsnapshot.Save(ctx, lg, clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: lg}, out)
			if err != nil {
				return fmt.Errorf("snapshot of %s: %w", endpoint, err)
			}
			data, _ := json.Marshal(res)
			fmt.Fprintln(cmd.OutOrStdout(), string(data))
			if message != "" {
				if err := os.WriteFile(message, data, 0o644); err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&endpoint, "endpoint", "", "the etcd member's client URL")
	f.StringVar(&cacert, "cacert", "", "the etcd CA certificate file")
	f.StringVar(&cert, "cert", "", "the etcd client certificate file")
	f.StringVar(&key, "key", "", "the etcd client key file")
	f.StringVar(&out, "out", "", "the snapshot file to write (written next to it first, then renamed)")
	f.StringVar(&message, "termination-message", "/dev/termination-log", "where to write what was taken, as JSON; empty: only to standard output")
	return cmd
}

// newEtcdRestoreCommand restores a snapshot as one member of a new tenant's etcd, before the
// member starts (the operator runs it as an init container of the etcd pods).
func newEtcdRestoreCommand() *cobra.Command {
	var o etcdsnapshot.RestoreOptions
	var peerURLs, from, to string
	cmd := &cobra.Command{
		Short: "restore an etcd snapshot as a member of a new tenant, its Services moved to the new Service range",
		Long: "Restores --snapshot into --data-dir, unless --data-dir exists already (the member restarts with its own data).\n" +
			"Every Service's ClusterIP is moved from --from-service-cidr to the same offset in --to-service-cidr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"snapshot": o.Snapshot, "data-dir": o.DataDir, "name": o.Name, "initial-cluster": o.InitialCluster,
				"initial-advertise-peer-urls": peerURLs, "from-service-cidr": from, "to-service-cidr": to} {
				if v == "" {
					return fmt.Errorf("--%s is required", flag)
				}
			}
			var err error
			if o.FromServiceCIDR, err = netip.ParsePrefix(from); err != nil {
				return fmt.Errorf("--from-service-cidr: %w", err)
			}
			if o.ToServiceCIDR, err = netip.ParsePrefix(to); err != nil {
				return fmt.Errorf("--to-service-cidr: %w", err)
			}
			o.PeerURLs = strings.Split(peerURLs, ",")
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			restored, err := etcdsnapshot.Restore(ctx, zap.NewExample(), o)
			if err != nil {
				return err
			}
			if !restored {
				fmt.Fprintf(cmd.OutOrStdout(), "%s exists: member %s keeps its data\n", o.DataDir, o.Name)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "restored %s as member %s into %s, Services moved from %s to %s\n", o.Snapshot, o.Name, o.DataDir, from, to)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Snapshot, "snapshot", "", "the snapshot file")
	f.StringVar(&o.SHA256, "sha256", "", "the snapshot's sha256 when it was taken; the file must still have it")
	f.StringVar(&o.DataDir, "data-dir", "", "the member's data directory (etcd's --data-dir)")
	f.StringVar(&o.Name, "name", "", "the member's name (etcd's --name)")
	f.StringVar(&o.InitialCluster, "initial-cluster", "", "etcd's --initial-cluster of the new cluster")
	f.StringVar(&o.InitialClusterToken, "initial-cluster-token", "", "etcd's --initial-cluster-token of the new cluster")
	f.StringVar(&peerURLs, "initial-advertise-peer-urls", "", "etcd's --initial-advertise-peer-urls of the member")
	f.StringVar(&from, "from-service-cidr", "", "the Service range of the tenant the snapshot was taken of")
	f.StringVar(&to, "to-service-cidr", "", "the new tenant's Service range")
	return cmd
}
