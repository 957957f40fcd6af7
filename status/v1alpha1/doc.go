// Package v1alpha1 holds the Sync API (group converge.dev, version v1alpha1): the types a user
// writes and the daemon's status, the scheme registration and the names (conditions,
// annotations, finalizer) other tools read.
//
// It imports only apimachinery, so any program can read Syncs without the daemon's code.
package v1alpha1
