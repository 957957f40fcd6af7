package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// DeleteOptions are the per-call settings of Delete and of Abandon. Both carry out a
// deletion policy (Delete, Orphan) over the same inventory in the same way, one deleting
// each object and the other releasing it: the same bound on requests in flight, the same
// recovery copy for a lost ConfigMap. A setting that only one of them could use would earn
// the other its own type again.
type DeleteOptions struct {
	// Concurrency bounds the deletes (Abandon: the patches) in flight. Zero or less means 1.
	Concurrency int
	// Recover reads a copy of the inventory kept elsewhere (the Sync status), only when
	// the inventory ConfigMap does not exist. See inventory's doc.
	Recover Recovery
}

// DefaultDeleteOptions deletes (or releases) 8 objects at a time.
func DefaultDeleteOptions() DeleteOptions {
	return DeleteOptions{Concurrency: 8}
}

// Delete deletes every object of the inventory of ref that is still ours (owns)
// with the recorded UID (I1), in reverse apply order (pruneOrder: by kind, then wave and
// depends-on), one group at a time. After each group it records the confirmed deletions in
// the inventory, so a crash resumes where it stopped; it stops at a group with a failed
// delete, whose objects stay in the inventory (I3). It deletes the inventory ConfigMap once
// the inventory is empty (I12).
//
// When the ConfigMap does not exist, it deletes what opts.Recover lists instead, with the
// same checks, and writes no ConfigMap: the copy stays where the caller keeps it until
// Delete succeeds (a terminating namespace refuses a new ConfigMap anyway).
func (e *Engine) Delete(ctx context.Context, ref inventory.Ref, opts DeleteOptions) (*Result, error) {
	res := &Result{}
	e.forgetHead(ref) // written from here on
	e.quiet.drop(ref.ID)
	e.ignoredFields().drop(ref.ID)
	inv, claim, err := e.loadValid(ctx, ref, opts.Recover)
	if err != nil {
		return res, err
	}
	pc := pruneCall{ref: ref, claim: claim, concurrency: opts.Concurrency, deleted: new(atomic.Int64), removing: true}
	stages, known := e.pruneOrder(ctx, pc, inv.Entries())
	pc.known = known
	for _, stage := range stages {
		pr := e.pruneStage(ctx, pc, stage)
		res.Pruned = append(res.Pruned, pr.changes...)
		if pr.abort != nil {
			return res, errors.Join(append(pr.errs, pr.abort)...)
		}
		for _, id := range pr.dropped {
			inv.Remove(id)
		}
		if len(pr.dropped) > 0 && claim.Found {
			inv, err = e.store.Update(ctx, ref, func(s *inventory.Inventory) *inventory.Inventory {
				n := s.Clone()
				for _, id := range pr.dropped {
					n.Remove(id)
				}
				return n
			})
			if err != nil {
				return res, errors.Join(append(pr.errs, err)...)
			}
		}
		if len(pr.errs) > 0 {
			return res, errors.Join(pr.errs...)
		}
	}
	if inv.Len() > 0 {
		// Every entry read was deleted or dropped, or the stage returned: these were added
		// since by another writer (objects created under this inventory). A conflict, as
		// the inventory's delete gives for the same change: the caller reads it again.
		return res, fmt.Errorf("inventory %s: %w: %w", ref, ErrInventoryChanged, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, ref.Name,
			fmt.Errorf("%d objects still tracked, added while it was deleted; read it again", inv.Len())))
	}
	if !claim.Found {
		return res, nil
	}
	// Only while it is still empty: an entry added since the last Update (an object created
	// under this inventory by another writer) is deleted by the caller's retry, not lost.
	if err := e.store.Delete(ctx, ref, inventory.DeleteOptions{Expect: inv}); err != nil {
		return res, inventoryChanged(err)
	}
	e.forgetMigration(ref.ID) // a set recreated under this ID starts over
	return res, nil
}

// ErrInventoryChanged is wrapped by the error of a Delete or Abandon that found entries
// added to the inventory after it read it (another writer created objects under it): it
// deleted or released nothing of them and kept the inventory. The caller reads it again and
// retries (the daemon's finalizer requeues; `converge uninstall` retries a few times). The
// error is also a conflict (apierrors.IsConflict).
var ErrInventoryChanged = errors.New("the inventory changed while it was deleted")

