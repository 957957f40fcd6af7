package engine

import (
	"context"
	"fmt"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// Messages of dry-run shortcuts.
const (
	msgCRDPending       = "CRD not yet installed; server-side dry-run skipped"
	msgNamespacePending = "namespace not yet created; server-side dry-run skipped"
	msgWouldRecreate    = "immutable field changed; would delete and recreate the object"
)

// applyOne applies one item: ownership check (I11), the judgment of the live object's
// managedFields (appliedAsDesired) or else a server-side dry-run and drift check, and the
// apply itself when the object drifted. Object failures go into the outcome; the error
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
	case it.skip:
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
	for attempt := 1; ; attempt++ {
		if !listed {
			if live, err = r.e.get(ctx, it.obj); err != nil {
				return failed(out, err), nil
			}
		}
		o, stale, err := r.applyLive(ctx, it, live, listed, out)
		if !stale || attempt == maxAttempts {
			return o, err
		}
		listed = false // changed since it was read: read it again
	}
}

// maxAttempts bounds how often applyOne reads an object again because it changed (was
// created, replaced or updated) between the read and the write; the last attempt's failure
// is reported (a transient conflict: the next run tries again).
const maxAttempts = 3

// applyLive is the full path of applyOne, given the live object (nil: it does not exist),
// read with a GET or listed by the survey. stale reports that the object changed since it
// was read (a listed object since the LIST, as the dry-run started from a newer
// resourceVersion; any object, as a write's precondition failed): the caller reads it again.
// When stale, the outcome is the failure to report if no attempt is left.
func (r *applyRun) applyLive(ctx context.Context, it *item, live *unstructured.Unstructured, listed bool,
	out outcome) (_ outcome, stale bool, _ error) {
	if live != nil {
		if r.ref.ID == "" {
			// A dry-run without inventory: diff the object with its owner as it is.
			out.change.Message = ownerInfo(it, live, r.fieldManager())
		} else if err := r.mayTakeOver(ctx, it, live); err != nil {
			// Another's, on the API server's word: not ours to track or prune (legacy.go).
			out.track, out.uid = r.untracked(it, live)
			return failed(out, err), false, nil
		}
		out.uid = live.GetUID()
		if !r.opts.DryRun && appliedAsDesired(it.obj, live, r.fieldManager()) {
			// Our last apply of this very object is still what the object holds (its
			// managedFields say so): applying would change nothing, so no dry-run is sent. A
			// DryRun still asks the server, whose exact answer is what it shows.
			out.change.Action, out.ready, out.rv, out.generation = ActionUnchanged, true, live.GetResourceVersion(), live.GetGeneration()
			return out, false, nil
		}
	}
	if live == nil && !r.opts.DryRun && !r.opts.Diff {
		// The API server just said the object does not exist: a dry-run could only answer
		// "created", so apply at once (one request instead of two per new object).
		out.change.Action = ActionCreated
		return r.send(ctx, it, nil, out)
	}
	dry, live, err := r.dryRun(ctx, it, live)
	if err != nil {
		return failed(out, err), isPreconditionFailed(err), nil
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
		out.change.Action, out.ready, out.rv, out.generation = ActionUnchanged, true, live.GetResourceVersion(), live.GetGeneration()
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
	return r.send(ctx, it, live, out)
}

// mayTakeOver returns why the run may not apply it over live, read from the API server: live
// belongs to another inventory (ErrNotOwned), or carries no owner annotation while another
// tool manages it and the run may not adopt (ErrNotAdopted). See adopt.go.
func (r *applyRun) mayTakeOver(ctx context.Context, it *item, live *unstructured.Unstructured) error {
	owner := live.GetAnnotations()[OwnerAnnotation]
	switch {
	case owner != "" && owns(r.claim, it.id, owner, live.GetUID(), r.old.UID(it.id)):
		return nil
	case owner != "" && owner == r.ref.Legacy:
		return r.mayTakeOverLegacy(ctx, it, owner)
	case owner != "": // I11: never adopt an object another inventory owns
		return terminal(&NotOwnedError{Object: Describe(it.id), Owner: owner})
	case owner == "" && !r.opts.Adopt && !r.recorded(it.id, live):
		if m := foreignManager(live, r.fieldManager()); m != "" {
			return terminal(fmt.Errorf("%w: %s has no %s annotation and %s manages it; allow adoption (Sync spec.adopt, converge apply --adopt) to take it over",
				ErrNotAdopted, Describe(it.id), OwnerAnnotation, m))
		}
	}
	return nil
}

// ownerInfo says who owns live, for a plain diff (no inventory): the inventory its owner
// annotation names, kept on the desired copy so the diff shows no change there, or the
// tool that manages it; "" when nobody does.
func ownerInfo(it *item, live *unstructured.Unstructured, manager string) string {
	if owner := live.GetAnnotations()[OwnerAnnotation]; owner != "" {
		keepOwner(it.obj, owner)
		return "owned by " + inventory.Describe(owner)
	}
	if m := foreignManager(live, manager); m != "" {
		return "managed by " + m
	}
	return ""
}

// recorded reports whether live is the very object the stored inventory recorded (its UID):
// ours already, even if someone removed our owner annotation since (the apply puts it back).
// A recovered copy (ApplyOptions.Recover) records nothing here: it would let whoever can
// write a Sync's status skip spec.adopt.
func (r *applyRun) recorded(id object.ObjMetadata, live *unstructured.Unstructured) bool {
	return r.claim.Recorded(live.GetUID(), r.old.UID(id))
}

// send applies it for real over live (nil: a create), on the condition that the object is
// still the one read (precondition), and runs the AfterApply crash point. stale reports
// that it was not: created, deleted or replaced since the read.
func (r *applyRun) send(ctx context.Context, it *item, live *unstructured.Unstructured, out outcome) (_ outcome, stale bool, _ error) {
	if err := r.gate.pass(ctx); err != nil {
		return failed(out, err), false, err
	}
	pre := precondition{absent: true}
	if live != nil {
		pre = precondition{uid: live.GetUID()}
	}
	applied, err := r.e.apply(ctx, it.obj, applyAs{manager: r.fieldManager(), force: r.forceConflicts(live)}, pre)
	if err != nil {
		// A create that meets an existing object conflicts, on its field managers or its
		// precondition: either way the object must be read (and its owner checked) again.
		changed := isPreconditionFailed(err) || pre.absent && apierrors.IsConflict(err)
		return failed(out, err), changed, nil
	}
	o, err := r.sent(it, applied, out)
	return o, false, err
}

// sent records that applied is the server's answer to the apply of it and runs the
// AfterApply crash point.
func (r *applyRun) sent(it *item, applied metav1.Object, out outcome) (outcome, error) {
	out.uid, out.ready, out.rv, out.generation = applied.GetUID(), true, applied.GetResourceVersion(), applied.GetGeneration()
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
//     restart the survey has listed it; its managedFields usually spare the dry-run, see
//     appliedAsDesired).
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
	m, known := r.memoOf(it)
	if !it.stored && !known {
		// New, and not listed (alone of its kind in its namespace): the full path reads it
		// with a GET, which the cache could not spare, and reading the cache would start (and
		// wait for) its kind's informer in the middle of the run.
		return out, nil, false, nil
	}
	cached, err := r.e.cache.cachedLive(ctx, it.gvk, client.ObjectKey{Namespace: it.id.Namespace, Name: it.id.Name})
	switch {
	case err != nil:
		return out, nil, false, nil
	case cached == nil: // the API server has not confirmed it (I11: no adoption on a stale cache)
		return out, nil, false, nil
	case cached.GetAnnotations()[OwnerAnnotation] != r.ref.ID:
		return out, cached, false, nil
	case known && m.hit(hash, cached.GetResourceVersion()):
		out.change.Action, out.uid, out.ready, out.rv = ActionUnchanged, cached.GetUID(), true, cached.GetResourceVersion()
		out.generation = cached.GetGeneration()
		return out, cached, true, nil
	case known && m.hash != hash:
		out.change.Action = ActionConfigured
	default:
		return out, cached, false, nil
	}
	return r.fromCacheApply(ctx, it, cached, out)
}

// fromCacheApply is fromCache's apply of it, over cached (nil: a new object).
// Its apply lands only on the object the cache showed (its UID), or creates one that the
// survey listed as missing (precondition): a cache that missed a delete and a recreate by
// another set, or an object created since the survey, fails the apply, and the full path
// reads the object and checks its owner on the API server's word (I11).
func (r *applyRun) fromCacheApply(ctx context.Context, it *item, cached *metav1.PartialObjectMetadata, out outcome) (
	outcome, *metav1.PartialObjectMetadata, bool, error) {
	if err := r.gate.pass(ctx); err != nil {
		return failed(out, err), cached, true, err
	}
	pre := precondition{absent: true}
	if cached != nil {
		pre = precondition{uid: cached.GetUID()}
	}
	applied, err := r.e.apply(ctx, it.obj, applyAs{manager: r.fieldManager(), force: r.opts.ForceConflicts}, pre)
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
// object when the run did not establish it. What the memo already holds (a no-op) is not
// written again.
func (r *applyRun) remember(it *item, hash [32]byte, out outcome) {
	if out.rv == "" || out.change.Action == ActionFailed {
		r.e.memo.forget(it.id)
		return
	}
	if m, known := r.memoOf(it); known && m == (memoEntry{hash: hash, resourceVersion: out.rv}) {
		return
	}
	r.e.memo.remember(it.id, hash, out.rv)
}

// memoOf returns what the memo recorded of it when the run first asked: once per item,
// since the survey and the watch path both ask, and each lookup in a map of 50,000 objects
// costs a few cache misses. An entry read early is as safe to decide on as one read later:
// it is only ever a true record (this desired object left the live object at that
// resourceVersion), and a hit also needs the watch cache to show that very resourceVersion
// now. Each item is handled by one goroutine at a time (the stage's survey, then its apply).
func (r *applyRun) memoOf(it *item) (memoEntry, bool) {
	if r.e.memo == nil {
		return memoEntry{}, false
	}
	if !it.memoRead {
		it.memo, it.memoKnown = r.e.memo.get(it.id)
		it.memoRead = true
	}
	return it.memo, it.memoKnown
}

// memoKnows reports whether the memo has an entry for it (memoOf).
func (r *applyRun) memoKnows(it *item) bool {
	_, known := r.memoOf(it)
	return known
}

// dryRun server-side dry-runs it. On an immutable-field rejection it recreates the object
// when forced (deleting live, which becomes nil), or fails with how to opt in. A nil dry
// result without error means a DryRun shortcut: the object cannot be dry-run yet (its
// namespace is created by the same set) or would be recreated.
func (r *applyRun) dryRun(ctx context.Context, it *item, live *unstructured.Unstructured) (
	*unstructured.Unstructured, *unstructured.Unstructured, error) {
	dry := it.obj.DeepCopy()
	force := r.forceConflicts(live)
	err := r.e.dryRunApply(ctx, dry, applyAs{manager: r.fieldManager(), force: force})
	if err != nil && live != nil && isImmutable(err) {
		if !r.forced(it, live) {
			return nil, live, terminal(fmt.Errorf("immutable field changed; set annotation %s: %s on the object or ApplyOptions.Force to recreate it: %w",
				ForceAnnotation, ForceEnabled, err))
		}
		if why := r.notOursToRecreate(it.id, live); why != "" { // I1: force deletes only what is ours
			return nil, live, terminal(fmt.Errorf("immutable field changed; not recreated: %s: %w", why, err))
		}
		if r.opts.DryRun {
			return nil, live, nil
		}
		if err := r.gate.pass(ctx); err != nil {
			return nil, live, err
		}
		if err := r.e.recreate(ctx, live, r.opts.Timeout); err != nil {
			return nil, live, err
		}
		live = nil
		dry = it.obj.DeepCopy()
		err = r.e.dryRunApply(ctx, dry, applyAs{manager: r.fieldManager()})
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
	return r.opts.Force || it.annotation(ForceAnnotation) == ForceEnabled ||
		live.GetAnnotations()[ForceAnnotation] == ForceEnabled
}

// keepOwner sets the owner annotation of obj (the run's own copy of its metadata) to owner.
func keepOwner(obj *unstructured.Unstructured, owner string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[OwnerAnnotation] = owner
	obj.SetAnnotations(ann)
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
	err = readable(err)
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
