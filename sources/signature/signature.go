// Package signature holds what every source's verification reports: the verified
// signatures of a revision and the error of one that does not verify, so that a caller
// judges a git commit's PGP or SSH signature and an artifact's cosign signature alike.
package signature

import (
	"errors"
	"fmt"
)

// Signature is a verified signature: what was signed and by which trusted key.
type Signature struct {
	// Object is what was signed: "commit <sha>", "tag <name>" or "artifact sha256:<hex>".
	Object string
	// Key is the signing key: "PGP key <fingerprint>", "SSH key SHA256:<base64>" or
	// "ECDSA P-256 key SHA256:<hex>".
	Key string
	// Source is the name of the trusted key entry (the Secret's data key) holding the key.
	Source string
}

// String describes the signature for messages, e.g. "commit 1a2b… signed by PGP key
// 0F3C… (alice.asc)".
func (s Signature) String() string {
	return fmt.Sprintf("%s signed by %s (%s)", s.Object, s.Key, s.Source)
}

var (
	// ErrUnsigned reports a revision that carries no signature.
	ErrUnsigned = errors.New("not signed")
	// ErrNoKeys reports trusted keys that are missing or cannot be read.
	ErrNoKeys = errors.New("no usable public key")
)

// Error reports a fetched revision whose signatures could not be verified. It is terminal:
// the same revision and keys always fail the same way.
type Error struct {
	// Check names the verification: "signature verification (mode HEAD)", "cosign
	// signature verification".
	Check string
	// Err says what failed; it wraps a sentinel of the source's package.
	Err error
}

func (e *Error) Error() string { return fmt.Sprintf("%s failed: %v", e.Check, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// IsVerification reports whether err is (or wraps) an Error.
func IsVerification(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