// inventoryChanged marks the conflict of the inventory's own delete (inventory.Store.Delete:
// the head changed since it was read) as ErrInventoryChanged.
func inventoryChanged(err error) error {
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %w", ErrInventoryChanged, err)
	}
	return err
}

// pruneResult is the outcome of deleting a list of inventory entries.
type pruneResult struct {
	changes []Change
	dropped []object.ObjMetadata // to remove from the inventory: deleted, gone, or not ours
	errs    []error              // failed deletes; their entries stay in the inventory (I3)
	abort   error                // a hook aborted the run
}

// pruneCall is the settings of one prune or Delete.
type pruneCall struct {
	ref         inventory.Ref
	claim       inventory.Claim // which live objects are ours
	dryRun      bool
	concurrency int
	deleted     *atomic.Int64 // successful deletes so far, for Hooks.AfterPrune
	progress    *progress     // nil: no progress reports
	// removing says the whole inventory goes (Delete): a contested entry is given up
	// (dropped, left as it is for the other inventory of the legacy ID), as the person who
	// deleted the set gave up everything it listed. An Apply's prune keeps it.
	removing bool
	// known are the candidates pruneOrder read from the API server (no watch cache): each
	// is decided on that read first (fromKnown).
	known map[object.ObjMetadata]*metav1.PartialObjectMetadata
}

// prune deletes candidates in reverse apply order (pruneOrder: by kind, then by wave and
// depends-on), one group after another, stopping after a group with a failed delete (a
// Namespace must not take down what we were denied to delete).
func (e *Engine) prune(ctx context.Context, pc pruneCall, candidates []inventory.Entry) pruneResult {
	var all pruneResult
	pc.progress.stage(StagePrune, len(candidates))
	stages, known := e.pruneOrder(ctx, pc, candidates)
	pc.known = known
	for _, stage := range stages {
		pr := e.pruneStage(ctx, pc, stage)
		all.changes = append(all.changes, pr.changes...)
		all.dropped = append(all.dropped, pr.dropped...)
		all.errs = append(all.errs, pr.errs...)
		if pr.abort != nil || len(pr.errs) > 0 {
			all.abort = pr.abort
			break
		}
	}
	return all
}

