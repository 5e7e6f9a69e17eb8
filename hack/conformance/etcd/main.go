// Command etcd is upstream etcd, built from the go.etcd.io/etcd/server/v3 version the
// k8s.io/kubernetes module requires, for the conformance suite's etcd image (the sample API
// server's storage, registry.k8s.io/etcd in test/utils/image).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
