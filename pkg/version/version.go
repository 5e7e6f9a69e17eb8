// Package version reports the version of KubeNest this binary was built as.
package version

import (
	utilversion "k8s.io/component-base/version"
)

// Version is set at build time with -ldflags "-X .../pkg/version.Version=...".
var Version = "dev"

// String describes this build: KubeNest's version and the Kubernetes version it embeds.
func String() string {
	return "kubenest " + Version + " (kubernetes " + utilversion.Get().GitVersion + ")"
}

// KubernetesVersion is the version of the Kubernetes components this binary embeds.
func KubernetesVersion() string { return utilversion.Get().GitVersion }
