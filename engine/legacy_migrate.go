package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/converge-dev/converge/inventory"
)

// Migrate takes over the legacy inventory of ref (ref.Legacy) under ref.ID: the one-shot
// step of the legacy-ID migration, which every owner runs before an Apply or a Delete of ref
// (the daemon's reconcile and finalizer; converge apply, delete, install and uninstall). See
// inventory.Store.Migrate. It returns the Ref to pass to them (under opts.DryRun, the legacy
// Ref while nothing is migrated yet). It runs with the engine's client, so a Sync's migration
// patches only what the Sync's service account may patch. It is removed in v0.2, with
// legacy.go and Result.MigrationPending.
//
// Objects whose owner annotation could not be moved yet (inventory.ErrMigrationPending: a
// refused patch, or an object the other inventory of the legacy ID also lists) do not fail
// it: the inventory is already under ref.ID, those it recorded stay ours for Apply, Delete
// and Abandon (inventory.Migration.Owns, asked by legacy.go's owns). They are remembered (bounded, per
// ref.ID): the next Migrate reads and patches only those, not every entry, and Apply reports
// them in Result.MigrationPending until they are settled, so the owner's status can say so.
//
// A finished migration (or the finding that there is nothing to migrate) is remembered for
// ref.ID, so the daemon's reconciles of a Sync read its inventory for this once per engine.
// The memory is bounded (settled) and forgotten when it may be wrong: when Delete or Abandon
// removed the inventory (a Sync recreated under the same name starts over), and when a run
// finds the ConfigMap under the legacy ID again or with a migration under way (a restored
// backup, a replica of an earlier version): that run fails with inventory.ErrNotMigrated,
// which is transient, and the next Migrate takes the inventory over.
func (e *Engine) Migrate(ctx context.Context, ref inventory.Ref, opts inventory.MigrateOptions) (inventory.Ref, error) {
	if e.migrations.settled.has(ref.ID) {
		return ref, nil
	}
	if opts.Hooks.AfterRelabel == nil && opts.Hooks.AfterReown == nil {
		opts.Hooks = e.opts.Hooks.Migrate
	}
	if p := e.migrations.pending.get(ref.ID); p != nil && opts.Only == nil {
		opts.Only = p.Objects
	}
	e.forgetHead(ref)
	out, err := e.store.Migrate(ctx, ref, opts)
	if pe := (*inventory.PendingError)(nil); errors.As(err, &pe) {
		if !opts.DryRun {
			e.migrations.pending.set(ref.ID, pe)
		}
		logr.FromContextOrDiscard(ctx).Info("inventory migration not finished; retried at the next run",
			"inventory", ref.String(), "err", err)
		return out, nil
	}
	if err == nil && !opts.DryRun {
		e.migrations.pending.forget(ref.ID)
		e.migrations.settled.add(ref.ID)
	}
	return out, err
}

// forgetMigration forgets what Migrate knows of ref's inventory, which was just removed: a
// set recreated under this ID starts over.
func (e *Engine) forgetMigration(id string) {
	e.migrations.settled.forget(id)
	e.migrations.pending.forget(id)
}

// migrationPending is Result.MigrationPending for an inventory whose ConfigMap still carries
// the migration mark (claim.Migration.From): the objects the last Migrate left, or, when this
// engine did not run it, that the migration is under way.
func (e *Engine) migrationPending(ref inventory.Ref, claim inventory.Claim) string {
	if claim.Migration.From == "" {
		return ""
	}
	if p := e.migrations.pending.get(ref.ID); p != nil {
		return pendingSummary(p)
	}
	return fmt.Sprintf("inventory %s: the migration from the legacy ID %q is not finished: objects may still carry %s=%s; the next run retries it",
		ref, claim.Migration.From, OwnerAnnotation, claim.Migration.From)
}

// migrations is what Migrate remembers, per engine, of the inventories it took over. The
// zero value is empty and ready to use; it is safe for concurrent use.
type migrations struct {
	// settled holds the inventory IDs Migrate has settled (taken over, or nothing to take
	// over): a long-lived engine reads each inventory for its migration once, not per run.
	settled settled
	// pending holds, per inventory ID, the objects the last Migrate left under the legacy ID
	// (inventory.PendingError): the next Migrate retries only those, and Apply reports them
	// (Result.MigrationPending).
	pending pendingMigrations
}

// maxPendingShown bounds the objects Result.MigrationPending names: it ends in a status
// message.
const maxPendingShown = 3

// pendingSummary is Result.MigrationPending for p: one line naming the first objects and why.
func pendingSummary(p *inventory.PendingError) string {
	why := make([]string, 0, maxPendingShown)
	for _, err := range p.Errs[:min(len(p.Errs), maxPendingShown)] {
		why = append(why, err.Error())
	}
	more := ""
	if n := len(p.Errs) - maxPendingShown; n > 0 {
		more = fmt.Sprintf("; and %d more", n)
	}
	return fmt.Sprintf("inventory %s: the migration from the legacy ID %q is not finished: %d objects still carry %s=%s: %s%s",
		p.Ref, p.Ref.Legacy, len(p.Objects), OwnerAnnotation, p.Ref.Legacy, strings.Join(why, "; "), more)
}

// pendingMigrations is the bounded memory of the migrations left pending, by inventory ID;
// past maxSettled IDs it starts over, which costs each of them one full Migrate. The zero
// value is empty and ready to use; it is safe for concurrent use.
type pendingMigrations struct {
	mu  sync.Mutex
	ids map[string]*inventory.PendingError
}

func (p *pendingMigrations) get(id string) *inventory.PendingError {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ids[id]
}

func (p *pendingMigrations) set(id string, pe *inventory.PendingError) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil || len(p.ids) >= maxSettled {
		p.ids = map[string]*inventory.PendingError{}
	}
	p.ids[id] = pe
}

func (p *pendingMigrations) forget(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ids, id)
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
