package portal

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// pageData is what every page template gets; each page fills its own part.
type pageData struct {
	Title   string
	User    string
	CSRF    string
	Message string
	Error   string
	Code    int
	// SSO names the OIDC provider the sign-in page offers; empty offers none.
	SSO string

	Namespaces       []nsView
	CanCreate        bool
	Form             *CreateForm
	CreateNamespaces []string
	Exposures        []string
	Status           *statusView
	Actions          *actionsView
}

// nsView is one namespace on the list page.
type nsView struct {
	Name               string
	CanList, CanCreate bool
	Error              string
	Clusters           []vcView
}

// vcView is one virtual cluster as the pages show it.
type vcView struct {
	Namespace, Name, Path string
	Phase, PhaseClass     string
	Endpoint, Version     string
	Exposure              string
	Nodes                 string
	Shared                bool
	Age                   string
	Summary               string
}

// statusView is the refreshing part of a detail page.
type statusView struct {
	VC          vcView
	Conditions  []condView
	Nodes       []v1alpha1.LentNode
	Pods        string
	Events      []eventView
	EventsError string
	PollMillis  int

	kubeconfigSecret string
}

type condView struct {
	Type, Status, Reason, Message, Age, Class string
}

type eventView struct {
	Type, Reason, Message, Age string
	Count                      int32
}

// actionsView is what the user may do with a virtual cluster, as the host's access reviews
// answered: only what is allowed is offered.
type actionsView struct {
	KubeconfigSecret   string
	CanAdminKubeconfig bool
	CanPersonal        bool
	CanDelete          bool
	PersonalValidity   string
}

func newVCView(vc *v1alpha1.VirtualCluster, now time.Time) vcView {
	v := vcView{
		Namespace: vc.Namespace, Name: vc.Name, Path: vcPath(vc.Namespace, vc.Name),
		Phase: string(vc.Status.Phase), Endpoint: vc.Status.Endpoint, Version: vc.Status.Version,
		Exposure: string(vc.Spec.ControlPlane.Exposure.Type), Shared: vc.Spec.Nodes.Shared,
		Age: age(vc.CreationTimestamp.Time, now),
	}
	if v.Phase == "" {
		v.Phase = string(v1alpha1.PhasePending)
	}
	if vc.DeletionTimestamp != nil {
		v.Phase = string(v1alpha1.PhaseDeleting)
	}
	v.PhaseClass = phaseClass(v1alpha1.VirtualClusterPhase(v.Phase))
	if v.Exposure == "" {
		v.Exposure = string(v1alpha1.ExposureClusterIP)
	}
	var want int32
	for _, p := range vc.Spec.Nodes.Promotions {
		want += p.Count
	}
	var parts []string
	if want > 0 || len(vc.Status.Nodes) > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d lent", len(vc.Status.Nodes), want))
	}
	switch {
	case vc.Spec.Nodes.Shared && vc.Spec.Nodes.SharedOptIn():
		parts = append(parts, "shared (opt-in)")
	case vc.Spec.Nodes.Shared:
		parts = append(parts, "shared")
	}
	v.Nodes = strings.Join(parts, " + ")
	if v.Nodes == "" {
		v.Nodes = "none"
	}
	if c := meta.FindStatusCondition(vc.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status != "True" {
		v.Summary = c.Message
	}
	return v
}

func phaseClass(p v1alpha1.VirtualClusterPhase) string {
	switch p {
	case v1alpha1.PhaseReady:
		return "ok"
	case v1alpha1.PhaseFailed, v1alpha1.PhaseDegraded:
		return "bad"
	case v1alpha1.PhaseDeleting:
		return "gone"
	default:
		return "wait"
	}
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration.HumanDuration(now.Sub(t))
}

// pageTemplate is one page: the layout with the page's content.
type pageTemplate = template.Template

var funcs = template.FuncMap{
	"lower": strings.ToLower,
}

func parsePages() (map[string]*pageTemplate, error) {
	pages := map[string]*pageTemplate{}
	names, err := fs.Glob(assets, "templates/*.html")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		base := strings.TrimPrefix(n, "templates/")
		if base == "layout.html" || base == "status.html" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/status.html", n)
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", n, err)
		}
		pages[base] = t
	}
	return pages, nil
}

func (s *Server) pageData(req *request, title string) pageData {
	return pageData{Title: title, User: req.session.User, CSRF: req.session.CSRF,
		Exposures: []string{string(v1alpha1.ExposureNodePort), string(v1alpha1.ExposureClusterIP), string(v1alpha1.ExposureLoadBalancer)}}
}

func (s *Server) render(w http.ResponseWriter, status int, page string, data pageData) {
	var buf bytes.Buffer
	if err := s.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		s.cfg.Log.Error(err, "Rendering a page", "page", page)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

func (s *Server) renderFragment(w http.ResponseWriter, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages["detail.html"].ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Log.Error(err, "Rendering a fragment", "fragment", name)
		http.Error(w, "The page could not be rendered.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = buf.WriteTo(w)
}

// errorPage explains what went wrong; sess, when known, keeps the header's user and sign-out.
func (s *Server) errorPage(w http.ResponseWriter, r *http.Request, sess *Session, status int, title, msg string) {
	data := pageData{Title: title, Error: msg, Code: status}
	if sess != nil {
		data.User, data.CSRF = sess.User, sess.CSRF
	}
	if r.Header.Get("X-Requested-With") == "fetch" {
		http.Error(w, msg, status)
		return
	}
	s.render(w, status, "error.html", data)
}
