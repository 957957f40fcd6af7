// Package v1alpha1 holds the Sync API (group converge.dev, version v1alpha1): the types a user
// writes and the daemon's status, the scheme registration and the names (conditions,
// annotations, finalizer) other tools read.
//
// It imports only apimachinery, so any program can read Syncs without the daemon's code.
//
// The types are the source of truth: their kubebuilder markers (validation, defaults, printer
// columns) and doc comments generate the CRD deploy/crd/converge.dev_syncs.yaml and
// zz_generated.deepcopy.go with `make generate` (controller-gen, pinned in the Makefile).
// Defaults live in the CRD only: the API server fills them in, so the daemon reads a Sync
// with every defaulted field set. Edit this package, never the generated files.
//
// +kubebuilder:object:generate=true
// +groupName=converge.dev
package v1alpha1
