package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// Abandon lets go of every object of the inventory of ref without deleting it, as
// cli-utils does for an abandoned object: it removes our owner annotation from each object
// that is still ours (owns: it carries ref.ID, or ref.Legacy with the
// recorded UID while a migration is under way), then deletes the inventory ConfigMap. Afterwards no
// inventory claims the objects: another set adopts them without an ownership conflict, and
// a set recreated under the same inventory ID starts empty, so it never prunes them.
//
// A scoped engine (Options.Scope) also removes its label from each object it releases
// (releasePatch). Each removal is a JSON patch that first tests the object's UID (the one recorded, else
// the one just read) and the annotation's value, so it never touches an object recreated
// by someone else or taken over by another inventory (the same guard as a delete's, I1).
// The ConfigMap goes last: a crash part-way leaves it in place (I2 holds: every object
// still annotated is still inventoried), and a retry skips the objects already released.
func (e *Engine) Abandon(ctx context.Context, ref inventory.Ref, opts DeleteOptions) (*Result, error) {
	res := &Result{}
	e.forgetHead(ref) // written from here on
	e.quiet.drop(ref.ID)
	e.ignoredFields().drop(ref.ID)
	inv, claim, err := e.loadValid(ctx, ref, opts.Recover)
	if err != nil {
		return res, err
	}
	entries := inv.Entries()
	res.Pruned = make([]Change, len(entries))
	var released atomic.Int64
	var g errgroup.Group // workers never fail: errors go into res.Pruned
	g.SetLimit(max(opts.Concurrency, 1))
	for i, en := range entries {
		g.Go(func() error {
			c, ok := e.abandonOne(ctx, claim, en)
			if ok && e.opts.Hooks.AfterAbandon != nil {
				j := int(released.Add(1))
				if err := e.opts.Hooks.AfterAbandon(j, c.ID); err != nil {
					c.Action, c.Err = ActionFailed, fmt.Errorf("%s: aborted by hook after abandon %d: %w", c.ID, j, err)
					c.Message = c.Err.Error()
				}
			}
			res.Pruned[i] = c
			return nil
		})
	}
	_ = g.Wait()
	var errs []error
	for _, c := range res.Pruned {
		if c.Err != nil {
			errs = append(errs, c.Err)
		}
	}
	if len(errs) > 0 {
		return res, errors.Join(errs...) // the ConfigMap stays: a retry finishes (I2)
	}
	if !claim.Found {
		return res, nil
	}
	// Only while it lists what was released: an entry added since (an object created under
	// this inventory by another writer) is released by the caller's retry, not lost.
	if err := e.store.Delete(ctx, ref, inventory.DeleteOptions{Expect: inv}); err != nil {
		return res, inventoryChanged(err)
	}
	e.forgetMigration(ref.ID) // a set recreated under this ID starts over
	return res, nil
}

// abandonAttempts bounds abandonOne's patches of one object: a patch whose test fails
// because the object changed between the read and the patch (a user's edit of its labels,
// another writer's apply) is built again from a new read.
const abandonAttempts = 3

// abandonOne removes our owner annotation from the object en names, if it is still ours
// (owns: our ID, or the legacy ID of a migration under way with the recorded UID).
// released reports a removal that landed.
func (e *Engine) abandonOne(ctx context.Context, claim inventory.Claim, en inventory.Entry) (c Change, released bool) {
	c = Change{ID: en.Object.String(), Object: en.Object, Action: ActionSkipped}
	fail := func(err error) (Change, bool) {
		c.Action, c.Message, c.Err = ActionFailed, err.Error(), fmt.Errorf("%s: abandon: %w", c.ID, err)
		return c, false
	}
	var perr error
	for range abandonAttempts {
		live, err := e.getByID(ctx, e.client, en.Object)
		switch {
		case err != nil:
			return fail(err)
		case live == nil:
			c.Message = "already deleted"
			return c, false
		case !owns(claim, en.Object, live.GetAnnotations()[OwnerAnnotation], live.GetUID(), en.UID):
			c.Message = "not ours: nothing to release"
			return c, false
		case en.UID != "" && en.UID != live.GetUID():
			c.Message = "recreated by someone else: left alone"
			return c, false
		}
		patch, err := e.releasePatch(live)
		if err != nil {
			return fail(err)
		}
		target := &unstructured.Unstructured{}
		target.SetGroupVersionKind(live.GroupVersionKind())
		target.SetNamespace(live.GetNamespace())
		target.SetName(live.GetName())
		perr = e.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager))
		switch {
		case perr == nil:
			c.Message = "abandoned: owner annotation removed"
			return c, true
		case apierrors.IsNotFound(perr):
			c.Message = "already deleted"
			return c, false
		}
		if !apierrors.IsInvalid(perr) && !apierrors.IsConflict(perr) {
			return fail(perr) // the request failed: the caller's next run tries again
		}
		// A test operation failed: the object changed between the read and the patch
		// (another owner, a recreate, a user's edit of the label). Decide again on what the
		// API server shows now.
	}
	return fail(perr)
}

// releasePatch is the JSON patch that releases live: inventory.OwnerPatch (our owner
// annotation removed, only from this UID and while it still names us) and, for a scoped
// engine, the removal of the scope's label (Options.Scope), which the engine stamped on
// the object when it applied it. The label goes only while it has the scope's value (a
// test operation): a value the user changed, or another shard's, is not the engine's to
// remove. A label changed between the read and the patch fails the whole patch, which
// abandonOne builds again from a new read.
func (e *Engine) releasePatch(live client.Object) ([]byte, error) {
	patch, err := inventory.OwnerPatch(live.GetUID(), live.GetAnnotations()[OwnerAnnotation], "")
	if err != nil {
		return nil, err
	}
	sc := e.opts.Scope
	if sc.Key == "" || live.GetLabels()[sc.Key] != sc.Value {
		return patch, nil
	}
	var ops []map[string]string
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("owner patch: %w", err)
	}
	path := "/metadata/labels/" + inventory.PointerToken(sc.Key)
	ops = append(ops,
		map[string]string{"op": "test", "path": path, "value": sc.Value},
		map[string]string{"op": "remove", "path": path})
	return json.Marshal(ops)
}
