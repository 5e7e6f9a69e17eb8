package main

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// A named work queue made after start-up runs no metrics goroutine: internal/workqueuemetrics
// set client-go's no-op provider before the components' Prometheus one (package
// initialization order).
func TestWorkQueueMetricsOff(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "kubenest-test"})
	defer q.ShutDown()
	time.Sleep(10 * time.Millisecond) // the goroutine, if any, has started
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "updateUnfinishedWorkLoop") {
		t.Errorf("a named work queue runs client-go's metrics goroutine (it wakes every 500 ms): the Prometheus provider was set first")
	}
}
