package engine

import (
	"bytes"
	"context"
	"fmt"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/converge-dev/converge/inventory"
)

// Messages of dry-run shortcuts.
const (
	msgCRDPending       = "CRD not yet installed; server-side dry-run skipped"
	msgNamespacePending = "namespace not yet created; server-side dry-run skipped"
	msgWouldRecreate    = "immutable field changed; would delete and recreate the object"
	msgRegained         = "fields another manager had taken are Converge's again (their values were already the source's)"
)

// maxAttempts bounds how often applyOne reads an object from the API server because it
// changed (was created, replaced or updated) between the read and the write; the last
// attempt's failure is reported (a transient conflict: the next run tries again). The
// memo's decision (fromMemo) read nothing, so it is no attempt.
const maxAttempts = 3

// applyOne applies one item in the four steps of fluxcd/pkg/ssa: get the live object (the
// run's live view), judge whether an apply would change it (ownership, then the memo,
// managedFields or a server-side dry-run), apply it when it would, and record the outcome.
// An object that changed between the read and the write is read again. Object failures go
// into the outcome; the error is non-nil only when a hook aborts the run.
func (r *applyRun) applyOne(ctx context.Context, it *item) (outcome, error) {
	out := outcome{change: Change{ID: it.key, Object: it.id, Origin: it.origin}, track: true}
	if _, err := it.object(); err != nil { // a set given as JSON: decoded for this step alone
		return failed(out, err), nil
	}
	defer r.release(it)
	if o, done := r.unread(it, out); done {
		return o, nil
	}
	var (
		seen     sight
		v        decision
		attempts int
	)
	for {
		var err error
		if seen, err = r.view.get(ctx, it, seen); err != nil { // 1. the live object
			v = decision{out: failed(out, err)}
			break
		}
		if seen.from != fromMemo {
			attempts++
		}
		if v = r.judge(ctx, it, seen, out); v.send { // 2. would an apply change it?
			v = r.apply(ctx, it, seen, v) // 3. apply
		}
		if !v.stale || attempts == maxAttempts {
			break
		}
	}
	if d := v.out.drift; d != nil && !r.opts.Drift.reports(it) {
		d.Corrected = v.out.change.Action != ActionFailed && !r.opts.DryRun
	}
	r.view.record(it, v.out) // 4. record
	return v.out, v.err
}

// unread decides the items that need no read (done): a kind that did not resolve, a dry-run
// of a kind whose CRD is not installed yet, and an object whose reconcile is disabled.
func (r *applyRun) unread(it *item, out outcome) (_ outcome, done bool) {
	switch {
	case it.pendingErr != nil:
		return failed(out, it.pendingErr), true
	case it.policyErr() != nil:
		out.uid = r.old.UID(it.id)
		return failed(out, it.policyErr()), true
	case it.pending && r.opts.DryRun:
		out.change.Action, out.change.Message = ActionCreated, msgCRDPending
		return out, true
	case it.skip != "":
		out.change.Action = ActionSkipped
		out.change.Message = "reconcile disabled by annotation " + it.skip
		if it.skip == SSAAnnotation || it.skip == FluxSSAAnnotation {
			out.change.Message = "apply ignored by annotation " + it.skip + ": " + SSAIgnore
		}
		out.uid, out.track = r.old.UID(it.id), r.old.Has(it.id)
		return out, true
	}
	return out, false
}

// decision is what judging, then applying, one sight of an item came to.
type decision struct {
	out  outcome
	send bool // apply it: it is missing, or differs from what it should be
	// over is the live object the apply lands on (nil: a create); it differs from the
	// sight's when a forced recreate deleted the object.
	over *unstructured.Unstructured
	// stale says the object changed since it was read (or the memo's apply failed): read it
	// again. out is then the failure to report if no attempt is left.
	stale bool
	err   error // a hook aborted the run
}

