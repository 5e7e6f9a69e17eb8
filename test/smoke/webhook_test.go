package smoke

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/kubenest-io/kubenest/internal/testtenant"
)

// checkWebhookByEndpoints checks that the apiserver calls a webhook Service at its endpoints,
// not at its ClusterIP: a tenant whose nodes are all lent has no copy of its Services in the
// host, so a ClusterIP of its range leads nowhere from its apiserver's pod (webhooks, CRD
// conversion and aggregated APIs share the resolver). Here no ClusterIP leads anywhere either:
// the webhook, served by this test, is reached only by its endpoint's address.
func checkWebhookByEndpoints(ctx context.Context, t *testing.T, client kubernetes.Interface) {
	t.Helper()
	const ns, svc, denial = "default", "smoke-hook", "denied by the smoke test's webhook"
	addr := testtenant.HostIP() // EndpointSlices refuse loopback addresses
	if addr == "" {
		t.Fatal("this machine has no IPv4 address but loopback and link-local ones: the webhook check needs one")
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(svc+"."+ns+".svc", nil, []string{svc + "." + ns + ".svc"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		review := &admissionv1.AdmissionReview{}
		if err := json.NewDecoder(r.Body).Decode(review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: false,
			Result: &metav1.Status{Message: denial}}
		review.Request = nil
		_ = json.NewEncoder(w).Encode(review)
	})}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	port := int32(l.Addr().(*net.TCPAddr).Port)
	if _, err := client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(port)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"smoke-webhook": "deny"}}
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "deny.smoke.kubenest.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Path: ptr.To("/deny")}, CABundle: certPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			ObjectSelector:          selector,
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			TimeoutSeconds:          ptr.To[int32](5),
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The apiserver loads the configuration from its informer: until then creates pass.
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "hooked-", Labels: selector.MatchLabels}}, metav1.CreateOptions{})
		if ctx.Err() == nil {
			last = err // not the poll's own end
		}
		return err != nil && strings.Contains(err.Error(), denial), nil
	})
	if err != nil {
		t.Errorf("a webhook whose Service leads to %s:%d did not answer the apiserver: the last create: %v", addr, port, last)
	}
}