// pruneStages groups entries (sorted) by pruneRank, lowest rank first.
func pruneStages(entries []inventory.Entry) [][]inventory.Entry {
	var byRank [5][]inventory.Entry
	for _, en := range entries {
		r := pruneRank(en.Object.GroupKind)
		byRank[r] = append(byRank[r], en)
	}
	var out [][]inventory.Entry
	for _, s := range byRank {
		if len(s) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// pruneStage deletes entries in parallel with bounded concurrency.
func (e *Engine) pruneStage(ctx context.Context, pc pruneCall, entries []inventory.Entry) pruneResult {
	type one struct {
		change Change
		drop   bool
	}
	outs := make([]one, len(entries))
	var abort atomic.Pointer[error]
	var g errgroup.Group // workers never fail: errors go into outs
	g.SetLimit(max(pc.concurrency, 1))
	for i, en := range entries {
		g.Go(func() error {
			if abort.Load() != nil { // a crash point fired: no further deletes
				outs[i].change = Change{ID: en.Object.String(), Object: en.Object, Action: ActionSkipped, Message: "aborted"}
				return nil
			}
			c, dropped := e.pruneOne(ctx, pc, en)
			outs[i] = one{change: c, drop: dropped}
			pc.progress.step()
			if c.Action == ActionPruned && !pc.dryRun && e.opts.Hooks.AfterPrune != nil {
				j := int(pc.deleted.Add(1))
				if err := e.opts.Hooks.AfterPrune(j, c.ID); err != nil {
					err = fmt.Errorf("aborted by hook after prune %d (%s): %w", j, c.ID, err)
					abort.CompareAndSwap(nil, &err)
				}
			}
			return nil
		})
	}
	_ = g.Wait()
	var pr pruneResult
	for _, o := range outs {
		pr.changes = append(pr.changes, o.change)
		if o.drop {
			pr.dropped = append(pr.dropped, o.change.Object)
		}
		if o.change.Err != nil {
			pr.errs = append(pr.errs, o.change.Err)
		}
	}
	if p := abort.Load(); p != nil {
		pr.abort = *p
	}
	return pr
}

// pruneOne deletes one inventory entry if it is still ours: it exists, its owner annotation
// makes it ours (owns: our ID, or the legacy ID of a migration under way with the
// recorded UID), it has no prune-disabled annotation, and its UID is the one we recorded
// (I1).
// dropped says whether the entry leaves the inventory; a failed delete keeps it (I3).
//
// With the watch cache the object is read from the cache and deleted with a resourceVersion
// precondition too, so the delete lands only on exactly what was checked: one request in the
// common case. A stale cache costs a conflict and a retry from the API server; a cached
// "not found" is confirmed with the API server before the entry is dropped (I2).
//
// An entry that leaves the inventory leaves the memo too: the cache may still show the
// deleted copy at the very resourceVersion the memo recorded, and an object declared again
// must then be applied, not found unchanged.
func (e *Engine) pruneOne(ctx context.Context, pc pruneCall, en inventory.Entry) (c Change, dropped bool) {
	defer func() {
		if dropped && e.memo != nil {
			e.memo.forget(en.Object)
		}
	}()
	first := fromServer
	switch {
	case e.cache != nil:
		first = fromCache
	case pc.known[en.Object] != nil:
		first = fromKnown
	}
	if first != fromServer {
		c, v := e.pruneOneFrom(ctx, first, pc, en)
		if v != askServer {
			return c, v == drop
		}
	}
	c, v := e.pruneOneFrom(ctx, fromServer, pc, en)
	return c, v == drop
}

// source is where pruneOneFrom reads the object it decides on.
type source int

const (
	fromServer source = iota // the API server (uncached client)
	fromCache                // the watch cache: one DELETE with a resourceVersion precondition
	// fromKnown: pruneOrder's read from the API server, made before the prune's first delete;
	// decided on as a cached read is (a DELETE with a resourceVersion precondition, the API
	// server asked again on any doubt), since the object may have changed since.
	fromKnown
)

// verdict is what pruneOneFrom decided about an inventory entry.
type verdict int

const (
	keep      verdict = iota // the entry stays in the inventory: a failed delete (I3), a dry-run
	drop                     // the entry leaves the inventory: deleted, gone, or not ours
	askServer                // the cached view cannot decide: read the API server (fromCache only)
)

// pruneOneFrom is pruneOne reading from src. From the cache (or pruneOrder's earlier read),
// it answers askServer when that view was not found, out of date, or would drop the entry:
// an entry leaves the inventory only on the API server's word.
func (e *Engine) pruneOneFrom(ctx context.Context, src source, pc pruneCall, en inventory.Entry) (c Change, v verdict) {
	claim, cached := pc.claim, src != fromServer
	var reader client.Reader = e.client
	if src == fromCache {
		reader = e.cache
	}
	c = Change{ID: en.Object.String(), Object: en.Object, Action: ActionSkipped}
	log := logr.FromContextOrDiscard(ctx).WithValues("object", c.ID)
	live, err := pc.known[en.Object], error(nil)
	if src != fromKnown {
		live, err = e.getByID(ctx, reader, en.Object)
	}
	if cached && (err != nil || live == nil) {
		return c, askServer
	}
	if err != nil {
		c.Action, c.Message = ActionFailed, err.Error()
		c.Err = fmt.Errorf("%s: prune: %w", c.describe(), err)
		return c, keep
	}
	if live == nil {
		c.Message = "already deleted"
		return c, drop
	}
	uid := live.GetUID()
	owner := live.GetAnnotations()[OwnerAnnotation]
	ours := owns(claim, en.Object, owner, uid, en.UID)
	kept := pc.keptBy(live.GetAnnotations())
	if cached && (!ours || kept != "" ||
		(en.UID != "" && en.UID != uid) || live.GetDeletionTimestamp() != nil) {
		return c, askServer // an entry leaves the inventory only on the API server's word
	}
	switch {
	case !ours && claim.Migration.Contested(en.Object, owner):
		return pruneContested(c, claim.Migration, owner, pc.removing)
	case !ours:
		c.Message = fmt.Sprintf("not deleted: owning-inventory annotation is %q, not %q; dropped from the inventory",
			owner, claim.ID)
		return c, drop
	case kept != "":
		c.Message = "not deleted: prune disabled by annotation " + kept + "; dropped from the inventory"
		return c, drop
	case en.UID != "" && en.UID != uid:
		c.Message = fmt.Sprintf("not deleted: recreated by someone else (UID %s, recorded %s); dropped from the inventory", uid, en.UID)
		return c, drop
	case live.GetDeletionTimestamp() != nil:
		c.Action, c.Message = ActionPruned, "already terminating"
		return c, drop
	case pc.dryRun:
		c.Action, c.Message = ActionPruned, "would prune"
		return c, keep
	}
	pre := client.Preconditions{UID: &uid}
	if cached {
		rv := live.GetResourceVersion()
		pre.ResourceVersion = &rv
	}
	// Deleted through an unstructured shell: the client decodes a delete's answer with its
	// scheme for other types, which knows neither CRDs nor custom resources.
	target := &unstructured.Unstructured{}
	target.SetGroupVersionKind(live.GroupVersionKind())
	target.SetNamespace(live.GetNamespace())
	target.SetName(live.GetName())
	err = e.client.Delete(ctx, target, pre, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case cached && (apierrors.IsConflict(err) || apierrors.IsNotFound(err)):
		return c, askServer
	case err == nil:
		c.Action = ActionPruned
		log.V(1).Info("pruned")
		return c, drop
	case apierrors.IsNotFound(err):
		c.Message = "already deleted"
		return c, drop
	case apierrors.IsConflict(err):
		return e.afterDeleteConflict(ctx, claim, en, uid, c, err)
	default:
		c.Action, c.Message = ActionFailed, err.Error()
		c.Err = fmt.Errorf("%s: prune: %w", c.describe(), err)
		return c, keep
	}
}

// keptBy names the annotation that keeps an object with annotations ann from this prune, or
// from the set's deletion (removing); "" when none does.
func (pc pruneCall) keptBy(ann map[string]string) string {
	if pc.removing {
		return objectAnnotations(ann).keepOnDelete()
	}
	return objectAnnotations(ann).keepOnPrune()
}

// afterDeleteConflict decides what a 409 on a UID-precondition delete means by reading the
// object again: an entry leaves the inventory only when the API server shows the object gone,
// replaced (another UID) or no longer ours; otherwise the delete failed and the entry stays
// for the next run (I2, I3). A status code alone never drops an entry.
func (e *Engine) afterDeleteConflict(ctx context.Context, claim inventory.Claim, en inventory.Entry, uid types.UID,
	c Change, delErr error) (Change, verdict) {
	cur, err := e.getByID(ctx, e.client, en.Object)
	switch {
	case err != nil:
		c.Action, c.Message = ActionFailed, delErr.Error()
		c.Err = fmt.Errorf("%s: prune: %w", c.describe(), delErr)
		return c, keep
	case cur == nil:
		c.Message = "already deleted"
		return c, drop
	case cur.GetUID() != uid:
		c.Message = "not deleted: UID precondition failed (recreated by someone else); dropped from the inventory"
		return c, drop
	case !owns(claim, en.Object, cur.GetAnnotations()[OwnerAnnotation], cur.GetUID(), en.UID):
		c.Message = "not deleted: no longer carries our owning-inventory annotation; dropped from the inventory"
		return c, drop
	}
	c.Action, c.Message = ActionFailed, delErr.Error()
	c.Err = fmt.Errorf("%s: prune: %w", c.describe(), delErr)
	return c, keep
}

// getByID reads the metadata of the object id names (all a prune decides on); nil when it
// does not exist or its kind is not served any more.
func (e *Engine) getByID(ctx context.Context, reader client.Reader, id object.ObjMetadata) (*metav1.PartialObjectMetadata, error) {
	m, err := e.mapper.RESTMapping(id.GroupKind)
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(m.GroupVersionKind)
	err = reader.Get(ctx, client.ObjectKey{Namespace: id.Namespace, Name: id.Name}, live)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return live, nil
}
