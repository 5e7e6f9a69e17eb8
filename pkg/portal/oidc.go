package portal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCConfig signs people in with an OpenID Connect provider: the authorization code flow with
// PKCE. The ID token it returns is then used exactly as a pasted token: the host reviews it
// (TokenReview), so the host's apiserver must accept that issuer's tokens for ClientID (its
// --authentication-config or --oidc-* flags), and the host's RBAC decides what the person may
// do. The portal keeps no user of its own.
type OIDCConfig struct {
	// IssuerURL is the provider, as in its discovery document and the ID tokens' iss.
	IssuerURL string
	// ClientID is the portal's client at the provider, and the audience the host accepts.
	ClientID string
	// ClientSecret is the client's secret; empty for a public client (PKCE alone).
	ClientSecret string
	// RedirectURL is where the provider sends people back: the portal's /oidc/callback as
	// browsers reach it, registered with the provider.
	RedirectURL string
	// Scopes are asked for besides openid.
	Scopes []string
	// DisplayName names the provider on the sign-in button.
	DisplayName string
	// HTTPClient reaches the provider (for a private CA); nil uses http.DefaultClient.
	HTTPClient *http.Client
}

// Paths and cookie of the sign-in with OIDC.
const (
	oidcLoginPath    = "/oidc/login"
	oidcCallbackPath = "/oidc/callback"
	oidcCookieName   = "kubenest_oidc"
	// oidcLoginTTL is how long a person may take at the provider's sign-in page.
	oidcLoginTTL = 10 * time.Minute
)

func (c *OIDCConfig) validate() error {
	if c.IssuerURL == "" || c.ClientID == "" || c.RedirectURL == "" {
		return errors.New("OIDC sign-in needs an issuer URL, a client ID and a redirect URL")
	}
	for name, raw := range map[string]string{"issuer URL": c.IssuerURL, "redirect URL": c.RedirectURL} {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("OIDC %s %q is not an http(s) URL", name, raw)
		}
	}
	if u, _ := url.Parse(c.RedirectURL); u.Path != oidcCallbackPath {
		return fmt.Errorf("OIDC redirect URL %q must end in the path %s", c.RedirectURL, oidcCallbackPath)
	}
	return nil
}

// oidcLogin is the portal's side of the flow. The provider's discovery document is read on the
// first sign-in and kept: a provider that is down at the portal's start does not stop it.
type oidcLogin struct {
	cfg OIDCConfig

	mu       sync.Mutex
	provider *oidc.Provider
}

// oidcState is what the portal remembers, sealed in a cookie, between sending a person to the
// provider and their coming back.
type oidcState struct {
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Expires  time.Time `json:"e"`
}

func (o *oidcLogin) context(ctx context.Context) context.Context {
	if o.cfg.HTTPClient != nil {
		return oidc.ClientContext(ctx, o.cfg.HTTPClient)
	}
	return ctx
}

// discover returns the provider, reading its discovery document the first time.
func (o *oidcLogin) discover(ctx context.Context) (*oidc.Provider, *oauth2.Config, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider == nil {
		p, err := oidc.NewProvider(o.context(ctx), o.cfg.IssuerURL)
		if err != nil {
			return nil, nil, err
		}
		o.provider = p
	}
	return o.provider, &oauth2.Config{
		ClientID: o.cfg.ClientID, ClientSecret: o.cfg.ClientSecret, RedirectURL: o.cfg.RedirectURL,
		Endpoint: o.provider.Endpoint(), Scopes: append([]string{oidc.ScopeOpenID}, o.cfg.Scopes...),
	}, nil
}

