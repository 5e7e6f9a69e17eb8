// Command nest-portal serves KubeNest's tenant self-service web portal.
package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kubenest-io/kubenest/pkg/portal"
	"github.com/kubenest-io/kubenest/pkg/version"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "nest-portal: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	listen, tlsCert, tlsKey, sessionKeyFile, signerUser, kubeconfig, namespaces string
	oidcIssuer, oidcClientID, oidcSecretFile, oidcRedirect, oidcScopes          string
	oidcName, oidcCAFile                                                        string
	secureCookies, showVersion                                                  bool
	sessionTTL, personalValidity, pollInterval                                  time.Duration
}

func run(args []string) error {
	var o options
	fs := flag.NewFlagSet("nest-portal", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `nest-portal serves KubeNest's tenant self-service web portal.

People sign in with a bearer token the host cluster accepts (a ServiceAccount token from
'kubectl create token', or an OIDC ID token), which the portal checks with a TokenReview and
then forgets: the session cookie holds only who they are, sealed with AES-GCM. Everything
they do, the portal does as them through impersonation, so the host's RBAC decides what each
person may list, create, download and delete. The portal's own identity needs only to create
tokenreviews and to impersonate users, groups, service accounts and user extras.

With --oidc-issuer-url, the sign-in page also offers single sign-on: the authorization code
flow with PKCE against that OpenID Connect provider. The ID token it returns is used exactly as
a pasted one (reviewed by the host, then forgotten), so the host's apiserver must accept that
issuer's tokens for --oidc-client-id (its --authentication-config), and the provider must know
--oidc-redirect-url.

A personal kubeconfig (a client certificate for the user, signed by the tenant's CA) is
offered to users the host allows "create" on virtualclusters/kubeconfig (group kubenest.io)
in the namespace; the portal then reads the tenant's CA Secret as --signer-user.

Flags:
`)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen-address", ":8080", "Address the portal serves on (HTTP, or HTTPS with --tls-cert-file).")
	fs.StringVar(&o.tlsCert, "tls-cert-file", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key-file. Cookies are then Secure.")
	fs.StringVar(&o.tlsKey, "tls-key-file", "", "PEM private key of --tls-cert-file.")
	fs.BoolVar(&o.secureCookies, "secure-cookies", false, "Mark cookies Secure although the portal serves HTTP: set it when a proxy in front terminates TLS.")
	fs.StringVar(&o.sessionKeyFile, "session-key-file", "", "File with the secret (at least 32 bytes) that seals session cookies; replicas must share it. Empty generates one at start, so sessions end when the portal restarts.")
	fs.DurationVar(&o.sessionTTL, "session-ttl", time.Hour, "How long a sign-in lasts. The portal does not see a token revoked after sign-in, so keep it short.")
	fs.DurationVar(&o.personalValidity, "personal-kubeconfig-validity", portal.DefaultPersonalValidity, "How long a personal kubeconfig's client certificate is valid.")
	fs.StringVar(&o.signerUser, "signer-user", "", "User the portal impersonates to read a tenant's CA Secret (<vc>-ca) when minting a personal kubeconfig, for example system:serviceaccount:kubenest-system:kubenest-portal-signer. Empty turns personal kubeconfigs off.")
	fs.StringVar(&o.namespaces, "namespaces", "", "Comma-separated namespaces to offer every user besides the ones found for them (all namespaces when the user may list them, a ServiceAccount's own namespace, the ones the user opens by name). Whether a user may use one is still the host's RBAC to say.")
	fs.DurationVar(&o.pollInterval, "poll-interval", 2*time.Second, "How often a detail page refreshes while its cluster provisions (five times slower once Ready).")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig of the host cluster; empty uses the in-cluster configuration (the pod's ServiceAccount).")
	fs.StringVar(&o.oidcIssuer, "oidc-issuer-url", "", "OpenID Connect provider to offer single sign-on with (its issuer URL); empty offers token sign-in only.")
	fs.StringVar(&o.oidcClientID, "oidc-client-id", "", "The portal's client ID at the OIDC provider: the audience the host's apiserver accepts.")
	fs.StringVar(&o.oidcSecretFile, "oidc-client-secret-file", "", "File holding the client's secret; empty for a public client (PKCE alone).")
	fs.StringVar(&o.oidcRedirect, "oidc-redirect-url", "", "The portal's /oidc/callback as browsers reach it, such as https://portal.example.com/oidc/callback; registered with the provider.")
	fs.StringVar(&o.oidcScopes, "oidc-scopes", "email,profile", "Comma-separated scopes to ask for besides openid (the claims the host maps to users and groups must be in the ID token).")
	fs.StringVar(&o.oidcName, "oidc-display-name", "", "The provider's name on the sign-in button (default \"single sign-on\").")
	fs.StringVar(&o.oidcCAFile, "oidc-ca-file", "", "PEM bundle to trust for the provider's TLS certificate, besides the system's.")
	fs.BoolVar(&o.showVersion, "version", false, "Print the version and exit.")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" {
			fs.Var(f.Value, f.Name, f.Usage)
		}
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0))
	}
	if o.showVersion {
		fmt.Println(version.String())
		return nil
	}
	cfg, err := o.portalConfig()
	if err != nil {
		return err
	}
	srv, err := portal.New(cfg)
	if err != nil {
		return err
	}
	return serve(o, srv)
}

