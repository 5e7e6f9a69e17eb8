package portal

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// apiPersonalKubeconfigPath is where programs (kubectl nest kubeconfig --personal) ask for a
// personal kubeconfig, with the user's bearer token in the Authorization header instead of a
// session cookie. A token is not sent by a browser on its own, so the request needs no CSRF
// token.
const apiPersonalKubeconfigPath = "POST /api/v1/namespaces/{ns}/virtualclusters/{name}/personal-kubeconfig"

// apiPersonalKubeconfig serves apiPersonalKubeconfigPath: the same check and the same
// certificate as the detail page's button. The answer is the kubeconfig, or a one-line reason
// as text/plain.
func (s *Server) apiPersonalKubeconfig(w http.ResponseWriter, r *http.Request) {
	log := s.cfg.Log.WithValues("method", r.Method, "path", r.URL.Path)
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "This takes a bearer token the host cluster accepts (a ServiceAccount token or an OIDC ID token) in the Authorization header.", http.StatusUnauthorized)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	info, ok, err := reviewToken(ctx, s.self, strings.TrimSpace(token))
	if err != nil {
		log.Error(err, "TokenReview failed")
		http.Error(w, "The portal could not ask the cluster about the token. Try again later.", http.StatusBadGateway)
		return
	}
	if !ok || info.Username == "" {
		log.Info("Refused a token the cluster did not accept")
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "The host cluster did not accept this token. It may have expired.", http.StatusUnauthorized)
		return
	}
	sess := identity(info)
	as, err := newClients(s.cfg.Host, impersonation(sess))
	if err != nil {
		log.Error(err, "Building clients")
		http.Error(w, "The portal could not reach the cluster.", http.StatusInternalServerError)
		return
	}
	req := &request{session: sess, as: as, log: log.WithValues("user", sess.User)}
	kc, fail := s.mintPersonal(ctx, req, r.PathValue("ns"), r.PathValue("name"))
	if fail != nil {
		http.Error(w, fmt.Sprintf("%s: %s", fail.title, fail.msg), fail.status)
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(kc)
}
