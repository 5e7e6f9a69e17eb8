package portal

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
	"github.com/kubenest-io/kubenest/pkg/controlplane"
	"github.com/kubenest-io/kubenest/pkg/kubeconfig"
	"github.com/kubenest-io/kubenest/pkg/naming"
)

// list shows the namespaces the user may use and the virtual clusters in them.
func (s *Server) list(w http.ResponseWriter, r *http.Request, req *request) {
	ctx := r.Context()
	access := namespaceAccess(ctx, req.as, candidateNamespaces(ctx, req.as, req.session, s.cfg.Namespaces))
	now := s.cfg.Now()
	var views []nsView
	canCreate := false
	for _, a := range access {
		v := nsView{Name: a.Name, CanList: a.List, CanCreate: a.Create}
		if a.Err != nil {
			req.log.Error(a.Err, "Listing virtual clusters", "namespace", a.Name)
			v.Error = describeError(a.Err)
		}
		for i := range a.VirtualCluster {
			v.Clusters = append(v.Clusters, newVCView(&a.VirtualCluster[i], now))
		}
		canCreate = canCreate || a.Create
		views = append(views, v)
	}
	data := s.pageData(req, "Virtual clusters")
	data.Namespaces, data.CanCreate = views, canCreate
	if d := r.URL.Query().Get("deleted"); d != "" {
		data.Message = fmt.Sprintf("Deleting %s. Its control plane and nodes are being released.", d)
	}
	s.render(w, http.StatusOK, "list.html", data)
}

// newPage shows the create form.
func (s *Server) newPage(w http.ResponseWriter, r *http.Request, req *request) {
	f := CreateForm{Namespace: r.URL.Query().Get("namespace"), Exposure: string(v1alpha1.ExposureNodePort), Storage: storagePersistent}
	s.renderForm(w, r, req, http.StatusOK, f)
}

func (s *Server) renderForm(w http.ResponseWriter, r *http.Request, req *request, status int, f CreateForm) {
	ctx := r.Context()
	var namespaces []string
	for _, a := range namespaceAccess(ctx, req.as, candidateNamespaces(ctx, req.as, req.session, s.cfg.Namespaces)) {
		if a.Create {
			namespaces = append(namespaces, a.Name)
		}
	}
	if f.Namespace == "" && len(namespaces) > 0 {
		f.Namespace = namespaces[0]
	}
	data := s.pageData(req, "New virtual cluster")
	data.Form, data.CreateNamespaces = &f, namespaces
	s.render(w, status, "new.html", data)
}

// create makes a VirtualCluster as the user. What the API server finds wrong goes next to
// the field it is about.
func (s *Server) create(w http.ResponseWriter, r *http.Request, req *request) {
	f, vc := ParseCreateForm(r.PostForm)
	if f.HasErrors() {
		s.renderForm(w, r, req, http.StatusUnprocessableEntity, f)
		return
	}
	created, err := req.as.createVC(r.Context(), vc)
	if err != nil {
		req.log.Info("Create refused", "namespace", vc.Namespace, "name", vc.Name, "reason", apierrors.ReasonForError(err))
		f.AddAPIError(err)
		status := http.StatusUnprocessableEntity
		if apierrors.IsForbidden(err) {
			status = http.StatusForbidden
		}
		s.renderForm(w, r, req, status, f)
		return
	}
	req.log.Info("Created a virtual cluster", "virtualCluster", klogRef(created))
	http.Redirect(w, r, vcPath(created.Namespace, created.Name), http.StatusSeeOther)
}

// detail shows one virtual cluster; its status part refreshes itself.
func (s *Server) detail(w http.ResponseWriter, r *http.Request, req *request) {
	st, ok := s.loadStatus(w, r, req)
	if !ok {
		return
	}
	ctx := r.Context()
	ns, name := st.VC.Namespace, st.VC.Name
	data := s.pageData(req, name)
	data.Status = st
	can := func(attrs authorizationv1.ResourceAttributes) bool {
		ok, err := req.as.allowed(ctx, attrs)
		if err != nil {
			req.log.Error(err, "Access review")
		}
		return ok
	}
	data.Actions = &actionsView{
		KubeconfigSecret:   st.kubeconfigSecret,
		CanAdminKubeconfig: can(authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: ns, Name: st.kubeconfigSecret}),
		CanPersonal:        s.signer != nil && can(vcAttrs("create", ns, name, subresourceKubeconfig)),
		CanDelete:          can(vcAttrs("delete", ns, name, "")),
		PersonalValidity:   s.cfg.PersonalValidity.String(),
	}
	s.render(w, http.StatusOK, "detail.html", data)
}

