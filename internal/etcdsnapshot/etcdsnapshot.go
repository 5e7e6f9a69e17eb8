// Package etcdsnapshot takes a tenant's etcd snapshot and restores one into a new tenant's
// member. A restore moves the tenant's Service addresses into the new tenant's Service range
// (each at the offset it had in the old one) before any apiserver sees the data: the old
// addresses are another tenant's, and the host serves every tenant's Services.
package etcdsnapshot

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// Result describes a snapshot file.
type Result struct {
	SizeBytes int64  `json:"sizeBytes"`
	Revision  int64  `json:"revision"`
	SHA256    string `json:"sha256"`
	Keys      int    `json:"keys"`
}

// HumanSize writes a size in bytes for people, in binary units: "912", "296Ki", "2.1Mi".
func HumanSize(n int64) string {
	units := []string{"", "Ki", "Mi", "Gi", "Ti"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	if i == 0 || f >= 100 {
		return fmt.Sprintf("%.0f%s", f, units[i])
	}
	return fmt.Sprintf("%.1f%s", f, units[i])
}

// Save streams a consistent snapshot from the etcd member cfg points at into path (written
// next to it first, then renamed, so path is whole or absent) and describes it.
func Save(ctx context.Context, lg *zap.Logger, cfg clientv3.Config, path string) (Result, error) {
	if _, err := clientsnapshot.SaveWithVersion(ctx, lg, cfg, path); err != nil {
		return Result{}, err
	}
	return Describe(lg, path)
}

// Describe reads a snapshot file's size, revision, key count and digest.
func Describe(lg *zap.Logger, path string) (Result, error) {
	st, err := snapshot.NewV3(lg).Status(path)
	if err != nil {
		return Result{}, fmt.Errorf("reading snapshot %s: %w", path, err)
	}
	sum, size, err := digest(path)
	if err != nil {
		return Result{}, err
	}
	return Result{SizeBytes: size, Revision: st.Revision, SHA256: sum, Keys: st.TotalKey}, nil
}

func digest(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// RestoreOptions says what to restore and as which member.
type RestoreOptions struct {
	Snapshot string // the snapshot file
	S3       *S3    // or its object, downloaded first
	SHA256   string // its digest when it was taken; the file must still have it
	DataDir  string // the member's data directory: must not exist yet

	// The member, as its etcd flags name it.
	Name                string
	InitialCluster      string
	InitialClusterToken string
	PeerURLs            []string

	// FromServiceCIDR is the Service range of the tenant the snapshot was taken of;
	// ToServiceCIDR the new tenant's.
	FromServiceCIDR, ToServiceCIDR netip.Prefix
}

// Restore writes the member's data directory from the snapshot, prepared for the new tenant
// (Prepare). A data directory that exists is left as it is (false): the member
// restarts with its own data. Each member of a new cluster restores on its own; they end with
// the same data, as every step is deterministic.
func Restore(ctx context.Context, lg *zap.Logger, o RestoreOptions) (bool, error) {
	if _, err := os.Stat(o.DataDir); err == nil {
		return false, nil
	}
	work, err := os.MkdirTemp(filepath.Dir(o.DataDir), ".restore-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(work)
	if o.S3 != nil {
		o.Snapshot = filepath.Join(work, "snapshot.db")
		if err := Download(ctx, *o.S3, o.Snapshot); err != nil {
			return false, err
		}
	}
	sum, _, err := digest(o.Snapshot)
	if err != nil {
		return false, err
	}
	if o.SHA256 != "" && sum != o.SHA256 {
		return false, fmt.Errorf("snapshot %s has sha256 %s, not %s as when it was taken: it was changed since", o.Snapshot, sum, o.SHA256)
	}

	// 1. The snapshot as a lone member of a scratch cluster, served on loopback only.
	scratch := filepath.Join(work, "scratch")
	peer, client, err := freeLoopbackURLs()
	if err != nil {
		return false, err
	}
	if err := snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath: o.Snapshot, Name: "restore", OutputDataDir: scratch,
		PeerURLs: []string{peer.String()}, InitialCluster: "restore=" + peer.String(), InitialClusterToken: "restore",
	}); err != nil {
		return false, fmt.Errorf("restoring the snapshot: %w", err)
	}
	moved := filepath.Join(work, "moved.db")
	if err := withScratchEtcd(ctx, lg, scratch, peer, client, func(c *clientv3.Client) error {
		if err := Prepare(ctx, c, o.FromServiceCIDR, o.ToServiceCIDR); err != nil {
			return err
		}
		_, err := clientsnapshot.SaveWithVersion(ctx, lg, clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 10 * time.Second}, moved)
		return err
	}); err != nil {
		return false, err
	}

	// 2. The moved data as this member of the new cluster.
	if err := snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath: moved, Name: o.Name, OutputDataDir: o.DataDir, PeerURLs: o.PeerURLs,
		InitialCluster: o.InitialCluster, InitialClusterToken: o.InitialClusterToken,
	}); err != nil {
		_ = os.RemoveAll(o.DataDir)
		return false, fmt.Errorf("restoring member %s: %w", o.Name, err)
	}
	return true, nil
}

