package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/converge-dev/converge/inventory"
)

// Recovery returns a copy of an inventory kept elsewhere (a Sync's status), for a ConfigMap
// that was lost. The engine calls it only when the ConfigMap does not exist, so a copy that
// costs a request to read (a Sync read again from the API server) is read only then. A nil
// Recovery, or a nil or empty copy, recovers nothing.
type Recovery func(context.Context) (*inventory.Inventory, error)

// RecoverFrom is the Recovery of a copy at hand.
func RecoverFrom(inv *inventory.Inventory) Recovery {
	return func(context.Context) (*inventory.Inventory, error) { return inv, nil }
}

// load reads the stored inventory of ref for Apply, Delete and Abandon, and the claim that
// decides which live objects are ours (owns). When the ConfigMap does not
// exist (deleted by hand, or by the deletion of its namespace) and recover is given, it
// returns what recover returns instead: a copy kept elsewhere, possibly a run behind, which is
// safe to act on because every delete or release still checks the owner annotation and the
// UID (I1), and its UIDs never make an object ours (claim.Found is false). A copy that cannot
// be read fails the run: an inventory taken for empty would prune nothing but forget what the
// set owned.
//
// A ConfigMap still under ref's legacy ID, or with a migration under way, makes the engine
// forget that ref's migration was settled, so the next Migrate takes it over (see Migrate).
func (e *Engine) load(ctx context.Context, ref inventory.Ref, recover Recovery) (*inventory.Inventory, inventory.Claim, error) {
	inv, claim, err := e.store.Lookup(ctx, ref)
	if errors.Is(err, inventory.ErrNotMigrated) || claim.Migration.From != "" {
		e.migrations.settled.forget(ref.ID)
	}
	if err != nil || claim.Found || recover == nil {
		return inv, claim, err
	}
	copied, err := recover(ctx)
	if err != nil {
		return nil, claim, fmt.Errorf("inventory %s is gone and its recovery copy could not be read: %w", ref, err)
	}
	if copied.Len() == 0 {
		return inv, claim, nil
	}
	return copied.Clone(), claim, nil
}

// loadValid is load for Delete and Abandon, which always work on a named inventory: ref is
// validated first.
func (e *Engine) loadValid(ctx context.Context, ref inventory.Ref, recover Recovery) (*inventory.Inventory, inventory.Claim, error) {
	if err := validateRef(ref); err != nil {
		return nil, inventory.Claim{}, err
	}
	return e.load(ctx, ref, recover)
}
