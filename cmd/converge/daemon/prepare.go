package daemon

import (
	"context"
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/converge-dev/converge/status"
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
	opts := pipeline.Options{Decryption: r.decryption(s), Substitution: r.substitution(s), Redact: helmSecrets}
	if opts.Substitution != nil {
		opts.Substitution.Memo = r.substitutions.memo(key)
	}
	res, err := pipeline.Prepare(ctx, b, opts)
	var de *pipeline.DecryptError
	if errors.As(err, &de) {
		return nil, err
	}
	if opts.Substitution == nil {
		r.substitutions.forget(key)
	}
	r.substitutions.setRedactor(key, res.Redactor)
	return res.Bundle, err
}

// prepareFailed is the outcome of a failed prepare: Ready=False, DecryptionFailed (terminal
// when only a new revision fixes it) or BuildFailed. A failed substitution is not terminal:
// fixing a ConfigMap or Secret, which makes no new revision, fixes it, so it is retried
// with back-off.
func (r *reconciler) prepareFailed(s *v1alpha1.Sync, o status.Outcome, err error) status.Outcome {
	var de *pipeline.DecryptError
	if errors.As(err, &de) {
		return r.fail(s, o, reasonDecryptionFailed, err, de.Terminal)
	}
	return r.fail(s, o, reasonBuildFailed, err, false)
}

// substitutions keeps, per Sync, the Redactor of what is written about it and the Memo of
// its last substitution. The zero value is ready to use.
type substitutions struct {
	mu sync.Mutex
	by map[types.NamespacedName]*substState
}

type substState struct {
	redactor *varsubst.Redactor
	memo     pipeline.Memo
}

func (x *substitutions) state(key types.NamespacedName) *substState {
	if x.by == nil {
		x.by = map[types.NamespacedName]*substState{}
	}
	st := x.by[key]
	if st == nil {
		st = &substState{}
		x.by[key] = st
	}
	return st
}

// setRedactor sets the redactor of key; a nil one keeps nothing for a key without state.
func (x *substitutions) setRedactor(key types.NamespacedName, r *varsubst.Redactor) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if r == nil && x.by[key] == nil {
		return
	}
	x.state(key).redactor = r
}

// memo is the Memo of key's last substitution.
func (x *substitutions) memo(key types.NamespacedName) *pipeline.Memo {
	x.mu.Lock()
	defer x.mu.Unlock()
	return &x.state(key).memo
}

func (x *substitutions) redactor(key types.NamespacedName) *varsubst.Redactor {
	x.mu.Lock()
	defer x.mu.Unlock()
	if st := x.by[key]; st != nil {
		return st.redactor
	}
	return nil
}

// forget drops what is kept for key (its Sync is gone, or has no postBuild any more).
func (x *substitutions) forget(key types.NamespacedName) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.by, key)
}

// redact hides the Secret-sourced and decrypted values of s in msg: every text the daemon
// writes about s (status message, events) passes through it.
func (r *reconciler) redact(s *v1alpha1.Sync, msg string) string {
	return r.substitutions.redactor(client.ObjectKeyFromObject(s)).String(msg)
}
