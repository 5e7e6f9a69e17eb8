// Package portal is KubeNest's tenant self-service web portal. People sign in with a bearer
// token the host cluster accepts (checked with a TokenReview); the portal then keeps only who
// they are, sealed in a cookie, and does everything as them through impersonation, so the
// host's RBAC alone decides what each person may see and do. The pages are rendered on the
// server (html/template); a little JavaScript refreshes a provisioning cluster's status.
package portal

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

//go:embed templates static
var assets embed.FS

// Cookie names. The session cookie carries the sealed Session; the login cookie carries the
// CSRF token of the sign-in form, before there is a session.
const (
	cookieName      = "kubenest_session"
	loginCookieName = "kubenest_login"
	csrfField       = "csrf"
)

// Config is what a portal needs.
type Config struct {
	// Host reaches the host cluster as the portal itself, which may only review tokens and
	// impersonate.
	Host *rest.Config
	// SessionKey seals session cookies; at least 32 bytes. Replicas must share it.
	SessionKey []byte
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// PersonalValidity is how long a personal kubeconfig works; zero means
	// DefaultPersonalValidity.
	PersonalValidity time.Duration
	// SignerUser is the identity the portal impersonates to read a tenant's CA Secret when a
	// user may mint a personal kubeconfig; empty turns personal kubeconfigs off.
	SignerUser string
	// SecureCookies marks cookies Secure: set it whenever browsers reach the portal over TLS,
	// also through a proxy that terminates TLS.
	SecureCookies bool
	// Namespaces are offered to every user besides the ones the portal finds for them.
	Namespaces []string
	// PollInterval is how often a detail page refreshes while the cluster is not Ready.
	PollInterval time.Duration
	// OIDC, when set, offers sign-in with an OpenID Connect provider besides pasting a token.
	OIDC *OIDCConfig
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Log receives what the portal does; never tokens or cookies.
	Log logr.Logger
}

// Server is the portal's HTTP handler.
type Server struct {
	cfg    Config
	sealer *Sealer
	self   kubernetes.Interface
	signer *clients
	oidc   *oidcLogin
	pages  map[string]*pageTemplate
	mux    *http.ServeMux
}

