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
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/kubenest-io/kubenest/internal/etcdsnapshot"
)

// s3Flags are the flags of an S3 object; the credentials come from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), never from a flag.
type s3Flags struct {
	endpoint, bucket, key, region string
	insecure                      bool
}

func (f *s3Flags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.endpoint, "s3-endpoint", "", "store the snapshot in (or read it from) an S3-compatible bucket at this host[:port]; credentials from $AWS_ACCESS_KEY_ID and $AWS_SECRET_ACCESS_KEY")
	fs.StringVar(&f.bucket, "s3-bucket", "", "the bucket")
	fs.StringVar(&f.key, "s3-key", "", "the object's key")
	fs.StringVar(&f.region, "s3-region", "", "the bucket's region, when the server asks for one")
	fs.BoolVar(&f.insecure, "s3-insecure", false, "plain HTTP instead of HTTPS")
}

// location is the S3 object the flags name, or nil.
func (f *s3Flags) location() (*etcdsnapshot.S3, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	if f.bucket == "" || f.key == "" {
		return nil, fmt.Errorf("--s3-endpoint needs --s3-bucket and --s3-key")
	}
	return &etcdsnapshot.S3{Endpoint: f.endpoint, Bucket: f.bucket, Key: f.key, Region: f.region, Insecure: f.insecure,
		AccessKeyID: os.Getenv("AWS_ACCESS_KEY_ID"), SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}, nil
}

// newEtcdSnapshotCommand takes a snapshot of a tenant's etcd, as the operator's snapshot jobs
// run it. What it took is printed as JSON and written to the termination message file.
func newEtcdSnapshotCommand() *cobra.Command {
	var endpoint, cacert, cert, key, out, message string
	var s3 s3Flags
	cmd := &cobra.Command{
		Short: "take a consistent snapshot of a tenant's etcd into a file",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for flag, v := range map[string]string{"endpoint": endpoint, "cacert": cacert, "cert": cert, "key": key, "out": out} {
				if v == "" {
					return fmt.Errorf("--%s is required", flag)
				}
			}
			bucket, err := s3.location()
			if err != nil {
				return err
			}
			tlsInfo := transport.TLSInfo{TrustedCAFile: cacert, CertFile: cert, KeyFile: key}
			tlsConfig, err := tlsInfo.ClientConfig()
			if err != nil {
				return fmt.Errorf("the etcd client certificate: %w", err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			lg := infoLogger()
			res, err := etcdsnapshot.Save(ctx, lg, clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 10 * time.Second, Logger: lg}, out)
			if err != nil {
				return fmt.Errorf("snapshot of %s: %w", endpoint, err)
			}
			if bucket != nil {
				if err := etcdsnapshot.Upload(ctx, *bucket, out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "uploaded to %s at %s\n", bucket, bucket.Endpoint)
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
	s3.register(f)
	return cmd
}

// newEtcdRestoreCommand restores a snapshot as one member of a new tenant's etcd, before the
// member starts (the operator runs it as an init container of the etcd pods).
func newEtcdRestoreCommand() *cobra.Command {
	var o etcdsnapshot.RestoreOptions
	var peerURLs, from, to string
	var s3 s3Flags
	cmd := &cobra.Command{
		Short: "restore an etcd snapshot as a member of a new tenant, its Services moved to the new Service range",
		Long: "Restores --snapshot into --data-dir, unless --data-dir exists already (the member restarts with its own data).\n" +
			"Every Service's ClusterIP is moved from --from-service-cidr to the same offset in --to-service-cidr.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if o.S3, err = s3.location(); err != nil {
				return err
			}
			if o.S3 != nil {
				o.Snapshot = o.S3.String()
			}
			for flag, v := range map[string]string{"snapshot": o.Snapshot, "data-dir": o.DataDir, "name": o.Name, "initial-cluster": o.InitialCluster,
				"initial-advertise-peer-urls": peerURLs, "from-service-cidr": from, "to-service-cidr": to} {
				if v == "" {
					return fmt.Errorf("--%s is required", flag)
				}
			}
			if o.FromServiceCIDR, err = netip.ParsePrefix(from); err != nil {
				return fmt.Errorf("--from-service-cidr: %w", err)
			}
			if o.ToServiceCIDR, err = netip.ParsePrefix(to); err != nil {
				return fmt.Errorf("--to-service-cidr: %w", err)
			}
			o.PeerURLs = strings.Split(peerURLs, ",")
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			restored, err := etcdsnapshot.Restore(ctx, infoLogger(), o)
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
	f.StringVar(&o.Snapshot, "snapshot", "", "the snapshot file (or --s3-*)")
	f.StringVar(&o.SHA256, "sha256", "", "the snapshot's sha256 when it was taken; the file must still have it")
	f.StringVar(&o.DataDir, "data-dir", "", "the member's data directory (etcd's --data-dir)")
	f.StringVar(&o.Name, "name", "", "the member's name (etcd's --name)")
	f.StringVar(&o.InitialCluster, "initial-cluster", "", "etcd's --initial-cluster of the new cluster")
	f.StringVar(&o.InitialClusterToken, "initial-cluster-token", "", "etcd's --initial-cluster-token of the new cluster")
	f.StringVar(&peerURLs, "initial-advertise-peer-urls", "", "etcd's --initial-advertise-peer-urls of the member")
	f.StringVar(&from, "from-service-cidr", "", "the Service range of the tenant the snapshot was taken of")
	f.StringVar(&to, "to-service-cidr", "", "the new tenant's Service range")
	s3.register(f)
	return cmd
}

// infoLogger logs etcd's progress at info level to standard error: standard output carries
// the result, and a failed job's log tail is its message.
func infoLogger() *zap.Logger {
	lg, err := zap.NewProduction()
	if err != nil {
		return zap.NewNop()
	}
	return lg
}
