package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/emicklei/go-restful/v3"
	"github.com/google/uuid"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/apiserver/pkg/server/routes"
	"k8s.io/klog/v2"
	"k8s.io/kube-openapi/pkg/builder"
	"k8s.io/kube-openapi/pkg/cached"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/common/restfuladapter"
	"k8s.io/kube-openapi/pkg/handler"
	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// The kube-apiserver's OpenAPI documents, built when they are first asked for. Upstream
// builds the v2 document and every group-version's v3 document when the server starts, and
// keeps them: in an idle tenant's apiserver that was about a third of its live heap and half
// a CPU-second of its start, for documents that a tenant asks for rarely (kubectl asks for the
// v3 document of the group-versions it applies or explains) or never (v2). The documents are
// upstream's, built by upstream's code from the same routes; only when differs.
//
// Both are installed on the server's mux before PrepareRun: the aggregator in front of the
// server reads the v3 index (/openapi/v3) at start-up and its merged /openapi/v2 asks this
// server for its document on the aggregator's own first request.

// installLazyOpenAPIV2 serves /openapi/v2 of s from a document built from s's routes on the
// first request, as upstream's routes.OpenAPI.InstallV2 builds it at start-up.
func installLazyOpenAPIV2(s *genericapiserver.GenericAPIServer, config *common.Config) {
	etag := uuid.NewString() // the routes never change once the server runs
	build := cached.Func(func() (*spec.Swagger, string, error) {
		doc, err := builder.BuildOpenAPISpecFromRoutes(restfuladapter.AdaptWebServices(s.Handler.GoRestfulContainer.RegisteredWebServices()), config)
		if err != nil {
			return nil, "", fmt.Errorf("building the OpenAPI v2 document: %w", err)
		}
		doc.Definitions = handler.PruneDefaults(doc.Definitions)
		klog.InfoS("Built the OpenAPI v2 document on its first request", "definitions", len(doc.Definitions))
		return doc, etag, nil
	})
	handler.NewOpenAPIServiceLazy(cached.Once(build)).RegisterOpenAPIVersionedService("/openapi/v2", s.Handler.NonGoRestfulMux)
}

// lazyOpenAPIV3 serves /openapi/v3 of a server: the index lists each group-version (a root
// path of the server's routes, as upstream groups them) under a hash chosen when the server
// starts, which stands for the document as long as the process runs (its routes never
// change); a group-version's document is built on its first request by upstream's
// routes.OpenAPI.InstallV3 over that group-version's routes alone, and served by the
// handler3.OpenAPIService that returns, with upstream's content negotiation (JSON, protobuf).
type lazyOpenAPIV3 struct {
	etag   string
	config *common.OpenAPIV3Config
	// groups gives, by group-version, what builds (once) the service of its document, and
	// the index; both made on the first request, when every route is installed.
	groups func() (map[string]func() *handler3.OpenAPIService, []byte)
}

func installLazyOpenAPIV3(s *genericapiserver.GenericAPIServer, config *common.OpenAPIV3Config) {
	l := &lazyOpenAPIV3{etag: strings.ReplaceAll(uuid.NewString(), "-", ""), config: config}
	l.groups = sync.OnceValues(func() (map[string]func() *handler3.OpenAPIService, []byte) {
		groups := map[string]func() *handler3.OpenAPIService{}
		index := handler3.OpenAPIV3Discovery{Paths: map[string]handler3.OpenAPIV3DiscoveryGroupVersion{}}
		for _, ws := range s.Handler.GoRestfulContainer.RegisteredWebServices() {
			gv := strings.TrimPrefix(ws.RootPath(), "/")
			groups[gv] = sync.OnceValue(func() *handler3.OpenAPIService { return l.build(gv, ws) })
			index.Paths[gv] = handler3.OpenAPIV3DiscoveryGroupVersion{ServerRelativeURL: l.url(gv)}
		}
		j, err := json.Marshal(index)
		if err != nil {
			panic(err) // a map of strings always marshals
		}
		return groups, j
	})
	s.Handler.NonGoRestfulMux.Handle("/openapi/v3", http.HandlerFunc(l.serveIndex))
	s.Handler.NonGoRestfulMux.HandlePrefix("/openapi/v3/", http.HandlerFunc(l.serveGroupVersion))
}

func (l *lazyOpenAPIV3) url(gv string) string {
	return (&url.URL{Path: "/openapi/v3/" + gv, RawQuery: url.Values{"hash": {l.etag}}.Encode()}).String()
}

func (l *lazyOpenAPIV3) serveIndex(w http.ResponseWriter, r *http.Request) {
	_, index := l.groups()
	w.Header().Set("Etag", `"`+l.etag+`"`)
	w.Header().Set("Content-Type", "application/json")
	http.ServeContent(w, r, "/openapi/v3", time.Time{}, bytes.NewReader(index))
}

// serveGroupVersion answers as upstream's handler3 does: a request with the current hash may
// be cached for good, one with an old hash is sent to the current one.
func (l *lazyOpenAPIV3) serveGroupVersion(w http.ResponseWriter, r *http.Request) {
	groups, _ := l.groups()
	gv := strings.TrimPrefix(r.URL.Path, "/openapi/v3/")
	build, ok := groups[gv]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if hash := r.URL.Query().Get("hash"); hash != "" {
		if hash != l.etag {
			http.Redirect(w, r, l.url(gv), http.StatusMovedPermanently)
			return
		}
		w.Header().Set("Cache-Control", "public, immutable")
		w.Header().Set("Expires", time.Now().AddDate(1, 0, 0).Format(time.RFC1123))
		r = r.Clone(r.Context())
		r.URL.RawQuery = "" // the hash is this server's, not the built document's
	}
	build().HandleGroupVersion(w, r)
}

// build builds the document of one group-version, as upstream does for all of them at start.
func (l *lazyOpenAPIV3) build(gv string, ws *restful.WebService) *handler3.OpenAPIService {
	start := time.Now()
	svc := routes.OpenAPI{V3Config: l.config}.InstallV3(restful.NewContainer().Add(ws), mux.NewPathRecorderMux("openapi-v3"))
	klog.InfoS("Built an OpenAPI v3 document on its first request", "groupVersion", gv, "took", time.Since(start).Round(time.Millisecond))
	return svc
}
