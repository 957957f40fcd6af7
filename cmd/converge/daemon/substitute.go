package daemon

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// substitute runs s's spec.postBuild on b: the variables of spec.postBuild.substituteFrom
// (read as the Sync's identity, in order, a later one winning), then those of
// spec.postBuild.substitute, replaced in every object as Flux does. b is not modified.
//
// The result is kept per Sync and reused while the objects and variables stay the same; it
// shares every part no variable changed with the rendered objects (Expand), so it costs the
// substituted paths, not a second copy of the render.
// It also records which values came from Secrets, so that what the daemon writes about s
// from now on (status message, events) has them redacted: an API server error about an
// object may quote a substituted value. A failure (an object that cannot be read, a
// variable missing under strict, a substitution that breaks an object) is returned for a
// Ready=False BuildFailed with nothing applied or pruned (I8). It is not terminal: fixing
// a ConfigMap or Secret, which makes no new revision, fixes it, so it is retried with
// back-off.
//
// plaintexts are the values decrypted from the source (sops.Plaintexts): they are redacted
// alike, with or without a postBuild.
func (r *reconciler) substitute(ctx context.Context, s *v1alpha1.Sync, b *sources.Bundle, plaintexts []string) (*sources.Bundle, error) {
	key := client.ObjectKeyFromObject(s)
	pb := s.Spec.PostBuild
	if pb == nil {
		r.substitutions.forget(key)
		if len(plaintexts) > 0 {
			r.substitutions.setRedactor(key, varsubst.NewRedactor(plaintexts))
		}
		return b, nil
	}
	srcs, secretValues, err := r.substituteFrom(ctx, s)
	// Values read before a failure are redacted too.
	redactor := varsubst.NewRedactor(append(secretValues, plaintexts...))
	r.substitutions.setRedactor(key, redactor)
	if err != nil {
		r.substitutions.dropResult(key)
		return nil, err
	}
	srcs = append(srcs, varsubst.Source{Name: "spec.postBuild.substitute", Values: pb.Substitute})
	vars, err := varsubst.Merge(srcs...)
	if err != nil {
		r.substitutions.dropResult(key)
		return nil, fmt.Errorf("spec.postBuild: %w", err)
	}
	opts := varsubst.DefaultOptions()
	opts.Strict = pb.Strict
	// What substitution inserts is bounded as a render is: --max-file-size per object,
	// --max-total-size in all (zero: the defaults).
	opts.MaxObjectSize, opts.MaxTotalSize = r.render.limits.MaxFileSize, r.render.limits.MaxTotalSize
	fp := vars.Fingerprint()
	if opts.Strict {
		fp = sha256.Sum256(append(fp[:], "strict"...))
	}
	if out := r.substitutions.lastResult(key, b, fp); out != nil {
		return out, nil
	}
	out, err := varsubst.Expand(b, vars, opts)
	if err != nil { // lastResult dropped the kept result: nothing to reuse is left
		return nil, fmt.Errorf("spec.postBuild: %w", err)
	}
	r.substitutions.remember(key, b, fp, out)
	return out, nil
}

