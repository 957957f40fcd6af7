package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/fluxcd/pkg/ssa/normalize"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
	out = outcome{change: Change{ID: it.key, Object: it.id}, track: true}
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
	live, listed := r.listed(it.id, viaCache, cached)
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
	out.change.Err = fmt.Errorf("%s: apply: %w", out.change.ID, err)
	out.ready = false
	return out
}

// get reads the live object of u from the API server; nil when it does not exist.
func (e *Engine) get(ctx context.Context, u *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(u.GroupVersionKind())
	err := e.client.Get(ctx, client.ObjectKeyFromObject(u), live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return live, nil
}

// fieldManager is the field manager of the run: ApplyOptions.FieldManager or FieldManager.
func (r *applyRun) fieldManager() string {
	if r.opts.FieldManager != "" {
		return r.opts.FieldManager
	}
	return FieldManager
}

// apply server-side applies u for real with field manager manager, taking conflicting
// fields when force, and returns the server's answer as metadata only: the engine keeps only
// the resourceVersion and UID of an apply, and a metadata answer (protobuf) costs the API
// server and the engine a fraction of the full object's JSON. u is not modified; it never
// carries a resourceVersion (prepare strips it), so the apply is not an optimistic-lock
// write.
func (e *Engine) apply(ctx context.Context, u *unstructured.Unstructured, manager string, force bool) (*metav1.PartialObjectMetadata, error) {
	gvk := u.GroupVersionKind()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	mc, err := e.meta.forResource(m.Resource)
	if err != nil {
		return nil, err
	}
	var ri metadata.ResourceInterface = mc.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = mc.Resource(m.Resource).Namespace(u.GetNamespace())
	}
	return ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: manager, Force: &force})
}

// metadataClients are the metadata clients of the applies, one per resource: each has its
// own client-side rate limiter (the config's QPS and Burst), as controller-runtime gives each
// kind its own client. One shared client would hold every kind to a single kind's budget.
type metadataClients struct {
	cfg        *rest.Config
	httpClient *http.Client
	mu         sync.Mutex
	clients    map[schema.GroupVersionResource]metadata.Interface
}

// forResource returns the metadata client of gvr, made on first use.
func (m *metadataClients) forResource(gvr schema.GroupVersionResource) (metadata.Interface, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.clients[gvr]; ok {
		return c, nil
	}
	c, err := metadata.NewForConfigAndClient(m.cfg, m.httpClient)
	if err != nil {
		return nil, fmt.Errorf("metadata client for %s: %w", gvr, err)
	}
	if m.clients == nil {
		m.clients = map[schema.GroupVersionResource]metadata.Interface{}
	}
	m.clients[gvr] = c
	return c, nil
}

// serverSideApply applies u with field manager manager; u becomes the server's full answer
// (used for dry-runs, whose answer is compared with the live object).
func (e *Engine) serverSideApply(ctx context.Context, u *unstructured.Unstructured, manager string, dryRun, force bool) error {
	opts := []client.ApplyOption{client.FieldOwner(manager)}
	if force {
		opts = append(opts, client.ForceOwnership)
	}
	if dryRun {
		opts = append(opts, client.DryRunAll)
	}
	return e.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), opts...)
}

// recreate deletes live with a UID precondition and waits until it is gone, so it can be
// created again with the changed immutable fields.
func (e *Engine) recreate(ctx context.Context, live *unstructured.Unstructured, timeout time.Duration) error {
	uid := live.GetUID()
	err := e.client.Delete(ctx, live, client.Preconditions{UID: &uid},
		client.PropagationPolicy(metav1.DeletePropagationBackground))
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("recreate: delete: %w", err)
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		cur, err := e.get(ctx, live)
		if err != nil {
			return false, err
		}
		return cur == nil || cur.GetUID() != uid, nil
	})
	if err != nil {
		return fmt.Errorf("recreate: wait for deletion: %w", err)
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
