// Package ssa applies typed objects with server-side apply.
package ssa

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Apply server-side applies obj, a typed object built by a pure builder with its TypeMeta set,
// as fieldOwner, taking over fields other managers set. On success obj holds what the server
// returned: defaults, allocated fields (a Service's ClusterIP) and status.
func Apply(ctx context.Context, c client.Client, obj client.Object, fieldOwner string) error {
	gvk := obj.GetObjectKind().GroupVersionKind()
	u, err := applied(obj)
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("reading back %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

// Body is the apply patch of obj, a typed object built by a pure builder with its TypeMeta
// set: for clients other than controller-runtime's, such as a clientset's Patch with
// types.ApplyPatchType.
func Body(obj client.Object) ([]byte, error) {
	u, err := applied(obj)
	if err != nil {
		return nil, err
	}
	return u.MarshalJSON()
}

// applied is obj as an apply sends it.
func applied(obj client.Object) (*unstructured.Unstructured, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		return nil, fmt.Errorf("applying %s: object has no kind set", obj.GetName())
	}
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: content}
	// Fields a builder never means to set, which typed objects always carry: status, and
	// nulls such as metadata.creationTimestamp (in an apply, null would mean "remove").
	unstructured.RemoveNestedField(u.Object, "status")
	dropNulls(u.Object)
	return u, nil
}

func dropNulls(m map[string]any) {
	for k, v := range m {
		switch v := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			dropNulls(v)
		case []any:
			for _, item := range v {
				if im, ok := item.(map[string]any); ok {
					dropNulls(im)
				}
			}
		}
	}
}
