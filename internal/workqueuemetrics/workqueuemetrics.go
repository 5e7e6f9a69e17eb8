// Package workqueuemetrics turns client-go's work queue metrics off in the process that
// imports it, unless its environment says KUBENEST_WORKQUEUE_METRICS=on.
//
// A named work queue with metrics runs a goroutine that wakes every 500 ms to update two
// gauges (its unfinished work and its longest running item). An idle tenant's controllers
// process has 61 such queues and its apiserver 31: about 180 wake-ups a second between them,
// each a trip through the Go scheduler and the kernel, for figures nobody reads while the
// tenant is idle (BENCHMARKS.md, "Idle CPU: work queues"). Without metrics, client-go starts no
// such goroutine; the queues' depth, adds and latency metrics go too.
//
// client-go keeps the first metrics provider set and starts no goroutine only for its own,
// unexported no-op provider, which is what it holds until one is set. The components set
// theirs (Prometheus) in an init function of k8s.io/component-base/metrics/prometheus/workqueue.
// Go initializes, at each step, the first package by import path whose imports are all
// initialized (the Go specification, "Package initialization"): this package imports only
// client-go's workqueue, and its path sorts before every k8s.io one, so its init runs first
// and sets client-go's own no-op provider again, read through a linkname. The command's test
// checks that a queue made after start-up starts no metrics goroutine.
package workqueuemetrics

import (
	"os"
	_ "unsafe" // for go:linkname

	"k8s.io/client-go/util/workqueue"
)

// Env, set to "on" in a process's environment, leaves work queue metrics on.
const Env = "KUBENEST_WORKQUEUE_METRICS"

// clientGoDefault is client-go's provider until one is set: its no-op one.
//
//go:linkname clientGoDefault k8s.io/client-go/util/workqueue.globalMetricsProvider
var clientGoDefault workqueue.MetricsProvider

func init() {
	if os.Getenv(Env) != "on" {
		workqueue.SetProvider(clientGoDefault)
	}
}
