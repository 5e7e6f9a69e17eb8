package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"

	"github.com/kubenest-io/kubenest/pkg/pki"
)

// The local cluster's OpenID Connect provider ("local oidc"), for the portal's single sign-on:
// zitadel/oidc's OpenID Provider (its op package, with the in-memory storage and sign-in page
// of its example server), at https://172.30.0.1:9443, its certificate signed by the local CA.
// The host's apiserver accepts its ID tokens for the portal's client (audience
// kubenest-portal) as users "oidc:<subject>". Test-only: its users, with random passwords, and
// the portal's client secret are written under _output/local/oidc at "up".

// OIDC facts the Makefile and the e2e tests share.
const (
	oidcPort     = "9443"
	oidcProcess  = "oidc"
	oidcClientID = "kubenest-portal"
	// oidcUserPrefix is put before the subject of an ID token to make the host's user name.
	oidcUserPrefix = "oidc:"
)

func oidcIssuer() string { return "https://" + net.JoinHostPort(bridgeIP, oidcPort) }

// oidcDir holds what people and tests need: the users (users.json, with their passwords), the
// portal's client secret (client-secret) and the CA of the provider's certificate (ca.crt).
func (c config) oidcDir() string { return filepath.Join(c.outDir, "local", "oidc") }

// oidcUser is a user of the local provider, as written to users.json for the e2e tests.
type oidcUser struct {
	Username string `json:"username"`
	Password string `json:"password"`
	// HostUser is the user name the host gives the person.
	HostUser string `json:"hostUser"`
}

// oidcSetup issues the provider's serving certificate, makes its users and the portal's
// client secret, and writes the apiserver's authentication configuration that trusts it.
func (c config) oidcSetup() error {
	dir := c.oidcDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	certPEM, err := os.ReadFile(filepath.Join(c.pkiDir(), "ca.crt"))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(filepath.Join(c.pkiDir(), "ca.key"))
	if err != nil {
		return err
	}
	ca, err := pki.ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return err
	}
	now := time.Now()
	// Its certificate file carries the CA after it, so that browsers told to trust the CA's
	// key (the e2e's Chromium) see it in the chain.
	serving, err := ca.Issue(pki.CertSpec{CommonName: "local-oidc", IPs: []net.IP{net.ParseIP(bridgeIP)}, Usage: pki.UsageServer}, now)
	if err != nil {
		return err
	}
	key, err := serving.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeFiles(c.pkiDir(), map[string][]byte{"oidc.crt": append(serving.CertPEM(), ca.CertPEM()...), "oidc.key": key}); err != nil {
		return err
	}
	secret, err := randomString()
	if err != nil {
		return err
	}
	users := map[string]*storage.User{}
	var listed []oidcUser
	for _, name := range []string{"alice", "bob"} {
		password, err := randomString()
		if err != nil {
			return err
		}
		users[name] = &storage.User{ID: name, Username: name, Password: password, FirstName: name, Email: name + "@kubenest.local", EmailVerified: true}
		listed = append(listed, oidcUser{Username: name, Password: password, HostUser: oidcUserPrefix + name})
	}
	store, err := json.Marshal(users)
	if err != nil {
		return err
	}
	people, err := json.MarshalIndent(listed, "", "  ")
	if err != nil {
		return err
	}
	authn := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: %s
    audiences: [%s]
    certificateAuthority: %q
  claimMappings:
    username: {claim: sub, prefix: %q}
`, oidcIssuer(), oidcClientID, ca.CertPEM(), oidcUserPrefix)
	if err := writeFiles(c.pkiDir(), map[string][]byte{"oidc-users.json": store, "oidc-authn.yaml": []byte(authn)}); err != nil {
		return err
	}
	return writeFiles(dir, map[string][]byte{"users.json": people, "client-secret": []byte(secret), "ca.crt": ca.CertPEM()})
}

// randomString is 24 random bytes, URL-safe: a password or a client secret.
func randomString() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// startOIDCIfAsked sets up and runs "local oidc" as a supervised process of this machine,
// when --oidc-redirect-uri asks for it.
func (c config) startOIDCIfAsked() error {
	if c.oidcRedirectURI == "" {
		logf("        no --oidc-redirect-uri: none")
		return nil
	}
	if err := c.oidcSetup(); err != nil {
		return err
	}
	bin, err := c.selfCopy()
	if err != nil {
		return err
	}
	return c.startSupervised(oidcProcess, "", bin, "oidc", "--output", c.outDir, "--state-dir", c.stateDir, "--run-dir", c.runDir,
		"--oidc-redirect-uri", c.oidcRedirectURI)
}

func runOIDC(ctx context.Context, c config) error {
	if c.oidcRedirectURI == "" {
		return errors.New("--oidc-redirect-uri is required")
	}
	secret, err := os.ReadFile(filepath.Join(c.oidcDir(), "client-secret"))
	if err != nil {
		return err
	}
	users, err := storage.StoreFromFile(filepath.Join(c.pkiDir(), "oidc-users.json"))
	if err != nil {
		return err
	}
	storage.RegisterClients(storage.WebClient(oidcClientID, string(secret), c.oidcRedirectURI))
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	server := &http.Server{
		Addr:              net.JoinHostPort(bridgeIP, oidcPort),
		Handler:           exampleop.SetupServer(oidcIssuer(), storage.NewStorage(users), log, false),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	logf("OpenID Connect provider at %s, client %s redirecting to %s", oidcIssuer(), oidcClientID, c.oidcRedirectURI)
	err = server.ListenAndServeTLS(filepath.Join(c.pkiDir(), "oidc.crt"), filepath.Join(c.pkiDir(), "oidc.key"))
	if !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving OIDC: %w", err)
	}
	return nil
}
