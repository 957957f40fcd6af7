package engine

import (
	"context"
	"fmt"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Messages of dry-run shortcuts.
const (
	msgCRDPending       = "CRD not yet installed; server-side dry-run skipped"
	msgNamespacePending = "namespace not yet created; server-side dry-run skipped"
	msgWouldRecreate    = "immutable field changed; would delete and recreate the object"
)

// applyOne applies one item: ownership check (I11), server-side dry-run, drift check, and
// the apply itself when the object drifted. Object failures go into the outcome; the error
// is non-nil only when a hook aborts the run.
//
// out is a named result so that the memo records the outcome actually returned (send and
// failed return new values).
func (r *applyRun) applyOne(ctx context.Context, it *item) (out outcome, err error) {
	out = outcome{change: Change{ID: it.key, Object: it.id, Origin: it.origin}, track: true}
	switch {
	case it.pendingErr != nil:
		return failed(out, it.pendingErr), nil
	case it.pending && r.opts.DryRun:
		out.change.Action, out.change.Message = ActionCreated, msgCRDPending
		return out, nil
	case it.obj.GetAnnotations()[ReconcileAnnotation] == ReconcileDisabled:
		out.change.Action = ActionSkipped
		out.change.Message = "reconcile disabled by annotation " + ReconcileAnnotation
		out.uid, out.track = r.old.UID(it.id), r.old.Has(it.id)
		return out, nil
	}
	viaCache := r.viaCache()
	var cached *metav1.PartialObjectMetadata
	if viaCache {
		hash := hashObject(r.fieldManager(), it.obj)
		defer func() { r.remember(it, hash, out) }()
		o, c, ok, err := r.fromCache(ctx, it, hash, out)
		if ok || err != nil {
			return o, err
		}
		cached = c
	}
	live, listed := r.surveyedLive(it.id, viaCache, cached)
	for {
		if !listed {
			if live, err = r.e.get(ctx, it.obj); err != nil {
				return failed(out, err), nil
			}
		}
		o, stale, err := r.applyLive(ctx, it, live, listed, out)
		if !stale {
			return o, err
		}
		listed = false // changed since it was listed: read it again
	}
}

// applyLive is the full path of applyOne, given the live object (nil: it does not exist),
// read with a GET or listed by the survey. stale reports that a listed object changed since
// the LIST (the dry-run started from a newer resourceVersion): the caller reads it again.
func (r *applyRun) applyLive(ctx context.Context, it *item, live *unstructured.Unstructured, listed bool,
	out outcome) (_ outcome, stale bool, _ error) {
	if live != nil {
		if owner := live.GetAnnotations()[OwnerAnnotation]; owner != "" && owner != r.ref.ID {
			// I11: never adopt an object another inventory owns.
			out.track = r.old.Has(it.id)
			return failed(out, terminal(fmt.Errorf("%w %q; not adopted", ErrNotOwned, owner))), false, nil
		}
		out.uid = live.GetUID()
	}
	if live == nil && !r.opts.DryRun && !r.opts.Diff {
		// The API server just said the object does not exist: a dry-run could only answer
		// "created", so apply at once (one request instead of two per new object).
		out.change.Action = ActionCreated
		o, err := r.send(ctx, it, nil, out)
		return o, false, err
	}
	dry, live, err := r.dryRun(ctx, it, live)
	if err != nil {
		return failed(out, err), false, nil
	}
	if dry == nil { // a dry-run shortcut: created in a namespace the set creates, or a recreate
		out.change.Action, out.change.Message = ActionCreated, msgNamespacePending
		if live != nil {
			out.change.Action, out.change.Message = ActionConfigured, msgWouldRecreate
		}
		return out, false, nil
	}
	// A listed answer is trusted only at the very version the dry-run started from: an
	// object listed as missing must still be missing (a dry-run create has no
	// resourceVersion), and a listed object must not have changed since.
	if listed && dry.GetResourceVersion() != resourceVersion(live) {
		return out, true, nil
	}
	if live != nil && !drifted(live, dry) {
		out.change.Action, out.ready, out.rv = ActionUnchanged, true, live.GetResourceVersion()
		return out, false, nil
	}
	out.change.Action = ActionCreated
	if live != nil {
		out.change.Action = ActionConfigured
	}
	if r.opts.DryRun || r.opts.Diff {
		if out.change.Diff, err = unifiedDiff(it.key, live, dry); err != nil {
			return failed(out, err), false, nil
		}
	}
	if r.opts.DryRun {
		return out, false, nil
	}
	o, err := r.send(ctx, it, live, out)
	return o, false, err
}

// send applies it for real and runs the AfterApply crash point.
func (r *applyRun) send(ctx context.Context, it *item, live *unstructured.Unstructured, out outcome) (outcome, error) {
	applied, err := r.e.apply(ctx, it.obj, r.fieldManager(), r.forceConflicts(live))
	if err != nil {
		return failed(out, err), nil
	}
	return r.sent(it, applied, out)
}

// sent records that applied is the server's answer to the apply of it and runs the
// AfterApply crash point.
func (r *applyRun) sent(it *item, applied metav1.Object, out outcome) (outcome, error) {
	out.uid, out.ready, out.rv = applied.GetUID(), true, applied.GetResourceVersion()
	if h := r.e.opts.Hooks.AfterApply; h != nil {
		k := int(r.applied.Add(1))
		if err := h(k, it.key); err != nil {
			return out, fmt.Errorf("aborted by hook after apply %d (%s): %w", k, it.key, err)
		}
	}
	return out, nil
}

// fromCache is the watch-mode path of applyOne: it decides from the watch cache (metadata
// only) and the memo what to send, and sends at most one request. ok is false when the cache
// cannot decide or the request failed: then the caller takes the full path (API server read,
// ownership check, dry-run, and an apply only when the dry-run shows a change), which also
// reports the failure.
//
//   - listed as missing by the API server (survey): a new object, applied at once without
//     reading the cache;
//   - ours, at the resourceVersion and desired hash the memo recorded: nothing to send;
//   - ours, and the memo recorded another desired hash (a new commit): applied at once;
//   - ours otherwise (a restart, a status update, an out-of-band edit): the full path, since
//     only the full live object can show whether an apply would change anything (after a
//     restart the survey has listed it, so the full path costs one dry-run).
//
// The apply here never forces conflicts (unless the caller opted in): a conflict sends the
// object down the full path, which decides whether the field was drift or another apply
// manager's (I7, I11). Objects the cache shows as someone else's or unowned, or missing while
// inventoried, also take the full path, so ownership is always decided on the API server's
// word.
func (r *applyRun) fromCache(ctx context.Context, it *item, hash [32]byte, out outcome) (
	_ outcome, cached *metav1.PartialObjectMetadata, ok bool, _ error) {
	if r.missing(it.id) {
		// The API server just listed it as missing: applied at once, as without the cache
		// (its informer is started after the run, so a cold apply does not stream back a watch
		// event for every object it creates).
		out.change.Action = ActionCreated
		return r.fromCacheApply(ctx, it, nil, out)
	}
	if !r.old.Has(it.id) && !r.e.memo.has(it.id) {
		// New, and not listed (alone of its kind in its namespace): the full path reads it
		// with a GET, which the cache could not spare, and reading the cache would start (and
		// wait for) its kind's informer in the middle of the run.
		return out, nil, false, nil
	}
	cached, err := r.e.cache.cachedLive(ctx, it.obj)
	switch {
	case err != nil:
		return out, nil, false, nil
	case cached == nil: // the API server has not confirmed it (I11: no adoption on a stale cache)
		return out, nil, false, nil
	case cached.GetAnnotations()[OwnerAnnotation] != r.ref.ID:
		return out, cached, false, nil
	case r.e.memo.hit(it.id, hash, cached.GetResourceVersion()):
		out.change.Action, out.uid, out.ready, out.rv = ActionUnchanged, cached.GetUID(), true, cached.GetResourceVersion()
		return out, cached, true, nil
	case r.e.memo.changed(it.id, hash):
		out.change.Action = ActionConfigured
	default:
		return out, cached, false, nil
	}
	return r.fromCacheApply(ctx, it, cached, out)
}

// fromCacheApply is fromCache's apply of it, over cached (nil: a new object).
func (r *applyRun) fromCacheApply(ctx context.Context, it *item, cached *metav1.PartialObjectMetadata, out outcome) (
	outcome, *metav1.PartialObjectMetadata, bool, error) {
	applied, err := r.e.apply(ctx, it.obj, r.fieldManager(), r.opts.ForceConflicts)
	if err != nil {
		return out, cached, false, nil
	}
	if cached != nil && applied.GetResourceVersion() == cached.GetResourceVersion() {
		out.change.Action = ActionUnchanged // the server had nothing to change
	}
	out, err = r.sent(it, applied, out)
	return out, cached, true, err
}

// remember records the live object an apply or a verification produced, or forgets the
// object when the run did not establish it.
func (r *applyRun) remember(it *item, hash [32]byte, out outcome) {
	if out.rv == "" || out.change.Action == ActionFailed {
		r.e.memo.forget(it.id)
		return
	}
	r.e.memo.remember(it.id, hash, out.rv)
}

// dryRun server-side dry-runs it. On an immutable-field rejection it recreates the object
// when forced (deleting live, which becomes nil), or fails with how to opt in. A nil dry
// result without error means a DryRun shortcut: the object cannot be dry-run yet (its
// namespace is created by the same set) or would be recreated.
func (r *applyRun) dryRun(ctx context.Context, it *item, live *unstructured.Unstructured) (
	*unstructured.Unstructured, *unstructured.Unstructured, error) {
	dry := it.obj.DeepCopy()
	force := r.forceConflicts(live)
	err := r.e.serverSideApply(ctx, dry, r.fieldManager(), true, force)
	if err != nil && live != nil && isImmutable(err) {
		if !r.forced(it, live) {
			return nil, live, terminal(fmt.Errorf("immutable field changed; set annotation %s: %s on the object or ApplyOptions.Force to recreate it: %w",
				ForceAnnotation, ForceEnabled, err))
		}
		if r.opts.DryRun {
			return nil, live, nil
		}
		if err := r.e.recreate(ctx, live, r.opts.Timeout); err != nil {
			return nil, live, err
		}
		live = nil
		dry = it.obj.DeepCopy()
		err = r.e.serverSideApply(ctx, dry, r.fieldManager(), true, false)
	}
	if err != nil {
		if r.opts.DryRun && live == nil && apierrors.IsNotFound(err) && r.newNamespaces[it.id.Namespace] {
			return nil, nil, nil
		}
		if apierrors.IsConflict(err) && !force {
			err = fmt.Errorf("field manager conflict with another apply manager (set ForceConflicts to take ownership): %w", err)
		}
		return nil, live, err
	}
	return dry, live, nil
}

// forceConflicts reports whether applying may take fields from other managers: when the
// user opted in, or when no other manager of live used server-side apply. Fields another
// manager set with a plain update (kubectl edit, kubectl scale, a client-side script) are
// drift and are taken back (I7); fields another apply manager owns are its own, and a
// conflict with it is reported, not overridden (I11).
func (r *applyRun) forceConflicts(live *unstructured.Unstructured) bool {
	if r.opts.ForceConflicts || live == nil {
		return r.opts.ForceConflicts
	}
	for _, mf := range live.GetManagedFields() {
		if mf.Operation == metav1.ManagedFieldsOperationApply && mf.Manager != r.fieldManager() && mf.Subresource == "" {
			return false
		}
	}
	return true
}

// forced reports whether it may be recreated on an immutable-field change.
func (r *applyRun) forced(it *item, live *unstructured.Unstructured) bool {
	return r.opts.Force || it.obj.GetAnnotations()[ForceAnnotation] == ForceEnabled ||
		live.GetAnnotations()[ForceAnnotation] == ForceEnabled
}

// resourceVersion is u's resourceVersion, "" for no object.
func resourceVersion(u *unstructured.Unstructured) string {
	if u == nil {
		return ""
	}
	return u.GetResourceVersion()
}

// failed marks out failed with err, prefixed with the object ID.
func failed(out outcome, err error) outcome {
	out.change.Action = ActionFailed
	out.change.Message = err.Error()
	out.change.Err = fmt.Errorf("%s: apply: %w", out.change.describe(), err)
	out.ready = false
	return out
}

// fieldManager is the field manager of the run: ApplyOptions.FieldManager or FieldManager.
func (r *applyRun) fieldManager() string {
	if r.opts.FieldManager != "" {
		return r.opts.FieldManager
	}
	return FieldManager
}

// drifted reports whether the server's dry-run result differs from the live object in
// labels, annotations or anything outside metadata and status (the comparison of
// fluxcd/pkg/ssa). Equal means applying would change nothing, so nothing is sent (I7).
func drifted(live, dry *unstructured.Unstructured) bool {
	if !equality.Semantic.DeepEqual(live.GetLabels(), dry.GetLabels()) ||
		!equality.Semantic.DeepEqual(live.GetAnnotations(), dry.GetAnnotations()) {
		return true
	}
	return !equality.Semantic.DeepEqual(bodyOf(live).Object, bodyOf(dry).Object)
}

// bodyOf returns a copy of u without metadata and status, normalized like ssa does.
func bodyOf(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata")
	unstructured.RemoveNestedField(c.Object, "status")
	if err := normalize.DryRunUnstructured(c); err != nil {
		return u
	}
	return c
}
