package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/converge-dev/converge/inventory"
)

// legacyOwner judges an object that carries the inventory's legacy ID (inventory.Ref.Legacy)
// without being ours by the claim (the inventory was lost before the upgrade, or someone else
// wrote the annotation): not ours on the annotation's word alone, anyone may write it. When
// the other inventory that shared the legacy ID lists it, it may be that one's: never taken
// over (I11), even with adoption; a person decides. Otherwise adoption takes it (ok).
//
// A refused object keeps the inventory entry it had, with the UID it had: dropping it would
// tell the other inventory of that ID that this one gave it up, and that one's migration
// would take it.
func (r *applyRun) legacyOwner(ctx context.Context, it *item, owner string, out outcome) (_ outcome, ok bool) {
	err := r.legacyRefusal(ctx, it, owner)
	if err == nil {
		return out, true
	}
	out.track, out.uid = r.old.Has(it.id), r.old.UID(it.id)
	return failed(out, err), false
}

// legacyRefusal returns why the run may not take over it, which carries owner, the legacy ID
// (legacyOwner); nil when it may.
func (r *applyRun) legacyRefusal(ctx context.Context, it *item, owner string) error {
	sib, err := r.sibling(ctx)
	if err != nil {
		return err
	}
	if sib.Lists(it.id) {
		return terminal(fmt.Errorf("%w: %w", ErrNotAdopted, &inventory.ContestedError{
			Object: it.id, Legacy: owner, ConfigMap: r.ref.String(), Sibling: sib}))
	}
	if !r.opts.Adopt {
		return terminal(notRecordedError(it.id, owner, r.ref))
	}
	if !sib.Known {
		return terminal(unknownSiblingError(it.id, owner, r.ref))
	}
	return nil
}

// sibling is what the other inventory that shared the run's legacy ID lists
// (inventory.Sibling): the claim's while a migration is under way, else read once.
func (r *applyRun) sibling(ctx context.Context) (inventory.Sibling, error) {
	if r.claim.MigratingFrom != "" {
		return r.claim.Sibling, nil
	}
	r.legacy.once.Do(func() { r.legacy.inv, r.legacy.err = r.e.store.Sibling(ctx, r.ref) })
	return r.legacy.inv, r.legacy.err
}

// siblingRead is one read of the other inventory of a legacy ID (sibling).
type siblingRead struct {
	once sync.Once
	inv  inventory.Sibling
	err  error
}
