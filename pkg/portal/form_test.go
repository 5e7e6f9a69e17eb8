package portal

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

func TestParseCreateForm(t *testing.T) {
	f, vc := ParseCreateForm(url.Values{"name": {" team-a "}, "namespace": {"ns"}, "exposure": {"NodePort"},
		"storage": {"ephemeral"}, "count": {"2"}, "selector": {"disktype=ssd,zone in (a,b)"}, "shared": {"on"}})
	if f.HasErrors() {
		t.Fatalf("errors %v", f.Errors)
	}
	s := vc.Spec
	if vc.Name != "team-a" || vc.Namespace != "ns" || s.ControlPlane.Exposure.Type != v1alpha1.ExposureNodePort ||
		s.Etcd.Storage.Ephemeral == nil || !s.Nodes.Shared || len(s.Nodes.Promotions) != 1 {
		t.Fatalf("%+v", vc)
	}
	p := s.Nodes.Promotions[0]
	if p.Name != promotionName || p.Count != 2 || p.Selector.MatchLabels["disktype"] != "ssd" || len(p.Selector.MatchExpressions) != 1 {
		t.Errorf("promotion %+v", p)
	}

	// The shared nodes on request only: OptIn; without the shared nodes, said at the box.
	f, vc = ParseCreateForm(url.Values{"name": {"x"}, "namespace": {"ns"}, "shared": {"on"}, "sharedoptin": {"on"}})
	if f.HasErrors() || !vc.Spec.Nodes.SharedOptIn() {
		t.Errorf("opt-in: %v %+v", f.Errors, vc.Spec.Nodes)
	}
	if f, _ = ParseCreateForm(url.Values{"name": {"x"}, "namespace": {"ns"}, "sharedoptin": {"on"}}); len(f.Errors[fieldOptIn]) == 0 {
		t.Errorf("opt-in without the shared nodes: %v", f.Errors)
	}

	// Defaults: nothing asked, nothing set; the API server fills in its defaults.
	f, vc = ParseCreateForm(url.Values{"name": {"x"}, "namespace": {"ns"}})
	if f.HasErrors() || vc.Spec.Nodes.Promotions != nil || vc.Spec.Etcd.Storage.Ephemeral != nil || vc.Spec.ControlPlane.Exposure.Type != "" {
		t.Errorf("defaults: %v %+v", f.Errors, vc.Spec)
	}

	// What cannot be sent at all is caught here, by field.
	f, _ = ParseCreateForm(url.Values{"name": {"x"}, "count": {"two"}, "selector": {"a in (b"}, "storage": {"disk"}})
	for _, field := range []string{fieldNamespace, fieldCount, fieldSelector, fieldStorage} {
		if len(f.Errors[field]) == 0 {
			t.Errorf("no error for %s: %v", field, f.Errors)
		}
	}
}

func TestAddAPIError(t *testing.T) {
	gk := schema.GroupKind{Group: "kubenest.io", Kind: "VirtualCluster"}
	invalid := apierrors.NewInvalid(gk, "x", field.ErrorList{
		field.Invalid(field.NewPath("metadata", "name"), "X", "a lowercase RFC 1123 subdomain must ..."),
		field.Invalid(field.NewPath("spec", "nodes", "promotions").Index(0).Child("count"), 101, "should be less than or equal to 100"),
		field.NotSupported(field.NewPath("spec", "controlPlane", "exposure", "type"), "Magic", []string{"ClusterIP", "NodePort"}),
		field.Invalid(field.NewPath("spec", "etcd"), "object", "etcd.storage.ephemeral needs etcd.replicas 1"),
		field.Invalid(nil, "object", "metadata.name must be at most 40 characters"),
		field.Invalid(field.NewPath("spec", "mystery"), "x", "something else"),
	})
	var f CreateForm
	f.AddAPIError(invalid)
	for field, want := range map[string]string{
		fieldName:     "at most 40 characters",
		fieldCount:    "less than or equal to 100",
		fieldExposure: "supported values",
		fieldStorage:  "ephemeral needs",
		"":            "spec.mystery",
	} {
		if !strings.Contains(strings.Join(f.Errors[field], "|"), want) {
			t.Errorf("%q: %v, want %q", field, f.Errors[field], want)
		}
	}
	if n := len(f.Errors[fieldName]); n != 2 {
		t.Errorf("name errors %v", f.Errors[fieldName])
	}

	for err, field := range map[error]string{
		apierrors.NewAlreadyExists(schema.GroupResource{Group: "kubenest.io", Resource: "virtualclusters"}, "x"):               fieldName,
		apierrors.NewForbidden(schema.GroupResource{Group: "kubenest.io", Resource: "virtualclusters"}, "x", errors.New("no")): fieldNamespace,
		errors.New("connection refused"): "",
	} {
		var f CreateForm
		f.AddAPIError(err)
		if len(f.Errors[field]) != 1 {
			t.Errorf("%v: errors %v, want one at %q", err, f.Errors, field)
		}
	}
}

func TestFieldOfCause(t *testing.T) {
	for _, tc := range []struct {
		cause metav1.StatusCause
		want  string
	}{
		{metav1.StatusCause{Field: "metadata.name"}, fieldName},
		{metav1.StatusCause{Field: "spec.nodes.promotions[0].selector.matchExpressions[0].operator"}, fieldSelector},
		{metav1.StatusCause{Field: "spec.nodes.promotions[0].name"}, fieldCount},
		{metav1.StatusCause{Field: "spec.nodes.shared"}, fieldShared},
		{metav1.StatusCause{Field: "spec.controlPlane.replicas"}, ""},
		{metav1.StatusCause{Message: "Invalid value: \"object\": metadata.name must be a DNS label"}, fieldName},
		{metav1.StatusCause{Field: "<nil>", Message: "nothing to see"}, ""},
	} {
		if got := FieldOfCause(tc.cause); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.cause, got, tc.want)
		}
	}
}
