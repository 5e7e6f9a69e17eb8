package virtualcluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestQuotaUsedUp(t *testing.T) {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "team"}, Status: corev1.ResourceQuotaStatus{
		Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("4"), corev1.ResourceRequestsStorage: resource.MustParse("10Gi")},
		Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("4"), corev1.ResourceRequestsStorage: resource.MustParse("1Gi")},
	}}
	if got := quotaUsedUp(q, "tenants"); !strings.Contains(got, "used up pods of its ResourceQuota team (4 of 4") {
		t.Errorf("quotaUsedUp = %q", got)
	}
	q.Status.Used[corev1.ResourcePods] = resource.MustParse("3")
	if got := quotaUsedUp(q, "tenants"); got != "" {
		t.Errorf("quotaUsedUp with room left = %q, want none", got)
	}
}
