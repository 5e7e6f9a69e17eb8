//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// The chart's names for the portal as `make up` installs it (release "kubenest").
const (
	portalNamespace = "kubenest-system"
	portalService   = "kubenest-portal"
)

// TestPortal drives the portal in headless Chromium: a tenant bound to one namespace signs in
// with a ServiceAccount token, creates a VirtualCluster through the form, watches it become
// Ready, downloads the admin and a personal kubeconfig and uses both with kubectl, and deletes
// the cluster; another tenant sees neither the cluster nor its downloads, and crafted requests
// for them are refused. Screenshots of the main pages go to _output/e2e/portal.
func TestPortal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	base := portalURL(t, ctx)
	shots := screenshotDir(t)

	nsA := createNamespace(t, ctx, "e2e-portal-a")
	nsB := createNamespace(t, ctx, "e2e-portal-b")
	const vcName = "portal-vc"
	// alice may use nsA, and read the kubeconfig Secret of the cluster she will create there.
	alice := tenantToken(t, ctx, nsA, "alice", vcName+"-kubeconfig")
	// bob may use nsB only.
	bob := tenantToken(t, ctx, nsB, "bob", "")

	a := newChrome(t, ctx)
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(a, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatalf("allowing downloads: %v", err)
	}

	// Sign in.
	run(t, a, "open the sign-in page", chromedp.Navigate(base+"/login"), chromedp.WaitVisible(chromedp.ID("#token")))
	screenshot(t, a, shots, "01-login")
	run(t, a, "sign in as alice",
		chromedp.SetValue(chromedp.ID("#token"), alice),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("#ns-"+nsA)))
	list := value(t, a, "read the list", chromedp.OuterHTML(chromedp.CSS("main")))
	if !strings.Contains(list, "No virtual clusters in "+nsA+" yet") {
		t.Errorf("alice's empty list:\n%s", list)
	}
	screenshot(t, a, shots, "02-list-empty")

	// The form shows the API server's validation messages next to the field.
	run(t, a, "open the create form", chromedp.Navigate(base+"/new?namespace="+nsA), chromedp.WaitVisible(chromedp.ID("#name")))
	run(t, a, "submit a bad name",
		chromedp.SetValue(chromedp.ID("#name"), "Bad_Name"),
		chromedp.SetValue(chromedp.ID("#count"), "101"),
		chromedp.Click(chromedp.ID("#create")),
		chromedp.WaitVisible(chromedp.CSS("#field-name .field-error")))
	nameErr := value(t, a, "read the name's error", chromedp.Text(chromedp.CSS("#field-name .field-error")))
	countErr := value(t, a, "read the count's error", chromedp.Text(chromedp.CSS("#field-count .field-error")))
	if !strings.Contains(nameErr, "metadata.name") || !strings.Contains(countErr, "100") {
		t.Errorf("validation messages: name %q, count %q", nameErr, countErr)
	}
	screenshot(t, a, shots, "03-create-validation")

	// A good one.
	run(t, a, "create "+vcName,
		chromedp.SetValue(chromedp.ID("#name"), vcName),
		chromedp.SetValue(chromedp.ID("#namespace"), nsA),
		chromedp.SetValue(chromedp.ID("#exposure"), string(v1alpha1.ExposureNodePort)),
		chromedp.SetValue(chromedp.ID("#storage"), "ephemeral"),
		chromedp.SetValue(chromedp.ID("#count"), ""),
		chromedp.Click(chromedp.ID("#create")),
		chromedp.WaitVisible(chromedp.ID("#status")))
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: vcName}}
	if err := host.Get(ctx, client.ObjectKeyFromObject(vc), vc); err != nil {
		t.Fatalf("the form did not create %s: %v", vcName, err)
	}
	if vc.Spec.ControlPlane.Exposure.Type != v1alpha1.ExposureNodePort || vc.Spec.Etcd.Storage.Ephemeral == nil {
		t.Errorf("created spec %+v", vc.Spec)
	}
	screenshot(t, a, shots, "04-detail-provisioning")

	// The page refreshes itself until the cluster is Ready: no reload here.
	start := time.Now()
	readyCtx, readyCancel := context.WithTimeout(a, readyBound)
	err := chromedp.Do(readyCtx, chromedp.WaitVisible(chromedp.CSS("#phase.ok")))
	readyCancel()
	if err != nil {
		screenshot(t, a, shots, "04-detail-not-ready")
		t.Fatalf("the detail page did not show Ready within %s: %v", readyBound, err)
	}
	t.Logf("the page showed Ready after %s", time.Since(start).Round(time.Second))
	phase := value(t, a, "read the phase", chromedp.Text(chromedp.ID("phase")))
	endpoint := value(t, a, "read the endpoint", chromedp.Text(chromedp.ID("endpoint")))
	if !strings.Contains(phase, "Ready") || !strings.HasPrefix(endpoint, "https://") {
		t.Errorf("phase %q endpoint %q", phase, endpoint)
	}
	time.Sleep(time.Second) // let the conditions list settle for the picture
	screenshot(t, a, shots, "05-detail-ready")

	// Downloads, used with kubectl.
	admin := download(t, a, dl, "#download-admin", vcName+".kubeconfig")
	if out := kubectl(t, "--kubeconfig", admin, "get", "namespaces", "-o", "name"); !strings.Contains(out, "namespace/kube-system") {
		t.Errorf("kubectl with the admin kubeconfig: %s", out)
	}
	personal := download(t, a, dl, "#download-personal", vcName+"-system_serviceaccount_"+nsA+"_alice.kubeconfig")
	whoami := kubectl(t, "--kubeconfig", personal, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
	if !strings.Contains(whoami, "host:system:serviceaccount:"+nsA+":alice") || !strings.Contains(whoami, "kubenest:portal-users") || strings.Contains(whoami, "system:masters") {
		t.Errorf("the personal kubeconfig's user: %s", whoami)
	}
	if out := kubectl(t, "--kubeconfig", personal, "get", "namespaces", "-o", "name"); !strings.Contains(out, "namespace/kube-system") {
		t.Errorf("kubectl with the personal kubeconfig: %s", out)
	}

	t.Run("single sign-on through the local OIDC provider, then a personal kubeconfig", func(t *testing.T) {
		// The host accepts the provider's ID tokens as users oidc:<subject>; alice of the
		// provider is given nsA as the ServiceAccount alice was.
		user := oidcUser(t, "alice")
		if err := host.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: nsA, Name: "oidc-alice"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubenest:portal-tenant"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user.HostUser}}}); err != nil {
			t.Fatal(err)
		}
		o := newChrome(t, ctx)
		odl := t.TempDir()
		if _, err := chromedp.CallBrowser(o, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
			Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: odl}); err != nil {
			t.Fatalf("allowing downloads: %v", err)
		}
		run(t, o, "go to the provider from the sign-in page",
			chromedp.Navigate(base+"/login"), chromedp.Click(chromedp.ID("#sso")), chromedp.WaitVisible(chromedp.ID("#username")))
		screenshot(t, o, shots, "10-sso-provider")
		run(t, o, "sign in at the provider",
			chromedp.SetValue(chromedp.ID("#username"), user.Username),
			chromedp.SetValue(chromedp.ID("#password"), user.Password),
			chromedp.Click(chromedp.CSS(`button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("#open-namespace")))
		who := value(t, o, "read who is signed in", chromedp.Text(chromedp.CSS(".who")))
		if who != user.HostUser {
			t.Errorf("signed in as %q, want %q", who, user.HostUser)
		}
		run(t, o, "open alice's cluster", chromedp.Navigate(base+"/ns/"+nsA+"/vc/"+vcName), chromedp.WaitVisible(chromedp.ID("#download-personal")))
		screenshot(t, o, shots, "11-sso-detail")
		personal := download(t, o, odl, "#download-personal", vcName+"-oidc_alice.kubeconfig")
		whoami := kubectl(t, "--kubeconfig", personal, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username} {.status.userInfo.groups}")
		if !strings.Contains(whoami, user.HostUser) || !strings.Contains(whoami, "kubenest:portal-users") {
			t.Errorf("the personal kubeconfig of the OIDC user: %s", whoami)
		}
		// A wrong password stays at the provider; nobody is signed in.
		p := newChrome(t, ctx)
		run(t, p, "a wrong password",
			chromedp.Navigate(base+"/login"), chromedp.Click(chromedp.ID("#sso")), chromedp.WaitVisible(chromedp.ID("#username")),
			chromedp.SetValue(chromedp.ID("#username"), user.Username),
			chromedp.SetValue(chromedp.ID("#password"), "not-"+user.Password),
			chromedp.Click(chromedp.CSS(`button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("#username")))
		if loc := value(t, p, "read where the browser is", chromedp.Location()); strings.HasPrefix(loc, base) {
			t.Errorf("a wrong password reached the portal: %s", loc)
		}
	})

	run(t, a, "back to the list", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`tr[data-vc="%s/%s"]`, nsA, vcName))))
	screenshot(t, a, shots, "06-list")

	// bob, in a browser of his own, sees neither the cluster nor its downloads.
	b := newChrome(t, ctx)
	run(t, b, "sign in as bob",
		chromedp.Navigate(base+"/login"),
		chromedp.SetValue(chromedp.ID("#token"), bob),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("#ns-"+nsB)))
	list = value(t, b, "read bob's list", chromedp.OuterHTML(chromedp.CSS("main")))
	if strings.Contains(list, vcName) || strings.Contains(list, nsA) {
		t.Errorf("bob's list shows alice's cluster:\n%s", list)
	}
	screenshot(t, b, shots, "07-list-other-user")
	for _, path := range []string{"", "/kubeconfig"} {
		run(t, b, "open alice's cluster"+path,
			chromedp.Navigate(base+"/ns/"+nsA+"/vc/"+vcName+path),
			chromedp.WaitVisible(chromedp.ID("error-page")))
		page := value(t, b, "read the error page", chromedp.Text(chromedp.ID("error-page")))
		if !strings.Contains(page, "403") || !strings.Contains(page, "may not access") {
			t.Errorf("bob at %s: %s", path, page)
		}
	}
	screenshot(t, b, shots, "08-forbidden")
	// Crafted requests, outside any page: refused.
	hc := signInHTTP(t, base, bob)
	for _, req := range []struct{ method, path string }{
		{"GET", "/ns/" + nsA + "/vc/" + vcName + "/kubeconfig"},
		{"POST", "/ns/" + nsA + "/vc/" + vcName + "/personal-kubeconfig"},
		{"POST", "/ns/" + nsA + "/vc/" + vcName + "/delete"},
	} {
		if code, body := hc.send(t, req.method, req.path, url.Values{"confirm": {vcName}}); code != http.StatusForbidden || strings.Contains(body, "client-certificate") {
			t.Errorf("bob's crafted %s %s: %d", req.method, req.path, code)
		}
	}

	// alice deletes it, confirming by name.
	run(t, a, "open the delete page",
		chromedp.Navigate(base+"/ns/"+nsA+"/vc/"+vcName),
		chromedp.Click(chromedp.ID("#delete")),
		chromedp.WaitVisible(chromedp.ID("#confirm")),
		chromedp.SendKeys(chromedp.ID("#confirm"), vcName))
	screenshot(t, a, shots, "09-delete-confirm")
	run(t, a, "delete",
		chromedp.Click(chromedp.ID("#confirm-delete")),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		err := host.Get(ctx, client.ObjectKeyFromObject(vc), &v1alpha1.VirtualCluster{})
		return client.IgnoreNotFound(err) == nil && err != nil, nil
	})
	if err != nil {
		t.Errorf("%s not deleted: %v", vcName, err)
	}
}

