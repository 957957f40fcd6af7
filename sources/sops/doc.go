// Package sops decrypts SOPS-encrypted objects of a rendered Bundle in memory, as Flux's
// kustomize-controller does per resource: an object with a top-level "sops" field carrying a
// MAC (any kind, as Flux), and a Secret data entry that is itself a SOPS-encrypted file (what
// a kustomize secretGenerator makes of an encrypted file). Only age keys are supported.
//
// It runs in the parent after the isolated render, on the rendered objects, so the plaintext
// never touches disk. It never modifies the Bundle it is given (its Objects are shared with
// the render cache): it returns a new Bundle holding deep copies of only the objects it
// decrypted. Its errors name the object and its origin but never carry a value.
//
// It must not import a Kubernetes client: the caller reads the keys (the daemon as the Sync's
// identity, the CLI from files) and hands them over as bytes.
package sops
