package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/converge-dev/converge/inventory"
)

// HeadVersions tells the resourceVersion of an inventory's ConfigMap as a watch sees it
// (inventory.Heads). ok is false when it cannot tell.
type HeadVersions interface {
	Version(namespace, name string) (resourceVersion string, ok bool)
}

// A no-op reconcile in watch mode sends no request per object (memo.go); with
// Options.Heads it does not read its inventory either. The engine remembers, per inventory,
// what it last read from the API server and the version of the ConfigMap then (heads). A
// run whose ConfigMap the watch shows at that version starts from the remembered inventory;
// it is a no-op run's whole input when it holds every desired object and nothing to prune.
// Anything else reads the inventory from the API server, as without Heads.
//
// The watch may be behind, so the remembered inventory is only trusted for deciding that
// nothing needs writing. Before a run that started from it writes anything (an apply, a
// recreate, the record of new UIDs), it asks the API server for the ConfigMap's version
// (headGate): unchanged, the run goes on, its decisions were made on the stored inventory
// (I2, I3 and the ownership rules hold as with a read); changed, the run stops before that
// write and Apply starts over from an inventory read from the API server. A run that writes
// nothing at all, on a watch that missed a change of the inventory, misses it the way the
// memo misses an out-of-band edit on a stale watch: until the watch catches up, and with no
// write made on the stale view.

// errHeadMoved aborts a run that started from a remembered inventory when the API server
// shows its ConfigMap at another version: Apply runs again from a fresh read.
var errHeadMoved = errors.New("the inventory changed since the engine last read it")

// heads remembers, per inventory, the last inventory Apply read from the API server and
// wrote nothing over. Its inventories are shared by the runs that start from them, which
// only read them. What it remembers of an inventory whose head the watch shows changed or
// gone is dropped at the next run of that inventory, and by the first run of any inventory
// after sweepEvery (sweep): an inventory deleted, or now written by another engine (a Sync
// whose serviceAccountName changed), is not kept for the life of the process.
type heads struct {
	versions HeadVersions
	mu       sync.Mutex
	m        map[inventory.Ref]headRead
	swept    time.Time
}

// sweepEvery is how often remember drops what no longer matches the watch.
const sweepEvery = time.Minute

// headRead is one read of an inventory: what the ConfigMap held at claim.Version.
type headRead struct {
	inv   *inventory.Inventory
	claim inventory.Claim
}

func newHeads(versions HeadVersions) *heads {
	return &heads{versions: versions, m: map[inventory.Ref]headRead{}, swept: time.Now()}
}

func (h *heads) get(ref inventory.Ref) (headRead, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sweep()
	r, ok := h.m[ref]
	return r, ok
}

func (h *heads) remember(ref inventory.Ref, r headRead) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[ref] = r
}

// sweep drops, at most once per sweepEvery, every inventory whose head the watch does not
// show at the remembered version; h.mu is held. Every run of an engine with Heads asks for
// its inventory (get), so an engine that runs sweeps.
func (h *heads) sweep() {
	if time.Since(h.swept) < sweepEvery {
		return
	}
	h.swept = time.Now()
	for ref, r := range h.m {
		if v, ok := h.versions.Version(ref.Namespace, ref.Name); !ok || v != r.claim.Version {
			delete(h.m, ref)
		}
	}
}

func (h *heads) forget(ref inventory.Ref) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, ref)
}

// forgetHead drops what the engine remembers of ref's inventory, before a write of it.
func (e *Engine) forgetHead(ref inventory.Ref) {
	if e.heads != nil {
		e.heads.forget(ref)
	}
	e.quiet.forget(ref.ID)
}

// remembered returns the inventory of ref the engine last read, when the watch of the
// inventory heads shows its ConfigMap still at the version of that read; ok is false
// otherwise (no Heads, nothing remembered, the watch cannot tell or shows another version).
func (e *Engine) remembered(ref inventory.Ref) (headRead, bool) {
	if e.heads == nil {
		return headRead{}, false
	}
	r, ok := e.heads.get(ref)
	if !ok {
		return headRead{}, false
	}
	if v, ok := e.heads.versions.Version(ref.Namespace, ref.Name); !ok || v != r.claim.Version {
		e.heads.forget(ref)
		return headRead{}, false
	}
	return r, true
}

// rememberable reports whether a run's read of an inventory may be remembered: read from
// the ConfigMap (not recovered), one ConfigMap alone (Claim.Version is set: a part's edit
// by hand would not change the head's version), with no migration under way (whose sibling
// read is per run).
func rememberable(claim inventory.Claim) bool {
	return claim.Found && claim.Version != "" && claim.Migration.From == ""
}

// headGate is passed before every write of a run that started from a remembered inventory:
// once, it asks the API server whether the inventory's ConfigMap is still at the version
// the run started from. The nil gate (a run that read its inventory) always passes.
type headGate struct {
	once  sync.Once
	err   error
	check func(ctx context.Context) error
}

// newHeadGate returns the gate of a run that started from r, the remembered inventory of
// ref.
func (e *Engine) newHeadGate(ref inventory.Ref, r headRead) *headGate {
	return &headGate{check: func(ctx context.Context) error {
		v, err := e.store.Version(ctx, ref)
		if err != nil {
			return fmt.Errorf("confirming the inventory before a write: %w", err)
		}
		if v != r.claim.Version {
			e.heads.forget(ref)
			return fmt.Errorf("inventory %s: %w (version %s, now %s)", ref, errHeadMoved, r.claim.Version, v)
		}
		return nil
	}}
}

// moved returns the gate's errHeadMoved once a write was held back for it, else nil. It is
// read after the run's workers have ended.
func (g *headGate) moved() error {
	if g == nil || !errors.Is(g.err, errHeadMoved) {
		return nil
	}
	return g.err
}

// pass returns nil once the API server confirmed the version, else why the write must not
// be made (errHeadMoved, or the failed read); the same answer to every caller of a run.
func (g *headGate) pass(ctx context.Context) error {
	if g == nil {
		return nil
	}
	g.once.Do(func() { g.err = g.check(ctx) })
	return g.err
}
