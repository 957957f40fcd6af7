package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/signature"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// keysError reports that the trusted keys of spec.source.git.verify could not be read: the
// Sync is SourceVerificationFailed, and retried (the Secret may appear, or its Role change).
type keysError struct{ err error }

func (e *keysError) Error() string { return e.err.Error() }
func (e *keysError) Unwrap() error { return e.err }

// verification reads the trusted keys of spec.source.git.verify on every reconcile, as the
// Sync's identity, as the git credentials are (I13): whoever may not read a Secret cannot
// have the daemon read it for them, and a rotated or revoked key counts from the next
// reconcile. Nil without spec.source.git.verify.
func (r *reconciler) verification(ctx context.Context, s *v1alpha1.Sync) (*git.Verification, error) {
	v := s.Spec.Source.Git.Verify
	if v == nil {
		return nil, nil
	}
	sec, err := r.engines.secret(ctx, s, v.SecretRef.Name)
	if err != nil {
		return nil, &keysError{fmt.Errorf("spec.source.git.verify.secretRef: Secret %s/%s read as %s: %w",
			s.Namespace, v.SecretRef.Name, r.engines.identity(s), err)}
	}
	return &git.Verification{Mode: git.VerifyMode(v.Mode), Keys: sec.Data}, nil
}

// fetchFailReason is the Ready reason of a source that could not be read, fetched or
// verified: SourceVerificationFailed for a signature (git or cosign) that does not verify
// or keys that cannot be read, FetchFailed otherwise.
func fetchFailReason(err error) string {
	var ke *keysError
	if signature.IsVerification(err) || errors.As(err, &ke) {
		return reasonSourceVerificationFailed
	}
	return reasonFetchFailed
}

// verified describes the signatures a revision was verified with, for the Ready message:
// stable for a revision and key set, so a no-op reconcile writes no status.
func verified(sigs []signature.Signature) string {
	if len(sigs) == 0 {
		return ""
	}
	parts := make([]string, len(sigs))
	for i, sig := range sigs {
		parts[i] = sig.String()
	}
	return "; verified: " + strings.Join(parts, ", ")
}
