package clustertree

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kubenest-io/kubenest/internal/iphold"
)

// The operator holds the range's free addresses again on each pass over the tenant: a pass
// between the release of an address and the create of the Service that takes it makes the
// host refuse the create. createService releases it again and the Service gets its address;
// an address another Service has stays refused.
func TestCreateServiceAfterTheAddressIsHeldAgain(t *testing.T) {
	ctx := context.Background()
	addr := netip.MustParseAddr("10.254.1.2")
	host := fake.NewClientset()
	held := &iphold.Range{Client: host.NetworkingV1().IPAddresses(), CIDR: netip.MustParsePrefix("10.254.1.0/24"), Name: "kubenest-10-254-1-0-24"}
	if err := held.Hold(ctx, addr); err != nil {
		t.Fatal(err)
	}
	// The host's allocator: a Service's ClusterIP is refused while an IPAddress has it. The
	// first two creates meet a hold made again meanwhile.
	passes := 2
	host.PrependReactor("create", "services", func(a clienttesting.Action) (bool, runtime.Object, error) {
		svc := a.(clienttesting.CreateAction).GetObject().(*corev1.Service)
		ipaddresses := networkingv1.SchemeGroupVersion.WithResource("ipaddresses")
		if passes > 0 { // the operator's pass, straight into the store (a reactor runs under the client's lock)
			passes--
			hold := &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: addr.String(),
				Labels: map[string]string{networkingv1.LabelManagedBy: iphold.ManagedBy, iphold.LabelRange: held.Name}}}
			if err := host.Tracker().Create(ipaddresses, hold, ""); err != nil && !apierrors.IsAlreadyExists(err) {
				return true, nil, err
			}
		}
		ip, err := host.Tracker().Get(ipaddresses, "", svc.Spec.ClusterIP)
		if err == nil && ip != nil {
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{
				field.Invalid(field.NewPath("spec", "clusterIPs"), svc.Spec.ClusterIPs, "failed to allocate IP "+svc.Spec.ClusterIP+": provided IP is already allocated")})
		}
		return false, nil, nil
	})
	want := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenants", Name: "kubenest-shared-node-x-kube-system-x-a"},
		Spec: corev1.ServiceSpec{ClusterIP: addr.String(), ClusterIPs: []string{addr.String()}}}
	if _, err := createService(ctx, host, held, want); err != nil {
		t.Fatalf("create after the address was held again twice: %v", err)
	}
	if _, err := host.CoreV1().Services("tenants").Get(ctx, want.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the Service was not created: %v", err)
	}
	if _, err := host.NetworkingV1().IPAddresses().Get(ctx, addr.String(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the hold of %s is still there (%v)", addr, err)
	}

	// An address another Service's IPAddress has is not the range's to release.
	other := netip.MustParseAddr("10.254.1.3")
	if _, err := host.NetworkingV1().IPAddresses().Create(ctx, &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: other.String()}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	taken := want.DeepCopy()
	taken.Name, taken.Spec.ClusterIP, taken.Spec.ClusterIPs = "taken", other.String(), []string{other.String()}
	if _, err := createService(ctx, host, held, taken); !apierrors.IsInvalid(err) {
		t.Errorf("create of a Service whose address another has: %v, want it refused", err)
	}
	if _, err := host.NetworkingV1().IPAddresses().Get(ctx, other.String(), metav1.GetOptions{}); err != nil {
		t.Errorf("the other Service's IPAddress was removed: %v", err)
	}
}
