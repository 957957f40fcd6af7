// Package pipeline turns a loaded Bundle into the one that is applied or printed: its
// SOPS-encrypted objects decrypted (sources/sops), then Flux's post-build variables
// substituted (sources/varsubst), with a Redactor of every value that must never be
// written (decrypted values, values read from Secrets).
//
// The CLI and the daemon both prepare through Prepare; each reads what it is given in its
// own way (the CLI from files and flags, the daemon as the Sync's identity from Secrets and
// ConfigMaps) and hands it over through Options. It never reads a cluster or a file itself,
// never modifies the Bundle it is given (its objects may be shared with a kept result), and
// its errors name the object and where it was rendered from, never a value.
package pipeline
