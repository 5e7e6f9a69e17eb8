// Package v1alpha1 holds the kubenest.io/v1alpha1 API: VirtualCluster, a tenant's dedicated
// Kubernetes control plane running inside the host cluster.
//
// +kubebuilder:object:generate=true
// +kubebuilder:ac:generate=true
// +groupName=kubenest.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "kubenest.io", Version: "v1alpha1"}

	// SchemeGroupVersion is GroupVersion under the name generated code expects.
	SchemeGroupVersion = GroupVersion

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
