// Package status is the status writer: one optimistic-lock write per reconcile of conditions,
// observedGeneration and revisions, retried on conflict from a fresh read, never lowering
// observedGeneration, and only onto the Sync (UID) the outcome was computed for.
//
// It takes plain values, never engine or sources types, and must not import them. The Sync
// API types live in status/v1alpha1.
package status
