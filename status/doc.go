// Package status holds the Sync API types (group converge.dev, version v1alpha1) and the status
// writer: one optimistic-lock write per reconcile of conditions, observedGeneration and
// revisions, retried on conflict from a fresh read, never lowering observedGeneration.
//
// It takes plain values, never engine or sources types, and must not import them.
package status