// statusFragment is the refreshing part of the detail page.
func (s *Server) statusFragment(w http.ResponseWriter, r *http.Request, req *request) {
	st, ok := s.loadStatus(w, r, req)
	if !ok {
		return
	}
	s.renderFragment(w, "status", st)
}

// loadStatus reads a virtual cluster, its events and its pods as the user. It writes the error
// page itself and says so when the cluster cannot be read.
func (s *Server) loadStatus(w http.ResponseWriter, r *http.Request, req *request) (*statusView, bool) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	vc, err := req.as.getVC(ctx, ns, name)
	if err != nil {
		s.apiErrorPage(w, r, req, err, fmt.Sprintf("virtual cluster %s in namespace %s", name, ns))
		return nil, false
	}
	now := s.cfg.Now()
	st := &statusView{VC: newVCView(vc, now), Nodes: vc.Status.Nodes, kubeconfigSecret: naming.For(vc.Name).KubeconfigSecret()}
	if ref := vc.Status.KubeconfigSecretRef; ref != nil {
		st.kubeconfigSecret = ref.Name
	}
	for _, c := range vc.Status.Conditions {
		st.Conditions = append(st.Conditions, condView{Type: c.Type, Status: string(c.Status), Reason: c.Reason,
			Message: c.Message, Age: age(c.LastTransitionTime.Time, now), Class: condClass(c)})
	}
	// The control plane's pods are in KubeNest's own namespace, which tenants do not see into.
	cp := controlplane.Namespace(vc)
	pods, err := req.as.kube.CoreV1().Pods(cp).List(ctx, metav1.ListOptions{LabelSelector: naming.LabelVirtualCluster + "=" + vc.Name})
	if err != nil {
		st.Pods = "in namespace " + cp + ", not visible to you"
	} else {
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		st.Pods = fmt.Sprintf("%d of %d running", running, len(pods.Items))
	}
	events, err := req.as.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=VirtualCluster,involvedObject.name=" + vc.Name})
	if err != nil {
		st.EventsError = "Events are not visible to you."
	} else {
		items := events.Items
		slices.SortFunc(items, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
		for _, e := range items[:min(len(items), 15)] {
			st.Events = append(st.Events, eventView{Type: e.Type, Reason: e.Reason, Message: e.Message,
				Age: age(eventTime(e), now), Count: max(e.Count, 1)})
		}
	}
	st.PollMillis = int(s.cfg.PollInterval.Milliseconds())
	if st.VC.Phase == string(v1alpha1.PhaseReady) {
		st.PollMillis *= 5
	}
	return st, true
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// adminKubeconfig downloads the tenant's admin kubeconfig, read from its Secret as the user:
// only someone the host lets read that Secret gets it.
func (s *Server) adminKubeconfig(w http.ResponseWriter, r *http.Request, req *request) {
	ctx := r.Context()
	ns, name := r.PathValue("ns"), r.PathValue("name")
	vc, err := req.as.getVC(ctx, ns, name)
	if err != nil {
		s.apiErrorPage(w, r, req, err, fmt.Sprintf("virtual cluster %s in namespace %s", name, ns))
		return
	}
	ref := v1alpha1.SecretKeyReference{Name: naming.For(vc.Name).KubeconfigSecret(), Key: controlplane.KeyKubeconfig}
	if vc.Status.KubeconfigSecretRef != nil {
		ref = *vc.Status.KubeconfigSecretRef
	}
	key, server := ref.Key, vc.Status.Endpoint
	if r.URL.Query().Get("endpoint") == "in-cluster" {
		key, server = controlplane.KeyInClusterKubeconfig, controlplane.InClusterEndpoint(vc)
	}
	secret, err := req.as.kube.CoreV1().Secrets(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			req.log.Info("Refused an admin kubeconfig download: the user may not read its Secret", "namespace", ns, "secret", ref.Name)
		}
		s.apiErrorPage(w, r, req, err, fmt.Sprintf("the kubeconfig Secret %s in namespace %s", ref.Name, ns))
		return
	}
	data, ok := secret.Data[key]
	if !ok {
		s.errorPage(w, r, &req.session, http.StatusNotFound, "No kubeconfig yet",
			fmt.Sprintf("The Secret %s has no key %q yet. Wait until the cluster is Ready.", ref.Name, key))
		return
	}
	// The Secret is in the tenant's namespace, where others may write: hand out only what
	// KubeNest would have written, never a command for the downloader's kubectl to run.
	if data, err = kubeconfig.Clean(data, server); err != nil {
		req.log.Info("Refused to hand out a kubeconfig KubeNest did not write", "namespace", ns, "secret", ref.Name, "problem", err.Error())
		s.errorPage(w, r, &req.session, http.StatusConflict, "Kubeconfig changed",
			fmt.Sprintf("The Secret %s was changed by someone other than KubeNest, so the portal does not hand it out: %v. The operator writes it again on its next pass; try again in a minute.", ref.Name, err))
		return
	}
	req.log.Info("Downloaded the admin kubeconfig", "virtualCluster", klogRef(vc))
	download(w, vc.Name+".kubeconfig", data)
}

