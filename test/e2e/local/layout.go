package main

import (
	"fmt"
	"path/filepath"
)

// The local cluster's addresses. None of them overlaps KubeNest's default tenant Service range
// (10.254.0.0/16).
const (
	bridgeName    = "knbr0"
	bridgeIP      = "172.30.0.1" // the control plane listens here
	bridgePrefix  = 24
	podCIDR       = "10.244.0.0/16"
	serviceCIDR   = "10.96.0.0/16"
	apiServiceIP  = "10.96.0.1"
	dnsServiceIP  = "10.96.0.10"
	clusterDomain = "cluster.local"
	apiPort       = 6443
	nodePrefix    = "kn-worker-"
	// lendableLabel opts a node in to being lent to tenants.
	lendableLabel = "kubenest.io/lendable"

	// The load balancer ("local lb") gives each Service of type LoadBalancer one address of
	// this pool on the bridge, where it relays connections to the Service's node port.
	lbPoolFirst = "172.30.0.200"
	lbPoolLast  = "172.30.0.249"
	lbProcess   = "loadbalancer" // its name among the recorded processes and logs

	// The S3-compatible server ("local s3") listens on the bridge, at http://172.30.0.1:9000.
	s3Port    = "9000"
	s3Process = "s3"

	// PauseImage is the pod sandbox image every node's containerd uses.
	PauseImage = "kubenest.io/pause:3.10"
)

// node is one worker: a network namespace of the same name with its own address, pod subnet,
// containerd and kubelet.
type node struct {
	index   int
	name    string
	ip      string
	podCIDR string
	gateway string // the node's address on its pod bridge
}

func nodesOf(n int) []node {
	var out []node
	for i := 1; i <= n; i++ {
		out = append(out, node{
			index:   i,
			name:    fmt.Sprintf("%s%d", nodePrefix, i),
			ip:      fmt.Sprintf("172.30.0.%d", 10+i),
			podCIDR: fmt.Sprintf("10.244.%d.0/24", i),
			gateway: fmt.Sprintf("10.244.%d.1", i),
		})
	}
	return out
}

func (c config) pkiDir() string           { return filepath.Join(c.stateDir, "pki") }
func (c config) logDir() string           { return filepath.Join(c.outDir, "local", "logs") }
func (c config) pidDir() string           { return filepath.Join(c.runDir, "pids") }
func (c config) hostKubeconfig() string   { return filepath.Join(c.outDir, "host.kubeconfig") }
func (c config) nodeDir(n node) string    { return filepath.Join(c.stateDir, "nodes", n.name) }
func (c config) nodeRunDir(n node) string { return filepath.Join(c.runDir, n.name) }
func (c config) containerdSocket(n node) string {
	return filepath.Join(c.nodeRunDir(n), "containerd.sock")
}
func (c config) kubeBinary(name string) string { return filepath.Join(c.kubeBin, name) }
