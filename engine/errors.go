package engine

import (
	"errors"
	"fmt"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/converge-dev/converge/inventory"
)

// ErrPruneRefused is wrapped by the error of a prune the engine refused: a prune larger
// than ApplyOptions.PruneBudget, or of everything when the desired set is empty and
// ApplyOptions.AllowEmpty is false. It is terminal.
var ErrPruneRefused = errors.New("prune refused")

// ErrNotOwned is wrapped by the error of an object that another inventory owns (its
// owning-inventory annotation names another ID). It is terminal.
var ErrNotOwned = errors.New("owned by another inventory")

// ErrNotAdopted is wrapped by the error of an object without an owner annotation that
// another tool manages (another field manager, or kubectl's last-applied-configuration), or
// of an object carrying the inventory's legacy ID that its ConfigMap does not record, which
// the engine does not take over without ApplyOptions.Adopt. It is terminal.
var ErrNotAdopted = errors.New("not adopted")

// NotOwnedError is the error of an object another inventory owns. It names the object as
// Kind namespace/name and its owner in words (inventory.Describe: "Sync apps/prod",
// "converge apply --inventory apps/prod", "converge install"), never by internal ID alone,
// so the message says whom to ask. It matches ErrNotOwned.
type NotOwnedError struct {
	// Object names the object: Kind namespace/name, or Kind name when cluster-scoped.
	Object string
	// Owner is the inventory ID in the object's owner annotation.
	Owner string
}

func (e *NotOwnedError) Error() string {
	return e.Object + " is owned by " + inventory.Describe(e.Owner) + "; not adopted"
}

// Is makes errors.Is(err, ErrNotOwned) hold.
func (e *NotOwnedError) Is(target error) bool { return target == ErrNotOwned }

// terminalError marks an error that retrying with the same input cannot fix.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// terminal marks err as terminal; nil stays nil.
func terminal(err error) error {
	if err == nil {
		return nil
	}
	return &terminalError{err: err}
}

// IsTerminal reports whether err cannot be fixed by retrying with the same input: a bad
// manifest or an invalid field (422, 400), an unknown kind ("no matches for kind"), a
// namespaced object without a namespace, an immutable field change without force, an
// object owned by another inventory, or a refused prune. Everything else — conflicts, 5xx,
// 429, timeouts, network errors — is transient: back off and retry. A joined error is
// terminal only when every error it joins is terminal, since a retry can still fix the
// others.
func IsTerminal(err error) bool {
	if err == nil {
		return false
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		for _, e := range errs {
			if !IsTerminal(e) {
				return false
			}
		}
		return len(errs) > 0
	}
	var t *terminalError
	if errors.As(err, &t) {
		return true
	}
	if apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) {
		return false
	}
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		meta.IsNoMatchError(err) || errors.Is(err, ErrPruneRefused) || errors.Is(err, ErrNotOwned) || errors.Is(err, ErrNotAdopted)
}

// immutableRE matches the messages of immutable-field rejections: built-in validation
// ("field is immutable") and CEL rules (x-kubernetes-validations).
var immutableRE = regexp.MustCompile(`(?i)(is\s+immutable|immutable\s+field|field\s+is\s+immutable)`)

// isImmutable reports whether err rejects a change of an immutable field. Unlike
// fluxcd/pkg/ssa's IsImmutableError it does not treat every 422 or 409 as immutable, so a
// plain invalid value is never "fixed" by deleting and recreating the object.
func isImmutable(err error) bool {
	return (apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err)) &&
		immutableRE.MatchString(err.Error())
}

// scalarRE matches how the API server's schema check names a scalar of the wrong type
// (structured-merge-diff prints the Go value: "expected string, got
// &value.valueUnstructured{Value:2}").
var scalarRE = regexp.MustCompile(`expected (string|boolean), got &value\.value\w+\{Value:(-?[0-9][0-9.eE+-]*|true|false)\}`)

// readable returns err with the API server's Go-syntax value in a schema error replaced by
// the value as the source wrote it and what to do, or err itself when there is none. The
// error still unwraps to err (IsTerminal and apierrors see the API status).
func readable(err error) error {
	msg := err.Error()
	m := scalarRE.FindStringSubmatch(msg)
	if m == nil {
		return err
	}
	kind := "a number"
	if m[2] == "true" || m[2] == "false" {
		kind = "a boolean"
	}
	msg = scalarRE.ReplaceAllString(msg, "expected a $1, got $2") +
		fmt.Sprintf(" (YAML reads an unquoted %s as %s: quote it in the source, \"%s\"; a postBuild variable's value is read as YAML too, so give it quoted: '\"%s\"')", m[2], kind, m[2], m[2])
	return &readableError{msg: msg, err: err}
}

type readableError struct {
	msg string
	err error
}

func (e *readableError) Error() string { return e.msg }
func (e *readableError) Unwrap() error { return e.err }