// personalKubeconfig mints a kubeconfig with a short-lived client certificate for the user.
func (s *Server) personalKubeconfig(w http.ResponseWriter, r *http.Request, req *request) {
	kc, fail := s.mintPersonal(r.Context(), req, r.PathValue("ns"), r.PathValue("name"))
	if fail != nil {
		s.errorPage(w, r, &req.session, fail.status, fail.title, fail.msg)
		return
	}
	download(w, fmt.Sprintf("%s-%s.kubeconfig", r.PathValue("name"), safeFileName(req.session.User)), kc)
}

// refusal is why a request was not served: an HTTP status, a title and a message for the user.
type refusal struct {
	status     int
	title, msg string
}

// mintPersonal mints a personal kubeconfig for the request's user, for the browser and for the
// API alike. Whether they may is the host's to say: a SelfSubjectAccessReview, as the user, for
// create on virtualclusters/kubeconfig. Only after it is allowed does the portal read the
// tenant's CA Secret, as the signer identity, which may do nothing but read Secrets.
func (s *Server) mintPersonal(ctx context.Context, req *request, ns, name string) ([]byte, *refusal) {
	if s.signer == nil {
		return nil, &refusal{http.StatusNotFound, "Personal kubeconfigs are off",
			"This portal was started without a signer identity (--signer-user), so it cannot mint personal kubeconfigs."}
	}
	ok, err := req.as.allowed(ctx, vcAttrs("create", ns, name, subresourceKubeconfig))
	if err != nil {
		req.log.Error(err, "Access review")
		return nil, &refusal{http.StatusBadGateway, "Cluster error", "The portal could not ask the cluster what you may do."}
	}
	if !ok {
		req.log.Info("Refused a personal kubeconfig: not allowed", "namespace", ns, "virtualCluster", name)
		return nil, &refusal{http.StatusForbidden, "Not allowed",
			fmt.Sprintf("You (%s) may not mint a personal kubeconfig for %s in namespace %s. It takes the permission create on virtualclusters/kubeconfig (group kubenest.io) there.", req.session.User, name, ns)}
	}
	vc, err := req.as.getVC(ctx, ns, name)
	if err != nil {
		return nil, apiRefusal(req, err, fmt.Sprintf("virtual cluster %s in namespace %s", name, ns))
	}
	if vc.Status.Endpoint == "" || !meta.IsStatusConditionTrue(vc.Status.Conditions, v1alpha1.ConditionCertificatesReady) {
		return nil, &refusal{http.StatusConflict, "Not ready yet",
			fmt.Sprintf("%s has no endpoint or certificates yet. Try again once it is Ready.", name)}
	}
	caSecret, err := s.signer.kube.CoreV1().Secrets(controlplane.Namespace(vc)).Get(ctx, naming.For(vc.Name).CASecret(), metav1.GetOptions{})
	if err != nil {
		req.log.Error(err, "Reading the tenant's CA Secret as the signer", "namespace", ns, "virtualCluster", name)
		return nil, &refusal{http.StatusBadGateway, "Cannot sign", "The portal could not read the cluster's certificate authority."}
	}
	now := s.cfg.Now()
	authorities, err := controlplane.LoadAuthorities(caSecret.Data, now)
	if err != nil {
		req.log.Error(err, "Loading the tenant's CA", "namespace", ns, "virtualCluster", name)
		return nil, &refusal{http.StatusBadGateway, "Cannot sign", "The cluster's certificate authority is not usable."}
	}
	kc, notAfter, err := PersonalKubeconfig(authorities, PersonalRequest{Cluster: vc.Name, Server: vc.Status.Endpoint,
		User: req.session.User, Validity: s.cfg.PersonalValidity}, now)
	if err != nil {
		req.log.Error(err, "Minting a personal kubeconfig", "namespace", ns, "virtualCluster", name)
		return nil, &refusal{http.StatusInternalServerError, "Cannot sign", err.Error()}
	}
	req.log.Info("Minted a personal kubeconfig", "virtualCluster", klogRef(vc), "tenantUser", TenantUserName(req.session.User), "notAfter", notAfter)
	return kc, nil
}

