// Command bench measures KubeNest on a running host cluster (the one `make up` starts) and
// prints a table of figures, each with how it was measured; it also writes them as JSON.
//
//	go run ./test/bench --kubeconfig _output/host.kubeconfig throughput --pods 200
//	go run ./test/bench --kubeconfig _output/host.kubeconfig all
//
// Everything a benchmark creates is in host namespaces labelled kubenest.io/bench=true and is
// deleted when it ends, also on Ctrl-C; `bench cleanup` deletes what a killed run left.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// Figure is one measured number.
type Figure struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Method string  `json:"method"`
}

type env struct {
	cfg    *rest.Config
	host   client.Client
	hostCS kubernetes.Interface
	image  string
}

func main() {
	kubeconfig := flag.String("kubeconfig", "_output/host.kubeconfig", "kubeconfig of the host cluster")
	out := flag.String("json", "_output/bench.json", "where to write the figures as JSON")
	image := flag.String("image", "kubenest.io/busybox:1.35", "image of the pods the benchmarks create (present on every node)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), `bench measures KubeNest on a running host cluster.

Usage: bench [flags] <benchmark> [benchmark flags]

Benchmarks:
  create       create→Ready of VirtualClusters, one after another (etcd on a volume claim, the
               default, and on an emptyDir) and all at once, by step
  memory       memory and CPU of each component of idle tenants
  density      idle tenants created one by one until one is not Ready in time, the host runs
               short of memory, or a cap; the host's memory then (--asleep N: the first N
               sleep; then the operator's cost per tenant, idle CPU per awake one, wakes)
  throughput   N pods through a tenant's shared node vs N pods created directly in the host
  latency      GET, LIST and CREATE latency of a tenant's apiserver vs the host's, same run
  promotion    lending a host node to a tenant and giving it back
  snapshot     snapshot of a tenant holding 1,000 ConfigMaps and 100 Deployments, and a new
               tenant restored from it
  sleep        an idle tenant put to sleep, then woken by its first request: time to sleep,
               first request to answer, what sleeping frees
  all          all of the above, sized for a small machine (density's tenants are the ones
               whose idle memory is measured)
  cleanup      delete what an interrupted run left behind

'<benchmark> --help' lists a benchmark's flags.

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	// controller-runtime (the tracker's cache) logs nothing here, and says so once if unset.
	ctrllog.SetLogger(logr.Discard())
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	// The first Ctrl-C ends the benchmark, which then deletes what it created; a second one
	// ends the program at once.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		signal.Stop(signals)
		fmt.Fprintln(os.Stderr, "bench: interrupted; deleting what this run created (Ctrl-C again to leave it, then 'bench cleanup')")
		cancel()
	}()
	e, err := newEnv(*kubeconfig, *image)
	if err != nil {
		fatal(err)
	}
	benchmarks := map[string]func(context.Context, *env, []string) ([]Figure, error){
		"create":     createReady,
		"memory":     memory,
		"density":    density,
		"throughput": throughput,
		"latency":    apiLatency,
		"promotion":  promotion,
		"snapshot":   snapshotRestore,
		"sleep":      sleepWake,
		"all":        all,
		"cleanup":    cleanup,
	}
	name, args := flag.Arg(0), flag.Args()[1:]
	bench, ok := benchmarks[name]
	if !ok {
		fatal(fmt.Errorf("unknown benchmark %q; see --help", name))
	}
	start := time.Now()
	figures, err := bench(ctx, e, args)
	// What was measured is shown and kept, also when a later part failed.
	if len(figures) > 0 {
		print(figures)
		if werr := writeJSON(*out, name, args, start, figures); werr != nil {
			fatal(werr)
		}
		fmt.Printf("\n%d figures in %s, written to %s\n", len(figures), time.Since(start).Round(time.Second), *out)
	}
	if err != nil {
		fatal(err)
	}
}

// cleanup deletes the host namespaces of earlier runs, and the tenants in them.
func cleanup(ctx context.Context, e *env, _ []string) ([]Figure, error) {
	l := &corev1.NamespaceList{}
	if err := e.host.List(ctx, l, client.MatchingLabels{labelBench: "true"}); err != nil {
		return nil, err
	}
	for _, ns := range l.Items {
		fmt.Printf("deleting namespace %s\n", ns.Name)
		deleteNamespace(e, ns.Name)
	}
	return nil, nil
}

func newEnv(kubeconfig, image string) (*env, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	scheme := kruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	host, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, host: host, hostCS: kubernetes.NewForConfigOrDie(cfg), image: image}, nil
}

// print shows the figures as a table; each method is written once, below it, and the table
// refers to it by number.
func print(figures []Figure) {
	var methods []string
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FIGURE\tVALUE\tUNIT\tMETHOD")
	for _, f := range figures {
		i := slices.Index(methods, f.Method)
		if i < 0 {
			methods = append(methods, f.Method)
			i = len(methods) - 1
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t[%d]\n", f.Name, formatValue(f.Value), f.Unit, i+1)
	}
	_ = w.Flush()
	fmt.Println()
	for i, m := range methods {
		fmt.Printf("[%d] %s\n", i+1, m)
	}
}

// formatValue shows three significant digits, and whole numbers from 100 on.
func formatValue(v float64) string {
	if v >= 100 || v <= -100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.3g", v)
}

func writeJSON(path, benchmark string, args []string, start time.Time, figures []Figure) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	host, _ := os.Hostname()
	data, err := json.MarshalIndent(map[string]any{
		"benchmark": benchmark,
		"args":      args,
		"time":      start.UTC().Format(time.RFC3339),
		"duration":  time.Since(start).Round(time.Second).String(),
		"machine":   map[string]any{"hostname": host, "cpus": runtime.NumCPU(), "memoryMiB": machineMemoryMiB()},
		"figures":   figures,
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "bench: %v\n", err)
	os.Exit(1)
}

func seconds(d time.Duration) float64 { return d.Seconds() }

func machineMemoryMiB() uint64 {
	m, _ := hostMemory()
	return m.total / mib
}
