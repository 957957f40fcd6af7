package engine

import (
	"context"
	"errors"

	"github.com/converge-dev/converge/inventory"
)

// load reads the stored inventory of ref for Apply, Delete and Abandon, and the claim that
// decides which live objects are ours (owns). When the ConfigMap does not
// exist (deleted by hand, or by the deletion of its namespace) and recover is given, it
// returns recover instead: a copy kept elsewhere, possibly a run behind, which is safe to act
// on because every delete or release still checks the owner annotation and the UID (I1), and
// its UIDs never make an object ours (claim.Found is false).
//
// A ConfigMap still under ref's legacy ID, or with a migration under way, makes the engine
// forget that ref's migration was settled, so the next Migrate takes it over (see Migrate).
func (e *Engine) load(ctx context.Context, ref inventory.Ref, recover *inventory.Inventory) (*inventory.Inventory, inventory.Claim, error) {
	inv, claim, err := e.store.Lookup(ctx, ref)
	if errors.Is(err, inventory.ErrNotMigrated) || claim.Migration.From != "" {
		e.migrations.settled.forget(ref.ID)
	}
	if err != nil || claim.Found || recover.Len() == 0 {
		return inv, claim, err
	}
	return recover.Clone(), claim, nil
}

// loadValid is load for Delete and Abandon, which always work on a named inventory: ref is
// validated first.
func (e *Engine) loadValid(ctx context.Context, ref inventory.Ref, recover *inventory.Inventory) (*inventory.Inventory, inventory.Claim, error) {
	if err := validateRef(ref); err != nil {
		return nil, inventory.Claim{}, err
	}
	return e.load(ctx, ref, recover)
}
