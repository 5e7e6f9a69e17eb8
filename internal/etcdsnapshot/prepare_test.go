package etcdsnapshot

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// TestPrepare readies a snapshot's keys as a restore does: Services move to the new range,
// volumes of the nodes' own disks go, and the old cluster's running state is dropped.
func TestPrepare(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	peer, client, err := freeLoopbackURLs()
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	codec := protobuf.NewSerializer(scheme, scheme)
	encode := func(obj runtime.Object) string {
		var buf bytes.Buffer
		if err := codec.Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	pv := func(name string, src corev1.PersistentVolumeSource) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: src}}
	}
	keys := map[string]runtime.Object{
		servicesPrefix + "default/web": &corev1.Service{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
			Spec:       corev1.ServiceSpec{ClusterIP: "10.254.1.20", ClusterIPs: []string{"10.254.1.20"}, ExternalIPs: []string{"192.0.2.1"}}},
		persistentVolumesPrefix + "host-root": pv("host-root", corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}),
		persistentVolumesPrefix + "disk":      pv("disk", corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/sda"}}),
		persistentVolumesPrefix + "data":      pv("data", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h"}}),
	}
	err = withScratchEtcd(ctx, zap.NewNop(), t.TempDir(), peer, client, func(c *clientv3.Client) error {
		for k, obj := range keys {
			if _, err := c.Put(ctx, k, encode(obj)); err != nil {
				return err
			}
		}
		if _, err := c.Put(ctx, "/registry/pods/default/web-1", "x"); err != nil {
			return err
		}
		if err := Prepare(ctx, c, netip.MustParsePrefix("10.254.1.0/24"), netip.MustParsePrefix("10.254.7.0/24")); err != nil {
			return err
		}
		resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		var left []string
		for _, kv := range resp.Kvs {
			left = append(left, string(kv.Key))
		}
		if want := []string{persistentVolumesPrefix + "data", servicesPrefix + "default/web"}; len(left) != 2 || left[0] != want[0] || left[1] != want[1] {
			t.Errorf("keys after Prepare: %v, want %v (the CSI volume, the Service; no node volume, no pod)", left, want)
		}
		got, err := c.Get(ctx, servicesPrefix+"default/web")
		if err != nil {
			return err
		}
		obj, _, err := codec.Decode(got.Kvs[0].Value, nil, nil)
		if err != nil {
			return err
		}
		if svc := obj.(*corev1.Service); svc.Spec.ClusterIP != "10.254.7.20" || len(svc.Spec.ExternalIPs) != 0 {
			t.Errorf("the Service after Prepare: clusterIP %s, externalIPs %v; want 10.254.7.20, none", svc.Spec.ClusterIP, svc.Spec.ExternalIPs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