// oidcStart sends the browser to the provider, with a state, a nonce and a PKCE challenge whose
// values it keeps in a sealed cookie.
func (s *Server) oidcStart(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.WithValues("method", r.Method, "path", r.URL.Path)
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	_, conf, err := s.oidc.discover(ctx)
	if err != nil {
		log.Error(err, "Reading the OIDC provider's discovery document", "issuer", s.oidc.cfg.IssuerURL)
		s.renderLogin(w, r, http.StatusBadGateway, "", "The identity provider cannot be reached right now. Try again later, or sign in with a token.")
		return
	}
	st := oidcState{Verifier: oauth2.GenerateVerifier(), Expires: s.cfg.Now().Add(oidcLoginTTL)}
	if st.State, err = randomToken(); err == nil {
		st.Nonce, err = randomToken()
	}
	if err != nil {
		s.renderLogin(w, r, http.StatusInternalServerError, "", "No randomness.")
		return
	}
	value, err := s.sealer.seal(st, oidcCookieName)
	if err != nil {
		s.renderLogin(w, r, http.StatusInternalServerError, "", err.Error())
		return
	}
	s.setCookie(w, oidcCookieName, value, st.Expires)
	http.Redirect(w, r, conf.AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)), http.StatusSeeOther)
}

// oidcCallback finishes the flow: the code for tokens (with the PKCE verifier), the ID token
// verified (signature, issuer, audience, expiry, nonce), then reviewed by the host like a
// pasted token. Neither token is kept.
func (s *Server) oidcCallback(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.WithValues("method", r.Method, "path", r.URL.Path)
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		log.Info("The OIDC provider refused a sign-in", "error", e, "description", q.Get("error_description"))
		s.renderLogin(w, r, http.StatusUnauthorized, "", "The identity provider did not sign you in ("+nonEmpty(q.Get("error_description"), e)+").")
		return
	}
	var st oidcState
	c, err := r.Cookie(oidcCookieName)
	if err == nil {
		err = s.sealer.open(c.Value, oidcCookieName, &st)
	}
	s.clearCookie(w, oidcCookieName)
	if err != nil || !s.cfg.Now().Before(st.Expires) {
		s.renderLogin(w, r, http.StatusBadRequest, "", "The sign-in took too long, or was started in another browser. Try again.")
		return
	}
	if !sameToken(q.Get("state"), st.State) {
		log.Info("Refused an OIDC callback whose state is not this browser's")
		s.renderLogin(w, r, http.StatusForbidden, "", "The sign-in was not started from this browser. Try again.")
		return
	}
	ctx, cancel := context.WithTimeout(s.oidc.context(r.Context()), 30*time.Second)
	defer cancel()
	provider, conf, err := s.oidc.discover(ctx)
	if err != nil {
		log.Error(err, "Reading the OIDC provider's discovery document", "issuer", s.oidc.cfg.IssuerURL)
		s.renderLogin(w, r, http.StatusBadGateway, "", "The identity provider cannot be reached right now. Try again later.")
		return
	}
	tok, err := conf.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		log.Error(err, "Exchanging the OIDC authorization code")
		s.renderLogin(w, r, http.StatusBadGateway, "", "The identity provider did not give the portal your tokens. Try again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idToken, err := provider.Verifier(&oidc.Config{ClientID: s.oidc.cfg.ClientID}).Verify(ctx, raw)
	if err == nil && !sameToken(idToken.Nonce, st.Nonce) {
		err = errors.New("the ID token's nonce is not the one this sign-in sent")
	}
	if err != nil {
		log.Info("Refused an ID token", "problem", err.Error())
		s.renderLogin(w, r, http.StatusUnauthorized, "", "The identity provider's answer could not be verified. Try again.")
		return
	}
	info, ok, err := reviewToken(ctx, s.self, raw)
	if err != nil {
		log.Error(err, "TokenReview failed")
		s.renderLogin(w, r, http.StatusBadGateway, "", "The portal could not ask the cluster about your sign-in. Try again later.")
		return
	}
	if !ok || info.Username == "" {
		log.Info("The host does not accept the OIDC provider's ID token", "issuer", s.oidc.cfg.IssuerURL, "subject", idToken.Subject)
		s.renderLogin(w, r, http.StatusUnauthorized, "",
			"The identity provider signed you in, but the host cluster does not accept its tokens: ask the platform team to let its apiserver trust this issuer for the portal's client ID.")
		return
	}
	// The host would refuse the ID token after its expiry: so does the session.
	s.signIn(w, r, info, idToken.Expiry, log.WithValues("with", "oidc"))
}