// New checks cfg and returns the portal.
func New(cfg Config) (*Server, error) {
	if cfg.Host == nil {
		return nil, errors.New("portal: no host cluster configuration")
	}
	if cfg.SessionTTL <= 0 {
		return nil, fmt.Errorf("portal: session lifetime %s must be positive", cfg.SessionTTL)
	}
	if cfg.PersonalValidity < 0 {
		return nil, fmt.Errorf("portal: personal kubeconfig validity %s must not be negative", cfg.PersonalValidity)
	}
	if cfg.PersonalValidity == 0 {
		cfg.PersonalValidity = DefaultPersonalValidity
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 2 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log.GetSink() == nil {
		cfg.Log = klog.Background()
	}
	sealer, err := NewSealer(cfg.SessionKey)
	if err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	self, err := kubernetes.NewForConfig(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("portal: host client: %w", err)
	}
	s := &Server{cfg: cfg, sealer: sealer, self: self}
	if cfg.OIDC != nil {
		if err := cfg.OIDC.validate(); err != nil {
			return nil, fmt.Errorf("portal: %w", err)
		}
		s.oidc = &oidcLogin{cfg: *cfg.OIDC}
	}
	if cfg.SignerUser != "" {
		if s.signer, err = newClients(cfg.Host, rest.ImpersonationConfig{UserName: cfg.SignerUser}); err != nil {
			return nil, fmt.Errorf("portal: %w", err)
		}
	}
	if s.pages, err = parsePages(); err != nil {
		return nil, fmt.Errorf("portal: %w", err)
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("POST /login", s.login)
	if s.oidc != nil {
		mux.HandleFunc("GET "+oidcLoginPath, s.oidcStart)
		mux.HandleFunc("GET "+oidcCallbackPath, s.oidcCallback)
	}
	mux.HandleFunc("POST /logout", s.user(s.logout))
	mux.HandleFunc("GET /{$}", s.user(s.list))
	mux.HandleFunc("POST /namespaces", s.user(s.openNamespace))
	mux.HandleFunc("GET /new", s.user(s.newPage))
	mux.HandleFunc("POST /new", s.user(s.create))
	mux.HandleFunc("GET /ns/{ns}/vc/{name}", s.user(s.detail))
	mux.HandleFunc("GET /ns/{ns}/vc/{name}/status", s.user(s.statusFragment))
	mux.HandleFunc("GET /ns/{ns}/vc/{name}/kubeconfig", s.user(s.adminKubeconfig))
	mux.HandleFunc("POST /ns/{ns}/vc/{name}/personal-kubeconfig", s.user(s.personalKubeconfig))
	mux.HandleFunc(apiPersonalKubeconfigPath, s.apiPersonalKubeconfig)
	mux.HandleFunc("GET /ns/{ns}/vc/{name}/delete", s.user(s.deletePage))
	mux.HandleFunc("POST /ns/{ns}/vc/{name}/delete", s.user(s.delete))
	s.mux = mux
}

// ServeHTTP serves the portal with security headers on every answer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: with no-referrer browsers send "Origin: null" on form
	// posts, which sameOrigin refuses.
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if r.Method == http.MethodPost && !sameOrigin(r) {
		s.cfg.Log.Info("Refused a cross-site form post", "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		s.errorPage(w, r, nil, http.StatusForbidden, "Request refused", "This form was sent from another site.")
		return
	}
	s.mux.ServeHTTP(w, r)
}

// sameOrigin is false for a request whose Origin header names another site. Browsers send it
// on every POST; requests without it (other clients) are left to the CSRF token.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// request is one signed-in request: the session and clients acting as its user.
type request struct {
	session Session
	as      *clients
	log     logr.Logger
}

// user wraps a handler that needs a signed-in user: it opens the session cookie, checks the
// CSRF token of a POST, and builds clients that impersonate the user.
func (s *Server) user(h func(http.ResponseWriter, *http.Request, *request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		log := s.cfg.Log.WithValues("method", r.Method, "path", r.URL.Path)
		c, err := r.Cookie(cookieName)
		if err != nil {
			s.toLogin(w, r, "")
			return
		}
		sess, err := s.sealer.Open(c.Value, s.cfg.Now())
		switch {
		case errors.Is(err, ErrSessionExpired):
			log.V(1).Info("Session expired", "user", sess.User)
			s.clearCookie(w, cookieName)
			s.toLogin(w, r, "Your session expired. Sign in again.")
			return
		case err != nil:
			log.Info("Refused a session cookie that was changed or sealed with another key")
			s.clearCookie(w, cookieName)
			s.toLogin(w, r, "Your session is not valid any more. Sign in again.")
			return
		}
		log = log.WithValues("user", sess.User)
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				s.errorPage(w, r, &sess, http.StatusBadRequest, "Bad request", "The form could not be read.")
				return
			}
			if !sameToken(r.PostForm.Get(csrfField), sess.CSRF) {
				log.Info("Refused a form without this session's CSRF token")
				s.errorPage(w, r, &sess, http.StatusForbidden, "Request refused",
					"The form was missing its security token or it did not match your session. Reload the page and try again.")
				return
			}
		}
		as, err := newClients(s.cfg.Host, impersonation(sess))
		if err != nil {
			log.Error(err, "Building clients")
			s.errorPage(w, r, &sess, http.StatusInternalServerError, "Portal error", "The portal could not reach the cluster.")
			return
		}
		h(w, r, &request{session: sess, as: as, log: log})
	}
}

// toLogin sends a browser to the sign-in page, and a script (the status refresher) a 401.
func (s *Server) toLogin(w http.ResponseWriter, r *http.Request, msg string) {
	if r.Header.Get("X-Requested-With") == "fetch" || r.Method != http.MethodGet {
		if r.Method != http.MethodGet {
			s.errorPage(w, r, nil, http.StatusUnauthorized, "Signed out", nonEmpty(msg, "Sign in first."))
			return
		}
		http.Error(w, "signed out", http.StatusUnauthorized)
		return
	}
	target := "/login"
	if msg != "" {
		target += "?m=" + url.QueryEscape(msg)
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (s *Server) setCookie(w http.ResponseWriter, name, value string, expires time.Time) {
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/", Expires: expires, MaxAge: max(int(expires.Sub(s.cfg.Now()).Seconds()), 1),
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode,
	})
}

func (s *Server) clearCookie(w http.ResponseWriter, name string) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.cfg.SecureCookies, SameSite: http.SameSiteLaxMode})
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.renderLogin(w, r, http.StatusOK, r.URL.Query().Get("m"), "")
}

