package virtualcluster_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/controller/virtualcluster"
)

func TestSANDomains(t *testing.T) {
	domains, err := virtualcluster.ParseSANDomains(" {name}.{namespace}.tenants.example.com , shared.example.com")
	if err != nil {
		t.Fatal(err)
	}
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "team"}}
	for _, c := range []struct {
		sans    []string
		outside string
	}{
		{[]string{"a.team.tenants.example.com", "api.a.team.tenants.example.com", "*.a.team.tenants.example.com", "10.0.0.1", "fd00::1"}, ""},
		{[]string{"x.shared.example.com"}, ""},
		{[]string{"api.a.team.tenants.example.com", "b.team.tenants.example.com"}, "b.team.tenants.example.com"}, // another tenant's
		{[]string{"com"}, "com"},
		{[]string{"*.example.com"}, "*.example.com"},
		{[]string{"xa.team.tenants.example.com"}, "xa.team.tenants.example.com"}, // a suffix, not a subdomain
	} {
		if got := domains.Outside(vc, c.sans); got != c.outside {
			t.Errorf("Outside(%v) = %q, want %q", c.sans, got, c.outside)
		}
	}
	if got := (virtualcluster.SANDomains{}).Outside(vc, []string{"10.0.0.1", "api.example.com"}); got != "api.example.com" {
		t.Errorf("no domains: Outside = %q, want the DNS name refused and the address allowed", got)
	}
	for _, bad := range []string{"com", "*.example.com", "Example.com", "a..b"} {
		if _, err := virtualcluster.ParseSANDomains(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseSANDomains(%q): %v, want an error naming it", bad, err)
		}
	}
}

func TestParseIssuerAllowList(t *testing.T) {
	l, err := virtualcluster.ParseIssuerAllowList(" ClusterIssuer/tenants-ca, ,Issuer/*,Vault.example.com/v ")
	if err != nil {
		t.Fatal(err)
	}
	if got := l.String(); got != "ClusterIssuer/tenants-ca,Issuer/*,Vault.example.com/v" {
		t.Errorf("ParseIssuerAllowList = %s", got)
	}
	for _, bad := range []string{"tenants-ca", "Certificate/x", "ClusterIssuer/"} {
		if _, err := virtualcluster.ParseIssuerAllowList(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseIssuerAllowList(%q): %v, want an error naming it", bad, err)
		}
	}
}
