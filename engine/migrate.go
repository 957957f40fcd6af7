package engine

import (
	"context"

	"github.com/converge-dev/converge/inventory"
)

// Migrate takes over the legacy inventory of ref (ref.Legacy) under ref.ID before an Apply or
// a Delete of ref: see inventory.Store.Migrate. It returns the Ref to pass to them (under
// opts.DryRun, the legacy Ref while nothing is migrated yet). It runs with the engine's
// client, so a Sync's migration patches only what the Sync's service account may patch.
//
// A real migration (or the finding that there is nothing to migrate) is remembered for ref.ID,
// so the daemon's reconciles of a Sync read its inventory for this once per engine.
func (e *Engine) Migrate(ctx context.Context, ref inventory.Ref, opts inventory.MigrateOptions) (inventory.Ref, error) {
	if _, done := e.migrated.Load(ref.ID); done {
		return ref, nil
	}
	out, err := e.store.Migrate(ctx, ref, opts)
	if err == nil && !opts.DryRun {
		e.migrated.Store(ref.ID, true)
	}
	return out, err
}
