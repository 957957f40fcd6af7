package sops

import (
	"errors"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/sops/internal/wire"
)

var (
	// ErrNotConfigured reports an encrypted object while no decryption is configured:
	// applying ciphertext as a Secret is never what its author wants, so it is refused.
	ErrNotConfigured = wire.ErrNotConfigured
	// ErrKey reports that none of the given keys can decrypt an object's data key: a wrong
	// or missing key. The fix is in the keys, not in the source.
	ErrKey = wire.ErrKey
	// ErrIntegrity reports an object whose ciphertext or SOPS metadata is damaged or was
	// altered (the MAC does not match): the fix is in the source.
	ErrIntegrity = wire.ErrIntegrity
	// ErrUnsupported reports SOPS content that cannot be decrypted after the render: a
	// secretGenerator "envs" entry of an encrypted .env file, which kustomize has already
	// split into one entry per variable (Flux decrypts such files on disk first).
	ErrUnsupported = wire.ErrUnsupported
	// ErrProgram reports that the decryption program could not be run, or ended without
	// an answer: converge-decrypt is missing, or it failed. Another try, or installing it,
	// may fix it; the source may be fine.
	ErrProgram = errors.New("SOPS decryption program")
	// ErrLimit reports a decryption that needed more memory than its limit, or whose
	// answer was larger than its bound: what the source holds must change (or the limit).
	ErrLimit = errors.New("SOPS decryption limit")
)

// MaxRecipients bounds the keys one SOPS document may be encrypted for. Each is tried in
// turn, so a document of a hostile repository listing thousands would cost seconds of CPU
// per object; real files list a handful (one key per team or environment).
const MaxRecipients = wire.MaxRecipients

// ObjectError is the failure to decrypt one object. Its message names the object's origin,
// the object and the entry, never a value.
type ObjectError struct {
	// Origin is where the object was rendered from (sources.Bundle.Origins).
	Origin string
	// Object is "Kind namespace/name" or "Kind name".
	Object string
	// Entry is the Secret data entry ("data.<key>") for an encrypted file entry; empty when
	// the whole object is encrypted.
	Entry string
	// Err is the cause: ErrNotConfigured, ErrKey or ErrIntegrity, wrapped.
	Err error
}

// Error formats origin, object, entry, then the cause.
func (e *ObjectError) Error() string {
	var b strings.Builder
	if e.Origin != "" {
		b.WriteString(e.Origin + ": ")
	}
	b.WriteString(e.Object)
	if e.Entry != "" {
		b.WriteString(": " + e.Entry)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

// Unwrap returns the cause.
func (e *ObjectError) Unwrap() error { return e.Err }

// Encrypted reports whether o carries SOPS metadata: a top-level "sops" field with a MAC,
// as Flux's kustomize-controller decides (any kind), or, for a Secret, a data entry that
// is itself a SOPS-encrypted file (or entries that are the variables of one, which
// Decrypt refuses).
func Encrypted(o *unstructured.Unstructured) bool { return wire.Encrypted(o) }
