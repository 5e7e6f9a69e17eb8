package clustertree

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// virtual-kubelet caches every ConfigMap and Secret of the tenant through this client: by
// their metadata, never their data.
func TestMetadataOnlyConfigMapsAndSecrets(t *testing.T) {
	ctx := context.Background()
	meta := func(kind, name string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: kind},
			ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: name, ResourceVersion: "7", Labels: map[string]string{"a": "b"}}}
	}
	scheme := metadatafake.NewTestScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	mc := metadatafake.NewSimpleMetadataClient(scheme, meta("ConfigMap", "settings"), meta("Secret", "password"))
	// The typed client has the data, which must not be what is listed.
	typed := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "settings"}, Data: map[string]string{"big": "data"}})
	c := (&statusOnlyClient{Interface: typed, meta: mc}).CoreV1()

	cms, err := c.ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil || len(cms.Items) != 1 {
		t.Fatalf("ConfigMaps: %+v, %v", cms, err)
	}
	if cm := cms.Items[0]; cm.Name != "settings" || cm.Namespace != "app" || cm.ResourceVersion != "7" || cm.Labels != nil || cm.Data != nil {
		t.Errorf("ConfigMap listed as %+v: want its name and version, no labels, annotations or data", cm)
	}
	secrets, err := c.Secrets("app").List(ctx, metav1.ListOptions{})
	if err != nil || len(secrets.Items) != 1 || secrets.Items[0].Name != "password" || secrets.Items[0].Data != nil {
		t.Fatalf("Secrets: %+v, %v", secrets, err)
	}

	w, err := c.ConfigMaps("app").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	changed := meta("ConfigMap", "settings")
	changed.ResourceVersion = "8"
	if _, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("app").(metadatafake.MetadataClient).UpdateFake(changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(5 * time.Second)
	for modified := false; !modified; {
		select {
		case e := <-w.ResultChan():
			cm, ok := e.Object.(*corev1.ConfigMap)
			if !ok || cm.Name != "settings" || cm.Data != nil {
				t.Fatalf("watch event %s %T %+v: want the ConfigMap's metadata only", e.Type, e.Object, e.Object)
			}
			modified = e.Type == watch.Modified && cm.ResourceVersion == "8"
		case <-timeout:
			t.Fatal("no watch event for the change")
		}
	}
	// What is not listed or watched is the tenant's typed client's, as before.
	if got, err := c.ConfigMaps("app").Get(ctx, "settings", metav1.GetOptions{}); err != nil || got.Data["big"] != "data" {
		t.Errorf("Get: %+v, %v", got, err)
	}
}

// A watch-list's initial events end with a bookmark whose annotation says so; it is kept.
func TestMetadataOnlyWatchKeepsBookmarks(t *testing.T) {
	events := make(chan watch.Event, 1)
	bookmark := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	events <- watch.Event{Type: watch.Bookmark, Object: bookmark}
	w, err := metadataOnlyWatch(context.Background(), fakeWatcher{w: watch.NewProxyWatcher(events)}, metav1.ListOptions{}, configMapOf)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	e := <-w.ResultChan()
	if cm, ok := e.Object.(*corev1.ConfigMap); !ok || cm.ResourceVersion != "9" || cm.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark %T %+v: want its version and annotation kept", e.Object, e.Object)
	}
}

// fakeWatcher is a metadata.ResourceInterface that only watches, with w.
type fakeWatcher struct {
	metadata.ResourceInterface
	w watch.Interface
}

func (f fakeWatcher) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	return f.w, nil
}
