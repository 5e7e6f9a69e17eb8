package main

import (
	"fmt"
	"sync"
	_ "unsafe" // go:linkname

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"k8s.io/apiserver/pkg/storage"
	etcdfeature "k8s.io/apiserver/pkg/storage/feature"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	_ "k8s.io/apiserver/pkg/storage/storagebackend/factory" // defines newETCD3Client
)

// newETCD3Client is the function upstream's storage factory calls for every etcd client the
// apiserver makes: one per resource's storage (57 in a tenant), one per compactor and one per
// health check. Each upstream client has its own gRPC connection to every --etcd-servers
// address, with its own buffers and goroutines. Upstream knows (kubernetes/kubernetes#111622,
// open); runAPIServer replaces it with shareETCDConnections. Linking by name fails the build
// when upstream renames or retypes it, so an upgrade cannot silently lose the replacement.
//
//go:linkname newETCD3Client k8s.io/apiserver/pkg/storage/storagebackend/factory.newETCD3Client
var newETCD3Client func(storagebackend.TransportConfig) (*kubernetes.Client, error)

// etcdConnections gives every etcd client the apiserver makes for one transport (servers,
// certificates) one shared gRPC connection, made by upstream's constructor on first use and
// kept for the life of the process. Each client still has its own watcher and lease manager
// (its own gRPC streams on that connection, closed with it), so closing a client (upstream
// closes a custom resource's storage when its definition changes) closes only its streams,
// and one resource's watches never share a stream with another's. Requests use the
// connection's call options (retries, message sizes) as before.
//
// A client made on a connection lists no endpoints (only the connection does), and upstream
// does its once-per-endpoint work with whichever client it is given. So conn runs the work
// requests depend on with the connection itself: the check that etcd answers progress
// requests. Without it, consistent LISTs and watch-list streams bypass the watch cache and
// read etcd (a LIST of 1,000 ConfigMaps took twice as long: TestListLatency). The deprecated
// per-endpoint database-size poller does not run; the storage monitor reports the size
// (apiserver_storage_size_bytes).
type etcdConnections struct {
	connect func(storagebackend.TransportConfig) (*kubernetes.Client, error)

	mu    sync.Mutex
	conns map[string]*clientv3.Client
}

// sharedETCDEnv, set to "off" in the apiserver's environment, keeps upstream's connection per
// etcd client (to measure the difference: TestIdleProcessMemory).
const sharedETCDEnv = "KUBENEST_SHARED_ETCD"

// shareETCDConnections makes the apiserver's etcd clients share a connection per transport.
func shareETCDConnections() {
	c := &etcdConnections{connect: newETCD3Client, conns: map[string]*clientv3.Client{}}
	newETCD3Client = c.client
}

func (c *etcdConnections) client(t storagebackend.TransportConfig) (*kubernetes.Client, error) {
	conn, err := c.conn(t)
	if err != nil {
		return nil, err
	}
	cl := clientv3.NewCtxClient(conn.Ctx(), clientv3.WithZapLogger(conn.GetLogger()))
	// KV, Cluster, Maintenance and Auth hold no state of their own but the connection;
	// upstream wraps the client's KV (latency tracking) in this client only.
	cl.KV, cl.Cluster, cl.Maintenance, cl.Auth = conn.KV, conn.Cluster, conn.Maintenance, conn.Auth
	cl.Watcher = clientv3.NewWatcher(conn)
	cl.Lease = clientv3.NewLease(conn)
	kc := &kubernetes.Client{Client: cl}
	kc.Kubernetes = kc
	return kc, nil
}

func (c *etcdConnections) conn(t storagebackend.TransportConfig) (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := fmt.Sprintf("%v", t) // as upstream keys its compactors: servers, files, dialer
	if conn, ok := c.conns[key]; ok {
		return conn, nil
	}
	kc, err := c.connect(t)
	if err != nil {
		return nil, err
	}
	c.conns[key] = kc.Client
	etcdfeature.DefaultFeatureSupportChecker.CheckClient(kc.Client.Ctx(), kc.Client, storage.RequestWatchProgress)
	return kc.Client, nil
}