func freeLoopbackURLs() (peer, client url.URL, err error) {
	var ports []int
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return url.URL{}, url.URL{}, err
		}
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		_ = l.Close()
	}
	return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])},
		url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}, nil
}

func withScratchEtcd(ctx context.Context, lg *zap.Logger, dir string, peer, client url.URL, f func(*clientv3.Client) error) error {
	cfg := embed.NewConfig()
	cfg.Name = "restore"
	cfg.Dir = dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = "restore=" + peer.String()
	cfg.ListenMetricsUrls = nil
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting the restored snapshot: %w", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("the restored snapshot: %w", err)
	case <-time.After(time.Minute):
		return errors.New("the restored snapshot did not start within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client.String()}, DialTimeout: 10 * time.Second, Logger: lg})
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c)
}

// Keys of the kube-apiserver's storage (its default --etcd-prefix) a restore rewrites.
const (
	servicesPrefix          = "/registry/services/specs/"
	persistentVolumesPrefix = "/registry/persistentvolumes/"
)

// dropped are the kinds a restore leaves out. The ServiceCIDRs and IPAddresses are of the old
// range: the new apiserver makes its range's ServiceCIDR from its flags and an IPAddress for
// every Service. Pods and Nodes are the old cluster's running state, and would reach the new
// tenant's nodes without its admission (a snapshot lies in a namespace its users can write to):
// the pods' owners make them again, through the apiserver, and nodes register anew. Leases are
// held by the old cluster's components: its controller-manager's would keep the new one from
// leading until it expired.
var dropped = []string{"/registry/servicecidrs/", "/registry/ipaddresses/", "/registry/pods/", "/registry/minions/", "/registry/leases/"}

// Prepare readies a restored snapshot for a new tenant: see MoveServices, DropNodeVolumes and
// dropped.
func Prepare(ctx context.Context, c *clientv3.Client, from, to netip.Prefix) error {
	if err := MoveServices(ctx, c, from, to); err != nil {
		return err
	}
	if err := DropNodeVolumes(ctx, c); err != nil {
		return err
	}
	for _, prefix := range dropped {
		if _, err := c.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			return fmt.Errorf("deleting %s*: %w", prefix, err)
		}
	}
	return nil
}

// DropNodeVolumes deletes the PersistentVolumes that are not a CSI driver's: those the node
// itself mounts (hostPath, local, fc, iscsi, nfs, ...). A tenant granted privileged pods may
// have made them, and a snapshot of it restored as a tenant without the grant would give its
// baseline pods a claim on a lent node's own disk (the tenant guard refuses such volumes only
// as they are written, and a restore writes none through the apiserver). Their claims are
// left, Lost: a tenant granted privileged pods makes them again.
func DropNodeVolumes(ctx context.Context, c *clientv3.Client) error {
	return eachStored(ctx, c, persistentVolumesPrefix, "PersistentVolumes", func(key []byte, obj runtime.Object) error {
		if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.CSI != nil {
			return nil
		}
		if _, err := c.Delete(ctx, string(key)); err != nil {
			return fmt.Errorf("deleting %s: %w", key, err)
		}
		return nil
	})
}

// coreCodec is the kube-apiserver's storage codec (protobuf) for core/v1 objects.
var coreCodec = func() *protobuf.Serializer {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return protobuf.NewSerializer(scheme, scheme)
}()

// eachStored calls f with each object stored under prefix, decoded; what names them in errors.
func eachStored(ctx context.Context, c *clientv3.Client, prefix, what string, f func(key []byte, obj runtime.Object) error) error {
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("reading the %s: %w", what, err)
	}
	for _, kv := range resp.Kvs {
		obj, _, err := coreCodec.Decode(kv.Value, nil, nil)
		if err != nil {
			return fmt.Errorf("decoding %s: %w", kv.Key, err)
		}
		if err := f(kv.Key, obj); err != nil {
			return err
		}
	}
	return nil
}

