package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/pkg/v3/flags"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/klog/v2"
)

// parseEtcdFlags reads etcd's own flags (those embed.Config registers, plus
// --initial-cluster-state) and --wait-for-dns; --help prints them all. A lone member's
// --election-timeout defaults to loneElectionMs.
func parseEtcdFlags(args []string) (*embed.Config, time.Duration, error) {
	cfg := embed.NewConfig()
	fs := flag.NewFlagSet("nest-etcd", flag.ContinueOnError)
	cfg.AddFlags(fs)
	state := flags.NewSelectiveStringValue(embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	fs.Var(state, "initial-cluster-state", "Initial cluster state ('new' when bootstrapping a new cluster or 'existing' when adding new members to an existing cluster). After successful initialization (bootstrapping or adding), flag is ignored on restarts.")
	waitDNS := fs.Duration("wait-for-dns", 2*time.Minute, "How long a member of a cluster of several waits, before starting, for the host names of --initial-advertise-peer-urls to resolve (a StatefulSet pod's DNS record appears shortly after the pod); 0 does not wait. A lone member never waits: it talks to no peer. Not an upstream etcd flag.")
	fs.SetOutput(io.Discard) // errors are returned, --help printed by printFlags
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printFlags(os.Stdout, fs)
		}
		return nil, 0, err
	}
	if fs.NArg() != 0 {
		return nil, 0, fmt.Errorf("%q is not a flag", fs.Arg(0))
	}

	// As etcd's own main does: URL flags are read back from the flag set.
	cfg.ListenPeerUrls = flags.UniqueURLsFromFlag(fs, "listen-peer-urls")
	cfg.AdvertisePeerUrls = flags.UniqueURLsFromFlag(fs, "initial-advertise-peer-urls")
	cfg.ListenClientUrls = flags.UniqueURLsFromFlag(fs, "listen-client-urls")
	cfg.ListenClientHttpUrls = flags.UniqueURLsFromFlag(fs, "listen-client-http-urls")
	cfg.AdvertiseClientUrls = flags.UniqueURLsFromFlag(fs, "advertise-client-urls")
	cfg.ListenMetricsUrls = flags.UniqueURLsFromFlag(fs, "listen-metrics-urls")
	cfg.CORS = flags.UniqueURLsMapFromFlag(fs, "cors")
	cfg.HostWhitelist = flags.UniqueStringsMapFromFlag(fs, "host-whitelist")
	cfg.ClientTLSInfo.AllowedHostnames = flags.StringsFromFlag(fs, "client-cert-allowed-hostname")
	cfg.PeerTLSInfo.AllowedCNs = flags.StringsFromFlag(fs, "peer-cert-allowed-cn")
	cfg.PeerTLSInfo.AllowedHostnames = flags.StringsFromFlag(fs, "peer-cert-allowed-hostname")
	cfg.CipherSuites = flags.StringsFromFlag(fs, "cipher-suites")
	cfg.MaxConcurrentStreams = flags.Uint32FromFlag(fs, "max-concurrent-streams")
	cfg.LogOutputs = flags.UniqueStringsFromFlag(fs, "log-outputs")
	cfg.ClusterState = state.String()
	if flags.IsSet(fs, "listen-client-urls") && !flags.IsSet(fs, "advertise-client-urls") {
		cfg.AdvertiseClientUrls = nil
	}
	fs.Visit(func(f *flag.Flag) { cfg.FlagsExplicitlySet[f.Name] = true })
	getBool := func(name string) *bool {
		v, err := flags.GetBoolFlagVal(fs, name)
		if err != nil {
			return nil
		}
		return v
	}
	if err := embed.SetFeatureGatesFromExperimentalFlags(cfg.ServerFeatureGate, getBool,
		fs.Lookup(embed.ServerFeatureGateFlagName).Value.String()); err != nil {
		return nil, 0, err
	}
	// As etcd's own main does: the threshold above which a request is logged as expensive
	// defaults only there (embed leaves it 0, which logged every request, about 600 log lines
	// and a noticeable share of etcd's CPU in a new tenant's first seconds).
	if cfg.WarningUnaryRequestDuration != 0 && cfg.ExperimentalWarningUnaryRequestDuration != 0 {
		return nil, 0, errors.New("--warning-unary-request-duration and --experimental-warning-unary-request-duration cannot both be set")
	}
	if cfg.WarningUnaryRequestDuration == 0 {
		cfg.WarningUnaryRequestDuration = cmp.Or(cfg.ExperimentalWarningUnaryRequestDuration, embed.DefaultWarningUnaryRequestDuration)
	}
	members, err := types.NewURLsMap(cfg.InitialCluster)
	if err == nil && len(members) == 1 && !flags.IsSet(fs, "election-timeout") && loneElectionMs >= 5*cfg.TickMs {
		cfg.ElectionMs = loneElectionMs
	}
	if err := cfg.Validate(); err != nil {
		return nil, 0, err
	}
	return cfg, *waitDNS, nil
}

