package portal

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kubenest-io/kubenest/api/v1alpha1"
)

// Fields of the create form.
const (
	fieldName      = "name"
	fieldNamespace = "namespace"
	fieldExposure  = "exposure"
	fieldStorage   = "storage"
	fieldCount     = "count"
	fieldSelector  = "selector"
	fieldShared    = "shared"
	fieldOptIn     = "sharedoptin"
)

// Storage choices of the create form.
const (
	storagePersistent = "persistent"
	storageEphemeral  = "ephemeral"
)

// promotionName is the name of the one promotion request the form makes.
const promotionName = "workers"

// CreateForm is the create form as the user filled it in, and what is wrong with it, by field
// ("" for what belongs to no field).
type CreateForm struct {
	Name, Namespace, Exposure, Storage, Count, Selector string
	Shared, SharedOptIn                                 bool
	Errors                                              map[string][]string
}

// ParseCreateForm reads the create form. Only what cannot be sent to the API server at all (a
// count that is not a number, a selector that does not parse) is checked here; everything else
// is the API server's to judge, so the form shows exactly its rules.
func ParseCreateForm(v url.Values) (CreateForm, *v1alpha1.VirtualCluster) {
	f := CreateForm{
		Name:        strings.TrimSpace(v.Get(fieldName)),
		Namespace:   strings.TrimSpace(v.Get(fieldNamespace)),
		Exposure:    v.Get(fieldExposure),
		Storage:     v.Get(fieldStorage),
		Count:       strings.TrimSpace(v.Get(fieldCount)),
		Selector:    strings.TrimSpace(v.Get(fieldSelector)),
		Shared:      checked(v, fieldShared),
		SharedOptIn: checked(v, fieldOptIn),
	}
	vc := &v1alpha1.VirtualCluster{ObjectMeta: metav1.ObjectMeta{Name: f.Name, Namespace: f.Namespace}}
	if f.Namespace == "" {
		f.addError(fieldNamespace, "Choose a namespace.")
	}
	if f.Exposure != "" {
		vc.Spec.ControlPlane.Exposure.Type = v1alpha1.ExposureType(f.Exposure)
	}
	switch f.Storage {
	case "", storagePersistent:
	case storageEphemeral:
		vc.Spec.Etcd.Storage.Ephemeral = &v1alpha1.EphemeralStorage{}
	default:
		f.addError(fieldStorage, fmt.Sprintf("Unknown storage %q: choose persistent or ephemeral.", f.Storage))
	}
	count := 0
	if f.Count != "" {
		n, err := strconv.Atoi(f.Count)
		if err != nil {
			f.addError(fieldCount, fmt.Sprintf("%q is not a whole number.", f.Count))
		}
		count = n
	}
	var selector *metav1.LabelSelector
	if f.Selector != "" {
		s, err := metav1.ParseToLabelSelector(f.Selector)
		if err != nil {
			f.addError(fieldSelector, fmt.Sprintf("Not a label selector (for example disktype=ssd,zone in (a,b)): %v", err))
		} else {
			selector = s
		}
	}
	if count != 0 || selector != nil {
		p := v1alpha1.NodePromotion{Name: promotionName, Count: int32(min(max(count, -1<<31), 1<<31-1))}
		if selector != nil {
			p.Selector = *selector
		}
		vc.Spec.Nodes.Promotions = []v1alpha1.NodePromotion{p}
	}
	vc.Spec.Nodes.Shared = f.Shared
	if f.SharedOptIn {
		if !f.Shared {
			f.addError(fieldOptIn, "Opt-in is about the shared nodes: tick Shared nodes too, or leave it.")
		}
		vc.Spec.Nodes.SharedPlacement = v1alpha1.SharedPlacementOptIn
	}
	return f, vc
}

// checked says whether the form's checkbox name was ticked.
func checked(v url.Values, name string) bool { return v.Get(name) == "on" || v.Get(name) == "true" }

func (f *CreateForm) addError(field, msg string) {
	if f.Errors == nil {
		f.Errors = map[string][]string{}
	}
	f.Errors[field] = append(f.Errors[field], msg)
}

// HasErrors says whether anything is wrong with the form.
func (f *CreateForm) HasErrors() bool { return len(f.Errors) > 0 }

// AddAPIError puts what the API server said about a create where the user will see it: each
// cause of an Invalid error next to its field, a conflict at the name, a refusal at the
// namespace, anything else at the top.
func (f *CreateForm) AddAPIError(err error) {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsAlreadyExists(err):
		f.addError(fieldName, fmt.Sprintf("A virtual cluster named %q already exists in %s.", f.Name, f.Namespace))
		return
	case apierrors.IsForbidden(err):
		f.addError(fieldNamespace, fmt.Sprintf("You may not create virtual clusters in namespace %q.", f.Namespace))
		return
	case apierrors.IsInvalid(err):
		if ok := asStatus(err, &status); ok && status.Status().Details != nil && len(status.Status().Details.Causes) > 0 {
			for _, c := range status.Status().Details.Causes {
				f.addError(FieldOfCause(c), causeMessage(c))
			}
			return
		}
	}
	f.addError("", err.Error())
}

func asStatus(err error, out *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	if ok {
		*out = s
	}
	return ok
}

// FieldOfCause maps the field of an API server validation cause to the form field it is about,
// "" when it is about none. Rules written on the whole object have no field but name it in
// their message ("Invalid value: metadata.name must be ...").
func FieldOfCause(c metav1.StatusCause) string {
	path, inMessage := c.Field, false
	if path == "" || path == "<nil>" {
		path, inMessage = c.Message, true
	}
	for _, m := range []struct{ prefix, field string }{
		{"metadata.name", fieldName},
		{"metadata.namespace", fieldNamespace},
		{"spec.controlPlane.exposure", fieldExposure},
		{"spec.etcd", fieldStorage},
		{"spec.nodes.promotions[0].count", fieldCount},
		{"spec.nodes.promotions[0].selector", fieldSelector},
		{"spec.nodes.promotions", fieldCount},
		{"spec.nodes.sharedPlacement", fieldOptIn},
		{"spec.nodes.shared", fieldShared},
	} {
		if strings.HasPrefix(path, m.prefix) || inMessage && strings.Contains(path, m.prefix) {
			return m.field
		}
	}
	return ""
}

// causeMessage is a cause's message with its field, so that it reads on its own.
func causeMessage(c metav1.StatusCause) string {
	if c.Field == "" || c.Field == "<nil>" || strings.HasPrefix(c.Message, c.Field) {
		return c.Message
	}
	return c.Field + ": " + c.Message
}
