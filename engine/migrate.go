package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/go-logr/logr"

	"github.com/converge-dev/converge/inventory"
)

// Migrate takes over the legacy inventory of ref (ref.Legacy) under ref.ID before an Apply or
// a Delete of ref: see inventory.Store.Migrate. It returns the Ref to pass to them (under
// opts.DryRun, the legacy Ref while nothing is migrated yet). It runs with the engine's
// client, so a Sync's migration patches only what the Sync's service account may patch.
//
// Objects whose owner annotation could not be moved yet (inventory.ErrMigrationPending) do
// not fail it: the inventory is already under ref.ID, those objects stay ours by
// inventory.Claim.Owns for Apply, Delete and Abandon, and the next Migrate tries them again.
// That is logged, not returned.
//
// A finished migration (or the finding that there is nothing to migrate) is remembered for
// ref.ID, so the daemon's reconciles of a Sync read its inventory for this once per engine.
// The memory is bounded (settled) and forgotten when it may be wrong: when Delete or Abandon
// removed the inventory (a Sync recreated under the same name starts over), and when a run
// finds the ConfigMap under the legacy ID again or with a migration under way (a restored
// backup, a replica of an earlier version): that run fails with inventory.ErrNotMigrated,
// which is transient, and the next Migrate takes the inventory over.
func (e *Engine) Migrate(ctx context.Context, ref inventory.Ref, opts inventory.MigrateOptions) (inventory.Ref, error) {
	if e.migrated.has(ref.ID) {
		return ref, nil
	}
	if opts.Hooks.AfterRelabel == nil && opts.Hooks.AfterReown == nil {
		opts.Hooks = e.opts.Hooks.Migrate
	}
	out, err := e.store.Migrate(ctx, ref, opts)
	if errors.Is(err, inventory.ErrMigrationPending) {
		logr.FromContextOrDiscard(ctx).Info("inventory migration not finished; retried at the next run",
			"inventory", ref.String(), "err", err)
		return out, nil
	}
	if err == nil && !opts.DryRun {
		e.migrated.add(ref.ID)
	}
	return out, err
}

// maxSettled bounds the inventory IDs an engine remembers as migrated: past it the memory
// starts over, which costs each inventory one more read of its ConfigMap.
const maxSettled = 10000

// settled is the set of inventory IDs whose migration is settled (see Engine.Migrate). The
// zero value is empty and ready to use; it is safe for concurrent use.
type settled struct {
	mu  sync.Mutex
	ids map[string]struct{}
	max int // 0 means maxSettled
}

func (s *settled) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

func (s *settled) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit := s.max
	if limit <= 0 {
		limit = maxSettled
	}
	if s.ids == nil || len(s.ids) >= limit {
		s.ids = map[string]struct{}{}
	}
	s.ids[id] = struct{}{}
}

func (s *settled) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.ids, id)
}

func (s *settled) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}
