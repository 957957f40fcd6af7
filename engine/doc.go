// Package engine applies a desired set of objects to a cluster with server-side apply
// (fluxcd/pkg/ssa), stages CRDs and Namespaces first, records ownership in a write-ahead
// inventory, prunes what left the set with UID preconditions, computes kstatus readiness, and
// returns a Result per object. Dry-run is the same Apply with DryRun set.
//
// It must not import git, kustomize, the Sync API or status, or Prometheus; it imports
// inventory only.
package engine