// judge decides from seen whether an apply of it would change the live object. The memo's
// sight was decided by the watched view. A live object read from the API server is first
// checked for ownership (I11), then trusted as it is when its managedFields show our last
// apply of this very object (appliedAsDesired), else compared with a server-side dry-run.
func (r *applyRun) judge(ctx context.Context, it *item, seen sight, out outcome) decision {
	if seen.from == fromMemo {
		if seen.cached != nil {
			if o, done := livePolicy(it, seen.cached, out); done {
				return decision{out: o}
			}
		}
		out.change.Action = seen.action
		if seen.action == ActionUnchanged {
			return decision{out: unchanged(out, seen.cached)}
		}
		if r.opts.Drift.Detect && seen.action != ActionConfigured {
			// Drift is judged on the API server's word, which names the fields and their
			// managers: read the object (not an attempt, as the memo read nothing). A new
			// desired object over our own (the memo recorded another desired hash: a
			// ConfigMap of postBuild.substituteFrom or a Helm valuesFrom changed, with no new
			// revision) is no drift: it is applied, whatever the drift policy.
			return decision{out: out, stale: true}
		}
		return decision{out: out, send: true}
	}
	live := seen.live
	r.ignore.adjust(it, live) // fields to leave alone take live's values (ignore.go)
	if live == nil && r.opts.Drift.Detect && it.stored {
		out.drift = &DriftedObject{Object: it.id, Origin: it.origin, Missing: true}
		if o, done := r.missing(it, out); done {
			return decision{out: o}
		}
	}
	managed := live // whose managedFields name the managers of drifted fields
	if live != nil {
		var ok bool
		if out, ok = r.checkOwner(ctx, it, live, out); !ok {
			return decision{out: out}
		}
		out.uid = live.GetUID()
		if o, done := livePolicy(it, live, out); done {
			return decision{out: o}
		}
		// When drift is only reported, nothing is written to the object, not even the
		// hand-over of its fields (which would also hide who changed them).
		if !r.opts.Drift.reports(it) {
			patched, stale, err := r.handOver(ctx, it, live)
			if err != nil {
				return decision{out: failed(out, err), stale: stale}
			}
			live, seen.live = patched, patched
		}
		if !r.opts.DryRun && appliedAsDesired(it.obj, live, r.fieldManager()) {
			// Our last apply of this very object is still what the object holds: applying
			// would change nothing, so no dry-run is sent. A DryRun still asks the server,
			// whose exact answer is what it shows.
			return decision{out: unchanged(out, live)}
		}
	}
	if live == nil && !r.opts.DryRun && !r.opts.Diff {
		// The API server just said the object does not exist: a dry-run could only answer
		// "created", so apply at once (one request instead of two per new object).
		out.change.Action = ActionCreated
		return decision{out: out, send: true}
	}
	return r.compare(ctx, it, seen, out, managed)
}

