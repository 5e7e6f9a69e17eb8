package portal

import (
	"context"
	"fmt"
	"strings"
	"sync"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// resourceVirtualClusters and subresourceKubeconfig name the permission to mint a personal
// kubeconfig: verb create on virtualclusters/kubeconfig in group kubenest.io. No such
// subresource is served; RBAC rules may name it all the same, and the portal asks for it with a
// SelfSubjectAccessReview as the user.
const (
	resourceVirtualClusters = "virtualclusters"
	subresourceKubeconfig   = "kubeconfig"
)

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// clients reach the host API as one identity.
type clients struct {
	kube kubernetes.Interface
	vcs  rest.Interface
}

func newClients(base *rest.Config, imp rest.ImpersonationConfig) (*clients, error) {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = imp
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("host client: %w", err)
	}
	vcCfg := rest.CopyConfig(cfg)
	vcCfg.GroupVersion = &v1alpha1.GroupVersion
	vcCfg.APIPath = "/apis"
	vcCfg.ContentType, vcCfg.AcceptContentTypes = "application/json", "application/json"
	vcCfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	vcs, err := rest.RESTClientFor(vcCfg)
	if err != nil {
		return nil, fmt.Errorf("VirtualCluster client: %w", err)
	}
	return &clients{kube: kube, vcs: vcs}, nil
}

// impersonation of a signed-in user: their name, groups and extra attributes as the host's
// TokenReview reported them.
func impersonation(s Session) rest.ImpersonationConfig {
	return rest.ImpersonationConfig{UserName: s.User, Groups: s.Groups, Extra: s.Extra}
}

func (c *clients) getVC(ctx context.Context, ns, name string) (*v1alpha1.VirtualCluster, error) {
	vc := &v1alpha1.VirtualCluster{}
	err := c.vcs.Get().Namespace(ns).Resource(resourceVirtualClusters).Name(name).Do(ctx).Into(vc)
	return vc, err
}

func (c *clients) listVCs(ctx context.Context, ns string) ([]v1alpha1.VirtualCluster, error) {
	list := &v1alpha1.VirtualClusterList{}
	err := c.vcs.Get().Namespace(ns).Resource(resourceVirtualClusters).Do(ctx).Into(list)
	return list.Items, err
}

func (c *clients) createVC(ctx context.Context, vc *v1alpha1.VirtualCluster) (*v1alpha1.VirtualCluster, error) {
	out := &v1alpha1.VirtualCluster{}
	err := c.vcs.Post().Namespace(vc.Namespace).Resource(resourceVirtualClusters).Body(vc).Do(ctx).Into(out)
	return out, err
}

func (c *clients) deleteVC(ctx context.Context, ns, name string) error {
	return c.vcs.Delete().Namespace(ns).Resource(resourceVirtualClusters).Name(name).Do(ctx).Error()
}

// allowed asks the API server whether the identity may do verb on the resource.
func (c *clients) allowed(ctx context.Context, attrs authorizationv1.ResourceAttributes) (bool, error) {
	r, err := c.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("asking whether %s %s/%s is allowed: %w", attrs.Verb, attrs.Resource, attrs.Subresource, err)
	}
	return r.Status.Allowed, nil
}

func vcAttrs(verb, ns, name, subresource string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: verb, Group: v1alpha1.GroupVersion.Group,
		Resource: resourceVirtualClusters, Subresource: subresource, Namespace: ns, Name: name}
}

// reviewToken asks the host who a bearer token belongs to.
func reviewToken(ctx context.Context, kube kubernetes.Interface, token string) (authenticationv1.UserInfo, bool, error) {
	r, err := kube.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, false, fmt.Errorf("reviewing the token: %w", err)
	}
	return r.Status.User, r.Status.Authenticated, nil
}

// identity is the part of a session that says who a token named: what the portal impersonates.
func identity(info authenticationv1.UserInfo) Session {
	sess := Session{User: info.Username, Groups: info.Groups}
	if len(info.Extra) > 0 {
		sess.Extra = map[string][]string{}
		for k, v := range info.Extra {
			sess.Extra[k] = v
		}
	}
	return sess
}

// nsAccess is what a user may do with virtual clusters in one namespace.
type nsAccess struct {
	Name           string
	List, Create   bool
	VirtualCluster []v1alpha1.VirtualCluster
	Err            error
}

// candidateNamespaces are the namespaces worth asking about for a user: all of them when the
// user may list namespaces, else the namespace of a ServiceAccount user, the portal's
// configured ones and those the user opened by name.
func candidateNamespaces(ctx context.Context, c *clients, s Session, configured []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(ns string) {
		if ns != "" && !seen[ns] && len(out) < maxCandidateNamespaces {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	if ns, _, err := serviceaccount.SplitUsername(s.User); err == nil {
		add(ns)
	}
	for _, ns := range configured {
		add(ns)
	}
	for _, ns := range s.Namespaces {
		add(ns)
	}
	if ok, err := c.allowed(ctx, authorizationv1.ResourceAttributes{Verb: "list", Resource: "namespaces"}); err == nil && ok {
		if list, err := c.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
			for _, n := range list.Items {
				if n.Status.Phase != corev1.NamespaceTerminating {
					add(n.Name)
				}
			}
		}
	}
	return out
}

// maxCandidateNamespaces bounds the access reviews one page load makes.
const maxCandidateNamespaces = 100

// namespaceAccess asks, for each candidate namespace, whether the user may list and create
// virtual clusters there, and lists them where they may. Namespaces where they may do neither
// are left out.
func namespaceAccess(ctx context.Context, c *clients, candidates []string) []nsAccess {
	out := make([]nsAccess, len(candidates))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, ns := range candidates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			a := nsAccess{Name: ns}
			a.List, a.Err = c.allowed(ctx, vcAttrs("list", ns, "", ""))
			if a.Err == nil {
				a.Create, a.Err = c.allowed(ctx, vcAttrs("create", ns, "", ""))
			}
			if a.Err == nil && a.List {
				a.VirtualCluster, a.Err = c.listVCs(ctx, ns)
			}
			out[i] = a
		}()
	}
	wg.Wait()
	kept := out[:0]
	for _, a := range out {
		if a.List || a.Create || a.Err != nil {
			kept = append(kept, a)
		}
	}
	return kept
}

// safeFileName turns a name into something fit for a download's file name.
func safeFileName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '.', r == '_':
			return r
		}
		return '_'
	}, s)
}