// localOIDCUser is a user of the local cluster's OpenID Connect provider, as "local up" wrote
// it to _output/local/oidc/users.json.
type localOIDCUser struct {
	Username, Password, HostUser string
}

func oidcUser(t *testing.T, name string) localOIDCUser {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "_output", "local", "oidc", "users.json"))
	if err != nil {
		t.Fatalf("the local OIDC provider's users (make up runs it): %v", err)
	}
	var users []localOIDCUser
	if err := json.Unmarshal(data, &users); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		if u.Username == name {
			return u
		}
	}
	t.Fatalf("the local OIDC provider has no user %s", name)
	return localOIDCUser{}
}

// localCASPKI is the base64 SHA-256 of the local CA's public key, as Chromium's
// --ignore-certificate-errors-spki-list takes it; empty when the local cluster runs no OIDC
// provider.
func localCASPKI(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "_output", "local", "oidc", "ca.crt"))
	if err != nil {
		return ""
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("_output/local/oidc/ca.crt holds no PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

// portalURL is the portal's NodePort on the first node's address.
func portalURL(t *testing.T, ctx context.Context) string {
	t.Helper()
	svc := &corev1.Service{}
	if err := host.Get(ctx, client.ObjectKey{Namespace: portalNamespace, Name: portalService}, svc); err != nil {
		t.Fatalf("the portal's Service (make up installs it with portal.enabled=true): %v", err)
	}
	if len(svc.Spec.Ports) == 0 || svc.Spec.Ports[0].NodePort == 0 {
		t.Fatalf("the portal's Service %s has no node port", portalService)
	}
	nodes := &corev1.NodeList{}
	if err := host.List(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if ip := internalIP(&n); ip != "" {
			u := fmt.Sprintf("http://%s:%d", ip, svc.Spec.Ports[0].NodePort)
			waitHTTP(t, ctx, u+"/healthz")
			return u
		}
	}
	t.Fatal("no node address")
	return ""
}

func waitHTTP(t *testing.T, ctx context.Context, u string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get(u)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("the portal does not answer at %s: %v", u, err)
	}
}

// tenantToken makes a ServiceAccount bound to the chart's kubenest:portal-tenant role in its
// namespace (and allowed to read one Secret there, when secret is set) and returns a token.
func tenantToken(t *testing.T, ctx context.Context, ns, name, secret string) string {
	t.Helper()
	create := func(o client.Object) {
		if err := host.Create(ctx, o); err != nil {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
	create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}}
	create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-portal-tenant"},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "kubenest:portal-tenant"}, Subjects: subject})
	if secret != "" {
		create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"}}}})
		create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-kubeconfig"},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name + "-kubeconfig"}, Subjects: subject})
	}
	exp := int64(3600)
	tr, err := hostCS.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// newChrome starts Debian's Chromium, headless, with a profile of its own, until the test ends.
func newChrome(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium: install Debian's package (apt-get install -y chromium; make host-deps does): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	}
	// The local OIDC provider's certificate is the local CA's, which Chromium does not know:
	// trust that one key (its server sends the CA with its certificate), nothing more.
	if spki := localCASPKI(t); spki != "" {
		opts = append(opts, chromedp.Flag("ignore-certificate-errors-spki-list", spki))
	}
	// Chromium now and then exits at start on a loaded machine (the full e2e run): try again.
	for attempt := 1; attempt <= 3; attempt++ {
		alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		bctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
		if err = chromedp.Do(bctx); err == nil {
			t.Cleanup(func() { cancel(); cancelAlloc() })
			return bctx
		}
		cancel()
		cancelAlloc()
		t.Logf("starting chromium (attempt %d of 3): %v", attempt, err)
		time.Sleep(2 * time.Second)
	}
	t.Fatalf("starting chromium: %v", err)
	return nil
}

// run runs browser actions, bounded, and fails the test with what it was doing.
func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	value(t, ctx, what, chromedp.Steps(actions...))
}

// value runs one browser action, bounded, and returns its value.
func value[T any](t *testing.T, ctx context.Context, what string, action chromedp.Action[T]) T {
	t.Helper()
	step, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(step, action)
	if err != nil {
		loc, _ := chromedp.Run(ctx, chromedp.Location())
		screenshot(t, ctx, screenshotDir(t), "failed")
		t.Fatalf("browser: %s: %v (at %s; see failed.png)", what, err, loc)
	}
	return v
}

func screenshotDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "_output", "e2e", "portal")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func screenshot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	t.Logf("screenshot %s", path)
}

// download clicks what starts a download and waits for the file.
func download(t *testing.T, ctx context.Context, dir, selector, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	run(t, ctx, "click "+selector, chromedp.Click(chromedp.CSS(selector)))
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, err := os.Stat(path)
		return err == nil && st.Size() > 0, nil
	})
	if err != nil {
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("download %s did not arrive (the directory has %v): %v", name, names, err)
	}
	return path
}

// httpSession is a signed-in session outside the browser, for requests no page makes.
type httpSession struct {
	base string
	hc   *http.Client
	csrf string
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func signInHTTP(t *testing.T, base, token string) *httpSession {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	s := &httpSession{base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	_, body := s.send(t, "GET", "/login", nil)
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the sign-in page")
	}
	s.csrf = m[1]
	code, body := s.send(t, "POST", "/login", url.Values{"token": {token}})
	m = csrfField.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("sign-in over HTTP: %d", code)
	}
	s.csrf = m[1]
	return s
}

func (s *httpSession) send(t *testing.T, method, path string, form url.Values) (int, string) {
	t.Helper()
	var body io.Reader
	if method == "POST" {
		if form == nil {
			form = url.Values{}
		}
		form.Set("csrf", s.csrf)
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if method == "POST" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
