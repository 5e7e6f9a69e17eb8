// Command pause is the sandbox ("pause") process of the local host cluster's pods: it holds a
// pod's namespaces open, reaps orphaned children, and exits on SIGINT or SIGTERM. The local
// cluster cannot pull registry.k8s.io/pause, so it builds this one into a tiny image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			for {
				var status syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
			continue
		}
		os.Exit(0)
	}
}
