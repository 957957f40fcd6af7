// Package deploy holds the kustomize base that runs the converge daemon in a cluster, and
// embeds it, so the daemon, `converge install` and tests use exactly the files users apply
// with `kubectl apply -k deploy/`.
//
// The base is kustomization.yaml and what it lists (namespace.yaml, crd/, rbac/, manager/).
// examples/ and monitoring/ are not part of it: examples/ holds RBAC grants to copy, and
// monitoring/ needs the Prometheus operator.
package deploy

import (
	"embed"
	"io/fs"
)

// SyncCRD is the CustomResourceDefinition of converge.dev/v1alpha1 Sync, generated from the
// Go types in status/v1alpha1 by `make generate` (never edited by hand).
//
//go:embed crd/converge.dev_syncs.yaml
var SyncCRD []byte

// base is the kustomize base; see Base.
//
//go:embed kustomization.yaml namespace.yaml crd rbac manager
var base embed.FS

// Base returns the kustomize base rooted at its kustomization.yaml: render it with
// kustomize (for example sources.Render on a copy) to get the objects of a cluster install.
func Base() fs.FS { return base }
