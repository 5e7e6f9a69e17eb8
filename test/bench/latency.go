package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// apiLatency times the same requests against a tenant's apiserver and the host's, interleaved
// in one run, so both see the same machine at the same moments.
func apiLatency(ctx context.Context, e *env, args []string) ([]Figure, error) {
	fs := flag.NewFlagSet("latency", flag.ExitOnError)
	gets := fs.Int("gets", 500, "GET requests per cluster")
	lists := fs.Int("lists", 50, "LIST requests per cluster and list size")
	_ = fs.Parse(args)

	ns, cleanup, err := namespace(ctx, e, "bench-latency")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	vc := benchVC(ns, "latency")
	if _, err := readyTenant(ctx, e, vc, 5*time.Minute); err != nil {
		return nil, err
	}
	tcfg, err := tenantConfig(ctx, e, vc)
	if err != nil {
		return nil, err
	}
	hcfg := rest.CopyConfig(e.cfg)
	// No client-side rate limit: it would add its own waits to what is measured.
	tcfg.QPS, hcfg.QPS = -1, -1
	clusters := []*cluster{{name: "tenant", c: kubernetes.NewForConfigOrDie(tcfg)}, {name: "host", c: kubernetes.NewForConfigOrDie(hcfg)}}

	// The same namespaces in both clusters; in the host they are the benchmark's own, labelled
	// so that cleanup finds them.
	sizes := []int{100, 1000}
	for _, n := range sizes {
		name := fmt.Sprintf("bench-latency-%d", n)
		_, cleanupNS, err := namespace(ctx, e, name)
		if err != nil {
			return nil, err
		}
		defer cleanupNS()
		if _, err := clusters[0].c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	// Warm up each connection (TLS, discovery-free typed clients, the apiservers' caches).
	for _, c := range clusters {
		for range 20 {
			if _, err := c.c.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("%s: %w", c.name, err)
			}
		}
	}

	payload := strings.Repeat("x", 1024)
	fmt.Printf("creating %d ConfigMaps of 1 KiB in each cluster...\n", sizes[0]+sizes[1])
	for _, n := range sizes {
		for i := range n {
			err := interleave(ctx, clusters, i, "CREATE", func(ctx context.Context, c kubernetes.Interface) error {
				_, err := c.CoreV1().ConfigMaps(fmt.Sprintf("bench-latency-%d", n)).Create(ctx, &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)},
					Data:       map[string]string{"payload": payload},
				}, metav1.CreateOptions{})
				return err
			})
			if err != nil {
				return nil, err
			}
		}
	}
	fmt.Printf("%d GETs, %d LISTs of %v ConfigMaps in each cluster...\n", *gets, *lists, sizes)
	for i := range *gets {
		name := fmt.Sprintf("cm-%04d", rand.IntN(1000))
		err := interleave(ctx, clusters, i, "GET", func(ctx context.Context, c kubernetes.Interface) error {
			_, err := c.CoreV1().ConfigMaps("bench-latency-1000").Get(ctx, name, metav1.GetOptions{})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	for _, n := range sizes {
		op := fmt.Sprintf("LIST %d", n)
		for i := range *lists {
			err := interleave(ctx, clusters, i, op, func(ctx context.Context, c kubernetes.Interface) error {
				l, err := c.CoreV1().ConfigMaps(fmt.Sprintf("bench-latency-%d", n)).List(ctx, metav1.ListOptions{})
				// n, and the namespace's kube-root-ca.crt once the controller-manager wrote it.
				if err == nil && len(l.Items) != n && len(l.Items) != n+1 {
					err = fmt.Errorf("listed %d ConfigMaps, want %d", len(l.Items), n)
				}
				return err
			})
			if err != nil {
				return nil, err
			}
		}
	}

	var figures []Figure
	for _, op := range []string{"GET", "LIST 100", "LIST 1000", "CREATE"} {
		t, h := clusters[0].sorted(op), clusters[1].sorted(op)
		method := fmt.Sprintf("%d sequential requests per cluster, tenant and host alternating, from this machine with client-go (JSON, no client rate limit), ConfigMaps of 1 KiB; the tenant's apiserver through its NodePort, the host's on its own address", len(t))
		for _, p := range []float64{0.5, 0.99} {
			pn := fmt.Sprintf("p%d", int(p*100))
			tp, hp := percentile(t, p), percentile(h, p)
			figures = append(figures,
				Figure{fmt.Sprintf("API %s %s, tenant", op, pn), ms(tp), "ms", method},
				Figure{fmt.Sprintf("API %s %s, host", op, pn), ms(hp), "ms", method},
				Figure{fmt.Sprintf("API %s %s, tenant/host", op, pn), tp.Seconds() / hp.Seconds(), "ratio", "same run"})
		}
	}
	return figures, nil
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// cluster is one apiserver and the latencies measured against it, by operation.
type cluster struct {
	name string
	c    kubernetes.Interface
	took map[string][]time.Duration
}

func (c *cluster) sorted(op string) []time.Duration {
	d := slices.Clone(c.took[op])
	slices.Sort(d)
	return d
}

// interleave times one request against each cluster, the order alternating with i.
func interleave(ctx context.Context, clusters []*cluster, i int, op string, do func(context.Context, kubernetes.Interface) error) error {
	order := []int{0, 1}
	if i%2 == 1 {
		order = []int{1, 0}
	}
	for _, k := range order {
		c := clusters[k]
		start := time.Now()
		if err := do(ctx, c.c); err != nil {
			return fmt.Errorf("%s %s: %w", c.name, op, err)
		}
		if c.took == nil {
			c.took = map[string][]time.Duration{}
		}
		c.took[op] = append(c.took[op], time.Since(start))
	}
	return nil
}