// compare judges it by a server-side dry-run against seen's live object, as fluxcd/pkg/ssa
// does: unchanged when the dry-run's answer does not differ (I7), else created or
// configured, with the diff when asked for. A difference is drift when the run detects it
// (DriftOptions): its fields are named with their managers from managed (live before the
// hand-over of its fields), and it is sent only when the drift is not just reported.
func (r *applyRun) compare(ctx context.Context, it *item, seen sight, out outcome, managed *unstructured.Unstructured) decision {
	dry, live, err := r.dryRun(ctx, it, seen.live)
	if err != nil {
		return decision{out: failed(out, err), stale: isPreconditionFailed(err)}
	}
	if dry == nil { // a dry-run shortcut: created in a namespace the set creates, or a recreate
		out.change.Action, out.change.Message = ActionCreated, msgNamespacePending
		if live != nil {
			out.change.Action, out.change.Message = ActionConfigured, msgWouldRecreate
		}
		if live != nil && r.opts.Drift.reports(it) {
			out.drift = &DriftedObject{Object: it.id, Origin: it.origin}
			return decision{out: reported(out, live, msgWouldRecreate)}
		}
		return decision{out: out}
	}
	// A listed answer is trusted only at the very version the dry-run started from: an
	// object listed as missing must still be missing (a dry-run create has no
	// resourceVersion), and a listed object must not have changed since.
	if seen.from == fromList && dry.GetResourceVersion() != resourceVersion(live) {
		return decision{out: out, stale: true}
	}
	if live != nil && !drifted(live, dry) {
		if r.opts.DryRun || r.opts.Diff || r.opts.Drift.reports(it) || !regains(live, dry, r.fieldManager()) {
			return decision{out: unchanged(out, live)}
		}
		// The values are the source's, but fields it sets belong to another manager (one
		// changed them and set them back): applying makes them Converge's again, so that the
		// next change of them changes Converge's field set, which is what wakes a drift
		// reconcile (fingerprint.go). Once, then the object is as applied. Drift that is only
		// reported writes nothing, this included.
		out.change.Action, out.change.Message = ActionConfigured, msgRegained
		return decision{out: out, send: true, over: live}
	}
	if live != nil && r.opts.Drift.Detect {
		d := &DriftedObject{Object: it.id, Origin: it.origin}
		d.Fields, d.MoreFields = driftOf(it.obj, live, dry, managed, r.fieldManager())
		switch {
		case len(d.Fields) == 0 && r.opts.Drift.reports(it):
			// Only fields the desired object does not set differ: the server changed the
			// object since it was read. Nothing of ours drifted; the next run reads it anew
			// (the memo holds the version read, not the server's).
			return decision{out: unchanged(out, live)}
		case len(d.Fields) == 0: // applied as before, not reported
		case r.opts.Drift.reports(it):
			out.drift = d
			return decision{out: reported(out, live, "")}
		default:
			out.drift = d
		}
	}
	out.change.Action = ActionCreated
	if live != nil {
		out.change.Action = ActionConfigured
	}
	if r.opts.DryRun || r.opts.Diff {
		if out.change.Diff, err = unifiedDiff(it.key, live, dry); err != nil {
			return decision{out: failed(out, err)}
		}
	}
	return decision{out: out, send: !r.opts.DryRun, over: live}
}

// unchanged is out for an object that an apply would not change, verified at live.
func unchanged(out outcome, live metav1.Object) outcome {
	out.change.Action, out.uid, out.ready = ActionUnchanged, live.GetUID(), true
	out.rv, out.generation = live.GetResourceVersion(), live.GetGeneration()
	return out
}

// checkOwner judges whether the run may apply it over live, read from the API server (ok);
// otherwise out is failed, and not ours to track or prune. A run without inventory (a plain
// diff) diffs the object with its owner as it is.
func (r *applyRun) checkOwner(ctx context.Context, it *item, live *unstructured.Unstructured, out outcome) (_ outcome, ok bool) {
	owner := live.GetAnnotations()[OwnerAnnotation]
	switch {
	case r.ref.ID == "":
		out.change.Message = ownerInfo(it, live, r.fieldManager())
		return out, true
	case owner != "" && owner == r.ref.Legacy && !owns(r.claim, it.id, owner, live.GetUID(), r.old.UID(it.id)):
		return r.legacyOwner(ctx, it, owner, out)
	}
	if err := r.mayTakeOver(it, live); err != nil {
		out.track, out.uid = false, ""
		return failed(out, err), false
	}
	return out, true
}