// loneElectionMs is a lone member's --election-timeout unless set. A member leads, and serves,
// only after one randomised election timeout (etcd fast-forwards all but the last tick:
// 0.1–1 s at etcd's default 1000 ms, 0.1–0.5 s at 500; a new member was ready after 0.61 s on
// average, 0.29 s at 500). A lone member has no peer whose silence the timeout would detect.
// It is set here rather than in the pod's flags: a change there replaces every tenant's etcd
// pod, and an ephemeral member's data with it. (Shorter heartbeats would shorten the wait
// further but tick etcd more often while idle.)
const loneElectionMs = 500

// printFlags prints the flags of fs, each with its default and help. (The flag package's own
// listing would also print the result of a panic that etcd's --feature-gates flag causes
// there.)
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: nest-etcd [flags]\n\nRuns one etcd member (go.etcd.io/etcd/server/v3/embed) with etcd's own flags, and --wait-for-dns.\nA lone member (one in --initial-cluster) defaults --election-timeout to %d: it leads sooner.\n\n", loneElectionMs)
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(w, "  --%s", f.Name)
		if f.DefValue != "" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "\n      %s\n", strings.ReplaceAll(f.Usage, "\n", "\n      "))
	})
	fmt.Fprintf(w, "\n--version prints the version.\n")
}

func runEtcd(ctx context.Context, cfg *embed.Config, waitDNS time.Duration) error {
	// A lone member dials no peer, and etcd compares its advertised and initial-cluster URLs as
	// strings before it resolves anything: it starts without its name. Waiting for it anyway
	// cost up to 5 s: a query made before the pod's address is published is answered "no
	// such name", and DNS caches that answer (the host's CoreDNS for 5 s).
	if members, _ := types.NewURLsMap(cfg.InitialCluster); waitDNS > 0 && len(members) > 1 {
		if err := waitForNames(ctx, cfg.AdvertisePeerUrls, waitDNS); err != nil {
			return err
		}
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		klog.InfoS("etcd is ready to serve clients", "name", cfg.Name)
	case err := <-e.Err():
		return fmt.Errorf("etcd stopped before it was ready: %w", err)
	case <-ctx.Done():
		klog.InfoS("stopping etcd before it was ready", "name", cfg.Name)
		return nil
	}
	select {
	case err := <-e.Err():
		return fmt.Errorf("etcd stopped: %w", err)
	case <-e.Server.StopNotify():
		return errors.New("etcd server stopped")
	case <-ctx.Done():
		klog.InfoS("stopping etcd", "name", cfg.Name)
		return nil
	}
}

// waitForNames waits until every host name in urls resolves.
func waitForNames(ctx context.Context, urls []url.URL, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, u := range urls {
		host := u.Hostname()
		if net.ParseIP(host) != nil || host == "localhost" {
			continue
		}
		start := time.Now()
		for {
			_, err := net.DefaultResolver.LookupHost(ctx, host)
			if err == nil {
				if waited := time.Since(start); waited > time.Second {
					klog.InfoS("peer host name resolves", "host", host, "waited", waited.Round(time.Millisecond))
				}
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("host name %s of --initial-advertise-peer-urls did not resolve after %s: %w", host, time.Since(start).Round(time.Second), err)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return nil
}
