package daemon

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// reasonDecryptionFailed is the Ready=False reason of a render that could not be
// decrypted: not BuildFailed, since the manifests rendered and the fix is usually in the
// keys (the Sync's key Secret), not in the repository.
const reasonDecryptionFailed = "DecryptionFailed"

// prepare decrypts and substitutes the rendered b of s (sources/pipeline) with the keys of
// spec.decryption and the variables of spec.postBuild, read as the Sync's identity
// (decryption, substitution). helmSecrets are values read from Secrets for the render, to
// be redacted too. From then on, what the daemon writes about s (status message, events)
// has the values of the Secrets it read and the values it decrypted redacted: an API
// server error about an object may quote one. A failed decryption leaves the redactor as
// it was. On error nothing may be applied or pruned (I8).
func (r *reconciler) prepare(ctx context.Context, s *v1alpha1.Sync, b *sources.Bundle, helmSecrets []string) (*sources.Bundle, error) {
	key := client.ObjectKeyFromObject(s)
	opts := pipeline.Options{Decryption: r.decryption(s), Substitution: r.substitution(s), Redact: helmSecrets,
		Metadata: commonMetadata(s)}
	if opts.Substitution != nil {
		opts.Substitution.Memo = r.memo(key)
	}
	opts.Decryption.Memo = r.decryptedMemo(key) // it drops what it keeps once the Sync decrypts no more
	res, err := pipeline.Prepare(ctx, b, opts)
	var de *pipeline.DecryptError
	if errors.As(err, &de) {
		return nil, err
	}
	if opts.Substitution == nil {
		r.dropSubstitution(key)
	}
	r.setRedactor(key, res.Redactor)
	return res.Bundle, err
}

// prepareFailure is the failure of a prepare: DecryptionFailed (stalled when only a new
// revision fixes it) or BuildFailed. A failed substitution is retried with back-off: fixing
// a ConfigMap or Secret, which makes no new revision, fixes it.
func prepareFailure(err error) *failure {
	var de *pipeline.DecryptError
	if errors.As(err, &de) {
		return &failure{reason: reasonDecryptionFailed, err: err, stalls: de.Terminal}
	}
	return retryable(reasonBuildFailed, err)
}

// memo is the Memo of the last substitution of the Sync key, kept in its syncState.
func (r *reconciler) memo(key types.NamespacedName) *pipeline.Memo {
	return r.keptMemo(key, func(st *syncState) **pipeline.Memo { return &st.memo })
}

// decryptedMemo is the Memo of the last decryption of the Sync key, kept in its syncState:
// between commits, a reconcile with the same keys starts no decryption program.
func (r *reconciler) decryptedMemo(key types.NamespacedName) *pipeline.Memo {
	return r.keptMemo(key, func(st *syncState) **pipeline.Memo { return &st.decrypted })
}

// keptMemo is the Memo field of the Sync key's syncState, created when it has none.
func (r *reconciler) keptMemo(key types.NamespacedName, field func(*syncState) **pipeline.Memo) *pipeline.Memo {
	var m *pipeline.Memo
	r.states.with(key, func(st *syncState) {
		p := field(st)
		if *p == nil {
			*p = &pipeline.Memo{}
		}
		m = *p
	})
	return m
}

// setRedactor sets the redactor of what is written about the Sync key.
func (r *reconciler) setRedactor(key types.NamespacedName, red *varsubst.Redactor) {
	r.states.with(key, func(st *syncState) { st.redactor = red })
}

// dropSubstitution forgets the Sync key's last substitution and redactor (it has no
// postBuild any more).
func (r *reconciler) dropSubstitution(key types.NamespacedName) {
	r.states.with(key, func(st *syncState) { st.memo, st.redactor = nil, nil })
}

// redact hides the Secret-sourced and decrypted values of s in msg: every text the daemon
// writes about s (status message, events) passes through it.
func (r *reconciler) redact(s *v1alpha1.Sync, msg string) string {
	var red *varsubst.Redactor
	r.states.read(client.ObjectKeyFromObject(s), func(st *syncState) { red = st.redactor })
	return red.String(msg)
}
