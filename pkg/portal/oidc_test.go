package portal_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/kubenest-io/kubenest/pkg/portal"
)

// TestOIDCSignIn signs in through a real OpenID Provider (zitadel/oidc's op, with its example
// server's storage and sign-in page) whose ID tokens the host's real apiserver accepts as
// users oidc:<subject>: the browser's round trip is played by an HTTP client with cookies.
func TestOIDCSignIn(t *testing.T) {
	idp := httptest.NewUnstartedServer(nil)
	issuer := "https://" + idp.Listener.Addr().String()
	users := storage.NewUserStore(issuer) // test-user@127.0.0.1, password verysecure, subject id1
	idp.Config.Handler = exampleop.SetupServer(issuer, storage.NewStorage(users), slog.New(slog.DiscardHandler), false)
	idp.StartTLS()
	t.Cleanup(idp.Close)
	idpCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: idp.Certificate().Raw})

	authn := filepath.Join(t.TempDir(), "authn.yaml")
	if err := os.WriteFile(authn, fmt.Appendf(nil, `apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer: {url: %s, audiences: [portal], certificateAuthority: %q}
  claimMappings: {username: {claim: sub, prefix: "oidc:"}}
`, issuer, idpCA), 0o600); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(idp.Certificate())
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}, Timeout: 30 * time.Second}
	w := newWorldWith(t, []string{"--authentication-config=" + authn}, func(cfg *portal.Config, url string) {
		storage.RegisterClients(storage.WebClient("portal", "portal-secret", url+"/oidc/callback"))
		cfg.OIDC = &portal.OIDCConfig{IssuerURL: issuer, ClientID: "portal", ClientSecret: "portal-secret",
			RedirectURL: url + "/oidc/callback", DisplayName: "Example SSO", HTTPClient: trusting}
	})

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Transport: trusting.Transport, Timeout: 30 * time.Second}
	get := func(u string) (*http.Response, string) {
		t.Helper()
		resp, err := browser.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}

	_, page := get(w.url + "/login")
	if !strings.Contains(page, `id="sso"`) || !strings.Contains(page, "Sign in with Example SSO") {
		t.Fatalf("the sign-in page offers no single sign-on:\n%s", page)
	}
	// To the provider's sign-in page, which carries its request's id.
	resp, page := get(w.url + "/oidc/login")
	id := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(page)
	if !strings.HasPrefix(resp.Request.URL.String(), issuer) || id == nil {
		t.Fatalf("not at the provider's sign-in page: %s\n%s", resp.Request.URL, page)
	}
	// The password, and back through the provider to the portal, signed in.
	resp, err := browser.PostForm(issuer+"/login/username", url.Values{"id": {id[1]}, "username": {"test-user@127.0.0.1"}, "password": {"verysecure"}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.Request.URL.String() != w.url+"/" || !strings.Contains(string(body), `title="Signed in as oidc:id1"`) {
		t.Fatalf("after the provider: %d at %s\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	// The session acts as that user: the host's RBAC gives oidc:id1 nothing yet.
	if resp, _ := get(w.url + "/ns/team-a/vc/nope"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a page as oidc:id1 without rights: %d, want 403", resp.StatusCode)
	}

	// A callback this browser did not start, or started elsewhere, signs nobody in.
	stranger := &http.Client{Transport: trusting.Transport, Timeout: 30 * time.Second}
	r, err := stranger.Get(w.url + "/oidc/callback?code=stolen&state=forged")
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Errorf("a callback without this browser's sign-in cookie: %d, want 400", r.StatusCode)
	}
	get(w.url + "/oidc/login") // the provider's page again: the browser has a sign-in cookie now
	if resp, page := get(w.url + "/oidc/callback?code=stolen&state=forged"); resp.StatusCode != http.StatusForbidden || !strings.Contains(page, "not started from this browser") {
		t.Errorf("a callback with another state: %d", resp.StatusCode)
	}
	if resp, page := get(w.url + "/oidc/callback?error=access_denied&error_description=user+cancelled"); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(page, "user cancelled") {
		t.Errorf("the provider's refusal: %d", resp.StatusCode)
	}
}