// substituteFrom reads the ConfigMaps and Secrets of spec.postBuild.substituteFrom as the
// user s acts as (I13: naming a Secret in a Sync must not let a tenant read what it could
// not read itself). An optional object that does not exist is skipped; any other failure,
// including a refused read of an optional one, is an error naming the entry, the object and
// the identity. secretValues are the values read from Secrets, for redaction, also when
// err is not nil.
func (r *reconciler) substituteFrom(ctx context.Context, s *v1alpha1.Sync) (srcs []varsubst.Source, secretValues []string, err error) {
	for i, ref := range s.Spec.PostBuild.SubstituteFrom {
		src := varsubst.Source{Name: fmt.Sprintf("%s %s/%s", ref.Kind, s.Namespace, ref.Name)}
		var readErr error
		switch ref.Kind {
		case "ConfigMap":
			var cm *corev1.ConfigMap
			if cm, readErr = r.engines.configMap(ctx, s, ref.Name); readErr == nil {
				src.Values = cm.Data
			}
		case "Secret":
			var sec *corev1.Secret
			if sec, readErr = r.engines.secret(ctx, s, ref.Name); readErr == nil {
				src.Values, src.Sensitive = make(map[string]string, len(sec.Data)), true
				for k, v := range sec.Data {
					src.Values[k] = string(v)
					// Both as stored and as substituted (a value ending in a newline, as
					// kubectl create secret --from-file stores it, lands without it).
					secretValues = append(secretValues, string(v), varsubst.Clean(string(v)))
				}
			}
		default: // the schema refuses other kinds; an older schema may have let one in
			readErr = fmt.Errorf("kind %q: want ConfigMap or Secret", ref.Kind)
		}
		if ref.Optional && apierrors.IsNotFound(readErr) {
			continue
		}
		if readErr != nil {
			return nil, secretValues, fmt.Errorf("spec.postBuild.substituteFrom[%d]: %s read as %s: %w",
				i, src.Name, r.engines.identity(s), readErr)
		}
		srcs = append(srcs, src)
	}
	return srcs, secretValues, nil
}

// configMap reads ConfigMap name of s's namespace from the API server as the user s acts
// as, as secret does for Secrets.
func (e *engineSet) configMap(ctx context.Context, s *v1alpha1.Sync, name string) (*corev1.ConfigMap, error) {
	a, err := e.actorFor(s)
	if err != nil {
		return nil, err
	}
	return a.secrets.ConfigMaps(s.Namespace).Get(ctx, name, metav1.GetOptions{})
}

// substitutions keeps, per Sync, the Redactor of the Secret values its last substitution
// read, and the last substitution itself: a reconcile of the same rendered objects with the
// same variables (every interval and drift reconcile between commits) reuses the result
// instead of serializing and decoding every object with a reference again (BenchmarkExpand:
// about 2 s of CPU at 10,000 such objects). The zero value is ready to use.
type substitutions struct {
	mu sync.Mutex
	by map[types.NamespacedName]*substState
}

type substState struct {
	redactor *varsubst.Redactor
	// in are the objects the last Expand was given (the render cache's, read-only), fp the
	// fingerprint of its variables and options, out its result.
	in  []*unstructured.Unstructured
	fp  [sha256.Size]byte
	out *sources.Bundle
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

func (x *substitutions) setRedactor(key types.NamespacedName, r *varsubst.Redactor) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.state(key).redactor = r
}

// lastResult returns the last result for key when it was computed from the same objects
// (the same pointers: the render cache hands out the same objects for the same content)
// with the same fingerprint, as a Bundle of b's revision; nil otherwise. A result that does
// not match is dropped at once: it is of no further use, it may hold values of a Secret
// that has changed since, and kept during the new Expand it would be a second result in
// memory at the peak.
func (x *substitutions) lastResult(key types.NamespacedName, b *sources.Bundle, fp [sha256.Size]byte) *sources.Bundle {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.by[key]
	if st == nil || st.out == nil {
		return nil
	}
	if st.fp != fp || !slices.Equal(st.in, b.Objects) {
		st.in, st.out = nil, nil
		return nil
	}
	out := *b
	out.Objects = st.out.Objects
	return &out
}

// dropResult forgets the kept result of key, keeping its redactor: the substitution failed,
// and whatever it would reuse may be out of date.
func (x *substitutions) dropResult(key types.NamespacedName) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if st := x.by[key]; st != nil {
		st.in, st.out = nil, nil
	}
}

func (x *substitutions) remember(key types.NamespacedName, b *sources.Bundle, fp [sha256.Size]byte, out *sources.Bundle) {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := x.state(key)
	st.in, st.fp, st.out = b.Objects, fp, out
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

// redact hides the Secret-sourced substitution values of s in msg: every text the daemon
// writes about s (status message, events) passes through it.
func (r *reconciler) redact(s *v1alpha1.Sync, msg string) string {
	return r.substitutions.redactor(client.ObjectKeyFromObject(s)).String(msg)
}