func (s *Server) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg, errMsg string) {
	token, err := randomToken()
	if err != nil {
		s.errorPage(w, r, nil, http.StatusInternalServerError, "Portal error", "No randomness.")
		return
	}
	s.setCookie(w, loginCookieName, token, s.cfg.Now().Add(time.Hour))
	data := pageData{Title: "Sign in", CSRF: token, Message: msg, Error: errMsg}
	if s.oidc != nil {
		data.SSO = nonEmpty(s.oidc.cfg.DisplayName, "single sign-on")
	}
	s.render(w, status, "login.html", data)
}

// login checks a bearer token with a TokenReview and starts a session for whoever it names.
// The token itself is neither kept nor logged.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.WithValues("method", r.Method, "path", r.URL.Path)
	if err := r.ParseForm(); err != nil {
		s.renderLogin(w, r, http.StatusBadRequest, "", "The form could not be read.")
		return
	}
	c, err := r.Cookie(loginCookieName)
	if err != nil || !sameToken(r.PostForm.Get(csrfField), c.Value) {
		log.Info("Refused a sign-in without the form's CSRF token")
		s.renderLogin(w, r, http.StatusForbidden, "", "The sign-in form expired or was not sent from this page. Try again.")
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	token = strings.TrimPrefix(token, "Bearer ")
	if token == "" {
		s.renderLogin(w, r, http.StatusBadRequest, "", "Paste a token to sign in.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	info, ok, err := reviewToken(ctx, s.self, token)
	if err != nil {
		log.Error(err, "TokenReview failed")
		s.renderLogin(w, r, http.StatusBadGateway, "", "The portal could not ask the cluster about the token. Try again later.")
		return
	}
	if !ok || info.Username == "" {
		log.Info("Refused a token the cluster did not accept")
		s.renderLogin(w, r, http.StatusUnauthorized, "", "The cluster did not accept this token. It may have expired; create a new one.")
		return
	}
	s.signIn(w, r, info, time.Time{}, log.WithValues("with", "token"))
}

// signIn starts a session for whoever the host's TokenReview named, until the session TTL or
// notAfter (when not zero), whichever is first, and goes to the list.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request, info authenticationv1.UserInfo, notAfter time.Time, log logr.Logger) {
	csrf, err := randomToken()
	if err != nil {
		s.renderLogin(w, r, http.StatusInternalServerError, "", "No randomness.")
		return
	}
	sess := identity(info)
	sess.Expires, sess.CSRF = s.cfg.Now().Add(s.cfg.SessionTTL), csrf
	if !notAfter.IsZero() && notAfter.Before(sess.Expires) {
		sess.Expires = notAfter
	}
	if !s.startSession(w, r, sess, log) {
		return
	}
	s.clearCookie(w, loginCookieName)
	log.Info("Signed in", "user", sess.User, "groups", sess.Groups, "expires", sess.Expires)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request, sess Session, log logr.Logger) bool {
	value, err := s.sealer.Seal(sess)
	if err != nil {
		log.Error(err, "Sealing the session", "user", sess.User)
		s.renderLogin(w, r, http.StatusInternalServerError, "", "The portal could not start a session: "+err.Error())
		return false
	}
	s.setCookie(w, cookieName, value, sess.Expires)
	return true
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request, req *request) {
	s.clearCookie(w, cookieName)
	req.log.Info("Signed out")
	http.Redirect(w, r, "/login?m="+url.QueryEscape("You signed out."), http.StatusSeeOther)
}

// openNamespace remembers a namespace the user named, so the list asks about it too. The
// namespace is only a place to look: what the user may do there is the host's to say.
func (s *Server) openNamespace(w http.ResponseWriter, r *http.Request, req *request) {
	ns := strings.TrimSpace(r.PostForm.Get("namespace"))
	if msgs := validNamespace(ns); len(msgs) > 0 {
		s.errorPage(w, r, &req.session, http.StatusBadRequest, "Not a namespace", fmt.Sprintf("namespace %q: %s", ns, strings.Join(msgs, "; ")))
		return
	}
	sess := req.session
	if !slices.Contains(sess.Namespaces, ns) {
		sess.Namespaces = append([]string{ns}, sess.Namespaces...)
		if len(sess.Namespaces) > 10 {
			sess.Namespaces = sess.Namespaces[:10]
		}
	}
	if !s.startSession(w, r, sess, req.log) {
		return
	}
	http.Redirect(w, r, "/#ns-"+url.PathEscape(ns), http.StatusSeeOther)
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