// mayTakeOver returns why the run may not apply it over live, read from the API server: live
// belongs to another inventory (ErrNotOwned), or carries no owner annotation while another
// tool manages it and the run may not adopt (ErrNotAdopted). See adopt.go.
func (r *applyRun) mayTakeOver(it *item, live *unstructured.Unstructured) error {
	owner := live.GetAnnotations()[OwnerAnnotation]
	switch {
	case owner != "" && owns(r.claim, it.id, owner, live.GetUID(), r.old.UID(it.id)):
		return nil
	case owner != "": // I11: never adopt an object another inventory owns
		return terminal(&NotOwnedError{Object: Describe(it.id), Owner: owner})
	case !r.opts.Adopt && !r.recorded(it.id, live):
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

// apply sends the apply v decided, over the object seen showed: the memo's decision
// (applyRecalled) or a judgement on the API server's answer (send).
func (r *applyRun) apply(ctx context.Context, it *item, seen sight, v decision) decision {
	if seen.from == fromMemo {
		return r.applyRecalled(ctx, it, seen.cached, v.out)
	}
	return r.send(ctx, it, v.over, v.out)
}

// send applies it for real over live (nil: a create), on the condition that the object is
// still the one read (precondition), and runs the AfterApply crash point. The decision is
// stale when it was not: created, deleted or replaced since the read.
func (r *applyRun) send(ctx context.Context, it *item, live *unstructured.Unstructured, out outcome) decision {
	if err := r.gate.pass(ctx); err != nil {
		return decision{out: failed(out, err), err: err}
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
		return decision{out: failed(out, err), stale: changed}
	}
	o, err := r.sent(it, applied, out)
	return decision{out: o, err: err}
}

// applyRecalled is the apply of the memo's decision, over cached (nil: a new object). It
// lands only on the object the cache showed (its UID), or creates one that the survey listed
// as missing (precondition): a cache that missed a delete and a recreate by another set, or
// an object created since the survey, fails the apply, and the object is read from the API
// server and its owner checked on its word (I11). It never forces conflicts (unless the run
// opted in): a conflict sends the object to that read too, and the judgement decides whether
// the field was drift or another apply manager's (I7, I11). Any failure is stale.
func (r *applyRun) applyRecalled(ctx context.Context, it *item, cached *metav1.PartialObjectMetadata, out outcome) decision {
	if err := r.gate.pass(ctx); err != nil {
		return decision{out: failed(out, err), err: err}
	}
	pre := precondition{absent: true}
	if cached != nil {
		pre = precondition{uid: cached.GetUID()}
	}
	applied, err := r.e.apply(ctx, it.obj, applyAs{manager: r.fieldManager(), force: r.opts.ForceConflicts}, pre)
	if err == nil {
		applied, err = r.handOverRecalled(ctx, it, applied)
	}
	if err != nil {
		return decision{out: out, stale: true}
	}
	if cached != nil && applied.GetResourceVersion() == cached.GetResourceVersion() {
		out.change.Action = ActionUnchanged // the server had nothing to change
	}
	o, err := r.sent(it, applied, out)
	return decision{out: o, err: err}
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
		if r.opts.DryRun || r.opts.Drift.reports(it) {
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
	return r.opts.Force || it.annotations().forceEnabled() || objectAnnotations(live.GetAnnotations()).forceEnabled()
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

// fieldManager is the field manager of the run (fieldManagerOf).
func (r *applyRun) fieldManager() string {
	return fieldManagerOf(r.opts)
}

// fieldManagerOf is the field manager of a run with opts: ApplyOptions.FieldManager or
// FieldManager.
func fieldManagerOf(opts ApplyOptions) string {
	if opts.FieldManager != "" {
		return opts.FieldManager
	}
	return FieldManager
}

// regains reports whether the apply the dry-run answered gives manager's Apply entry fields
// that live shows another manager owning (not Converge's own updates, such as the owner
// annotation's migration patch). The values may all be equal.
func regains(live, dry *unstructured.Unstructured, manager string) bool {
	before, after := appliedSet(live, manager), appliedSet(dry, manager)
	if bytes.Equal(before, after) {
		return false
	}
	gained := fieldSet(after).Difference(fieldSet(before))
	if gained.Empty() {
		return false
	}
	for _, mf := range live.GetManagedFields() {
		if mf.FieldsV1 != nil && !ownManager(mf.Manager, manager) && !fieldSet(mf.FieldsV1.Raw).Intersection(gained).Empty() {
			return true
		}
	}
	return false
}

// fieldSet reads a managedFields entry's field set; empty when it cannot be read.
func fieldSet(raw []byte) *fieldpath.Set {
	set := &fieldpath.Set{}
	if raw != nil && set.FromJSON(bytes.NewReader(raw)) != nil {
		return &fieldpath.Set{}
	}
	return set
}

// appliedSet is the field set of manager's Apply entry in u's managedFields, nil for none.
func appliedSet(u *unstructured.Unstructured, manager string) []byte {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" && mf.FieldsV1 != nil {
			return mf.FieldsV1.Raw
		}
	}
	return nil
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
