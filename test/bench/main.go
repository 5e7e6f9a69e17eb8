// Command bench measures KubeNest on a running host cluster (the one `make up` starts) and
// prints a table of figures, each with how it was measured; it also writes them as JSON.
//
//	go run ./test/bench --kubeconfig _output/host.kubeconfig throughput --pods 200
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
  create       create→Ready of VirtualClusters, one after another and all at once, by phase
  throughput   N pods through a tenant's shared node vs N pods created directly in the host

Flags:
`)
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e, err := newEnv(*kubeconfig, *image)
	if err != nil {
		fatal(err)
	}
	var figures []Figure
	switch name, args := flag.Arg(0), flag.Args()[1:]; name {
	case "create":
		figures, err = createReady(ctx, e, args)
	case "throughput":
		figures, err = throughput(ctx, e, args)
	default:
		fatal(fmt.Errorf("unknown benchmark %q; see --help", name))
	}
	if err != nil {
		fatal(err)
	}
	print(figures)
	if err := writeJSON(*out, figures); err != nil {
		fatal(err)
	}
}

func newEnv(kubeconfig, image string) (*env, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = v1alpha1.AddToScheme(scheme)
	host, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	return &env{cfg: cfg, host: host, hostCS: kubernetes.NewForConfigOrDie(cfg), image: image}, nil
}

func print(figures []Figure) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FIGURE\tVALUE\tUNIT\tMETHOD")
	for _, f := range figures {
		fmt.Fprintf(w, "%s\t%.3g\t%s\t%s\n", f.Name, f.Value, f.Unit, f.Method)
	}
	_ = w.Flush()
}

func writeJSON(path string, figures []Figure) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(map[string]any{"time": time.Now().UTC().Format(time.RFC3339), "figures": figures}, "", "  ")
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
