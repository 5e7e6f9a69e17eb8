package virtualcluster

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
)

func TestSettingsFor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		allow     bool
		value     *string
		want      time.Duration
		wantError string
	}{
		{name: "no annotation", allow: true, want: 0},
		{name: "honoured when allowed", allow: true, value: strPtr("2m"), want: 2 * time.Minute},
		{name: "ignored unless allowed", allow: false, value: strPtr("2m"), want: 0},
		{name: "too short", allow: true, value: strPtr("30s"), wantError: "at least 1m"},
		{name: "not a duration", allow: true, value: strPtr("soon"), wantError: v1alpha1.AnnotationTestLeafValidity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reconciler{Settings: controlplane.DefaultSettings(), AllowTestAnnotations: tc.allow}
			vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
			if tc.value != nil {
				vc.Annotations[v1alpha1.AnnotationTestLeafValidity] = *tc.value
			}
			s, err := r.settingsFor(vc)
			if (err == nil) != (tc.wantError == "") || (err != nil && !strings.Contains(err.Error(), tc.wantError)) {
				t.Fatalf("err %v, want %q", err, tc.wantError)
			}
			if s.LeafValidity != tc.want {
				t.Errorf("leaf validity %s, want %s", s.LeafValidity, tc.want)
			}
		})
	}
}

func strPtr(s string) *string { return &s }