func (s *Server) deletePage(w http.ResponseWriter, r *http.Request, req *request) {
	s.renderDelete(w, r, req, http.StatusOK, "")
}

func (s *Server) renderDelete(w http.ResponseWriter, r *http.Request, req *request, status int, errMsg string) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	vc, err := req.as.getVC(r.Context(), ns, name)
	if err != nil {
		s.apiErrorPage(w, r, req, err, fmt.Sprintf("virtual cluster %s in namespace %s", name, ns))
		return
	}
	data := s.pageData(req, "Delete "+name)
	data.Status = &statusView{VC: newVCView(vc, s.cfg.Now())}
	data.Error = errMsg
	s.render(w, status, "delete.html", data)
}

// delete deletes a virtual cluster as the user, once they typed its name.
func (s *Server) delete(w http.ResponseWriter, r *http.Request, req *request) {
	ns, name := r.PathValue("ns"), r.PathValue("name")
	if r.PostForm.Get("confirm") != name {
		s.renderDelete(w, r, req, http.StatusBadRequest, fmt.Sprintf("Type %s to confirm.", name))
		return
	}
	if err := req.as.deleteVC(r.Context(), ns, name); err != nil {
		req.log.Info("Delete refused", "namespace", ns, "name", name, "reason", apierrors.ReasonForError(err))
		s.apiErrorPage(w, r, req, err, fmt.Sprintf("virtual cluster %s in namespace %s", name, ns))
		return
	}
	req.log.Info("Deleted a virtual cluster", "namespace", ns, "name", name)
	http.Redirect(w, r, "/?deleted="+url.QueryEscape(ns+"/"+name), http.StatusSeeOther)
}

// apiErrorPage explains an error of the host API about what.
func (s *Server) apiErrorPage(w http.ResponseWriter, r *http.Request, req *request, err error, what string) {
	fail := apiRefusal(req, err, what)
	s.errorPage(w, r, &req.session, fail.status, fail.title, fail.msg)
}

// apiRefusal says why a host API request made as the user failed, in the user's terms.
func apiRefusal(req *request, err error, what string) *refusal {
	switch {
	case apierrors.IsForbidden(err):
		return &refusal{http.StatusForbidden, "Not allowed",
			fmt.Sprintf("You (%s) may not access %s. Ask whoever manages the namespace for access.", req.session.User, what)}
	case apierrors.IsNotFound(err):
		return &refusal{http.StatusNotFound, "Not found", fmt.Sprintf("There is no %s.", what)}
	default:
		req.log.Error(err, "Host API request failed", "about", what)
		return &refusal{http.StatusBadGateway, "Cluster error", fmt.Sprintf("Reading %s failed: %s", what, describeError(err))}
	}
}

func describeError(err error) string {
	if apierrors.IsForbidden(err) {
		return "not allowed"
	}
	return err.Error()
}

func download(w http.ResponseWriter, name string, data []byte) {
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", safeFileName(name)))
	_, _ = w.Write(data)
}

func vcPath(ns, name string) string {
	return "/ns/" + url.PathEscape(ns) + "/vc/" + url.PathEscape(name)
}

func validNamespace(ns string) []string {
	if ns == "" {
		return []string{"empty"}
	}
	return validation.IsDNS1123Label(ns)
}

func klogRef(vc *v1alpha1.VirtualCluster) string { return vc.Namespace + "/" + vc.Name }

func condClass(c metav1.Condition) string {
	switch {
	case c.Status == metav1.ConditionTrue:
		return "ok"
	case c.Status == metav1.ConditionFalse && strings.Contains(strings.ToLower(c.Reason), "invalid"):
		return "bad"
	default:
		return "wait"
	}
}