// MoveServices gives every Service a ClusterIP at its old offset in the new range, and no
// external IPs (which a tenant's apiserver refuses: the tenant's kube-proxy would capture them
// on the host nodes lent to it).
func MoveServices(ctx context.Context, c *clientv3.Client, from, to netip.Prefix) error {
	return eachStored(ctx, c, servicesPrefix, "Services", func(key []byte, obj runtime.Object) error {
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return fmt.Errorf("%s holds a %T, not a Service", key, obj)
		}
		changed := false
		for i, ip := range svc.Spec.ClusterIPs {
			moved, err := MoveAddress(ip, from, to)
			if err != nil {
				return fmt.Errorf("Service %s/%s: %w", svc.Namespace, svc.Name, err)
			}
			changed = changed || moved != ip
			svc.Spec.ClusterIPs[i] = moved
		}
		if len(svc.Spec.ClusterIPs) > 0 {
			svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		}
		if len(svc.Spec.ExternalIPs) > 0 {
			svc.Spec.ExternalIPs, changed = nil, true
		}
		if !changed {
			return nil
		}
		svc.APIVersion, svc.Kind = "v1", "Service"
		var buf bytes.Buffer
		if err := coreCodec.Encode(svc, &buf); err != nil {
			return fmt.Errorf("encoding %s: %w", key, err)
		}
		if _, err := c.Put(ctx, string(key), buf.String()); err != nil {
			return fmt.Errorf("writing %s: %w", key, err)
		}
		return nil
	})
}

// MoveAddress maps a ClusterIP of the old range to the same offset in the new one. "None"
// (a headless Service) and addresses of another family stay as they are; an address outside
// the old range, or at an offset the new range does not have, is an error.
func MoveAddress(ip string, from, to netip.Prefix) (string, error) {
	if ip == "" || ip == corev1.ClusterIPNone {
		return ip, nil
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "", fmt.Errorf("ClusterIP %q: %w", ip, err)
	}
	if addr.Is4() != from.Addr().Is4() {
		return ip, nil
	}
	if !from.Contains(addr) {
		return "", fmt.Errorf("ClusterIP %s is outside the snapshot's Service range %s", ip, from)
	}
	offset := new(big.Int).Sub(new(big.Int).SetBytes(addr.AsSlice()), new(big.Int).SetBytes(from.Masked().Addr().AsSlice()))
	size := new(big.Int).Lsh(big.NewInt(1), uint(to.Addr().BitLen()-to.Bits()))
	if offset.Cmp(size) >= 0 {
		return "", fmt.Errorf("ClusterIP %s is at offset %s of %s, beyond the new Service range %s", ip, offset, from, to)
	}
	moved := new(big.Int).Add(new(big.Int).SetBytes(to.Masked().Addr().AsSlice()), offset).FillBytes(make([]byte, len(to.Addr().AsSlice())))
	out, _ := netip.AddrFromSlice(moved)
	return out.String(), nil
}

// S3 is an object of an S3-compatible bucket, and the credentials to reach it.
type S3 struct {
	Endpoint, Bucket, Key, Region string
	Insecure                      bool
	AccessKeyID, SecretAccessKey  string
}

func (s S3) String() string { return "s3://" + s.Bucket + "/" + s.Key }

func (s S3) client() (*minio.Client, error) {
	if s.AccessKeyID == "" || s.SecretAccessKey == "" {
		return nil, fmt.Errorf("no credentials for %s (accessKeyID and secretAccessKey)", s)
	}
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, ""),
		Secure: !s.Insecure,
		Region: s.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %s: %w", s.Endpoint, err)
	}
	return c, nil
}

// Upload puts a snapshot file into the bucket.
func Upload(ctx context.Context, s S3, path string) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if _, err := c.FPutObject(ctx, s.Bucket, s.Key, path, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("uploading to %s at %s: %w", s, s.Endpoint, err)
	}
	return nil
}

// Download gets a snapshot file from the bucket.
func Download(ctx context.Context, s S3, path string) error {
	c, err := s.client()
	if err != nil {
		return err
	}
	if err := c.FGetObject(ctx, s.Bucket, s.Key, path, minio.GetObjectOptions{}); err != nil {
		return fmt.Errorf("downloading %s from %s: %w", s, s.Endpoint, err)
	}
	return nil
}