// portalConfig checks the flags and turns them into the portal's configuration.
func (o options) portalConfig() (portal.Config, error) {
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return portal.Config{}, errors.New("--tls-cert-file and --tls-key-file go together: set both or neither")
	}
	if o.sessionTTL <= 0 {
		return portal.Config{}, fmt.Errorf("--session-ttl %s: must be positive", o.sessionTTL)
	}
	if o.personalValidity <= 0 {
		return portal.Config{}, fmt.Errorf("--personal-kubeconfig-validity %s: must be positive", o.personalValidity)
	}
	if o.pollInterval < 200*time.Millisecond {
		return portal.Config{}, fmt.Errorf("--poll-interval %s: must be at least 200ms", o.pollInterval)
	}
	var namespaces []string
	for _, ns := range strings.Split(o.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns == "" {
			continue
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return portal.Config{}, fmt.Errorf("--namespaces: %q is not a namespace name: %s", ns, strings.Join(msgs, "; "))
		}
		namespaces = append(namespaces, ns)
	}
	oidc, err := o.oidcConfig()
	if err != nil {
		return portal.Config{}, err
	}
	log := klog.Background().WithName("portal")
	var key []byte
	if o.sessionKeyFile != "" {
		data, err := os.ReadFile(o.sessionKeyFile)
		if err != nil {
			return portal.Config{}, fmt.Errorf("--session-key-file: %w", err)
		}
		key = []byte(strings.TrimSpace(string(data)))
		if len(key) < 32 {
			return portal.Config{}, fmt.Errorf("--session-key-file %s: has %d bytes, needs at least 32", o.sessionKeyFile, len(key))
		}
	} else {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return portal.Config{}, fmt.Errorf("generating a session key: %w", err)
		}
		log.Info("No --session-key-file: sealing sessions with a key generated now; they end when the portal restarts, and replicas do not share them")
	}
	var host *rest.Config
	if o.kubeconfig != "" {
		host, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	} else {
		host, err = rest.InClusterConfig()
	}
	if err != nil {
		return portal.Config{}, fmt.Errorf("host cluster configuration (set --kubeconfig outside a pod): %w", err)
	}
	host.UserAgent = "nest-portal/" + version.Version
	if o.signerUser == "" {
		log.Info("No --signer-user: personal kubeconfigs are off")
	}
	return portal.Config{
		Host: host, SessionKey: key, SessionTTL: o.sessionTTL, PersonalValidity: o.personalValidity,
		SignerUser: o.signerUser, SecureCookies: o.secureCookies || o.tlsCert != "", Namespaces: namespaces,
		PollInterval: o.pollInterval, OIDC: oidc, Log: log,
	}, nil
}

// oidcConfig is the single sign-on the flags ask for, or nil.
func (o options) oidcConfig() (*portal.OIDCConfig, error) {
	if o.oidcIssuer == "" {
		for name, v := range map[string]string{"--oidc-client-id": o.oidcClientID, "--oidc-client-secret-file": o.oidcSecretFile,
			"--oidc-redirect-url": o.oidcRedirect, "--oidc-ca-file": o.oidcCAFile} {
			if v != "" {
				return nil, fmt.Errorf("%s is set but --oidc-issuer-url is not", name)
			}
		}
		return nil, nil
	}
	if o.oidcClientID == "" || o.oidcRedirect == "" {
		return nil, errors.New("--oidc-issuer-url needs --oidc-client-id and --oidc-redirect-url")
	}
	cfg := &portal.OIDCConfig{IssuerURL: o.oidcIssuer, ClientID: o.oidcClientID, RedirectURL: o.oidcRedirect, DisplayName: o.oidcName}
	for _, scope := range strings.Split(o.oidcScopes, ",") {
		if scope = strings.TrimSpace(scope); scope != "" && scope != "openid" {
			cfg.Scopes = append(cfg.Scopes, scope)
		}
	}
	if o.oidcSecretFile != "" {
		data, err := os.ReadFile(o.oidcSecretFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		if cfg.ClientSecret = strings.TrimSpace(string(data)); cfg.ClientSecret == "" {
			return nil, fmt.Errorf("--oidc-client-secret-file %s is empty", o.oidcSecretFile)
		}
	}
	if o.oidcCAFile != "" {
		pem, err := os.ReadFile(o.oidcCAFile)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--oidc-ca-file %s holds no PEM certificate", o.oidcCAFile)
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		cfg.HTTPClient = &http.Client{Transport: transport, Timeout: 30 * time.Second}
	}
	return cfg, nil
}

func serve(o options, h http.Handler) error {
	log := klog.Background().WithName("portal")
	srv := &http.Server{Addr: o.listen, Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		log.Info("Serving the portal", "address", o.listen, "tls", o.tlsCert != "", "version", version.Version)
		if o.tlsCert != "" {
			errc <- srv.ListenAndServeTLS(o.tlsCert, o.tlsKey)
		} else {
			errc <- srv.ListenAndServe()
		}
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("serving on %s: %w", o.listen, err)
	case <-ctx.Done():
	}
	log.Info("Shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}
