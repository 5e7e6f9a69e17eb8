//go:build deps

// Package hack pins, through imports go mod tidy keeps, modules the project builds on but whose
// code is not yet imported elsewhere: virtual-kubelet (clustertree) and cert-manager's client
// (cert-manager issuers). It is never built.
package hack

import (
	_ "github.com/cert-manager/cert-manager/pkg/client/clientset/versioned"
	_ "github.com/virtual-kubelet/virtual-kubelet/node"
)
