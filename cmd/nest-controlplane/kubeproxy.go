package main

import (
	"github.com/spf13/cobra"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
)

// newKubeProxyCommand is upstream kube-proxy. The operator runs it on the nodes lent to a
// tenant, in iptables mode: the image carries the iptables userland it executes.
func newKubeProxyCommand() *cobra.Command { return proxy.NewProxyCommand() }
