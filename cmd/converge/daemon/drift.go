package daemon

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Pacing of drift-triggered reconciles: a burst of changes is gathered for driftDebounce,
// and one Sync is reconciled for drift at most once per driftMinGap, so an object that
// something keeps changing cannot make a hot loop (I10).
const (
	driftDebounce = 500 * time.Millisecond
	driftMinGap   = 3 * time.Second
)

// driftTrigger turns the engine's reports of out-of-band changes (engine.Options.Changed)
// into reconciles of the Sync that owns the object, so drift is corrected within seconds
// instead of at the next interval. It learns which Sync owns an inventory ID from the
// reconciles themselves (syncState.inventoryID), and paces each Sync in its syncState.
type driftTrigger struct {
	states *syncStates
	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request] // nil until the controller starts
	now    func() time.Time
}

func newDriftTrigger(states *syncStates) *driftTrigger {
	return &driftTrigger{states: states, now: time.Now}
}

// source is the controller source that hands the trigger the controller's queue.
func (d *driftTrigger) source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.queue = q
		return nil
	})
}

// track records that the Sync key owns the inventory id, as its reconcile is about to read
// its objects: a drift reconcile scheduled before is taken by this one, so a change from now
// on schedules another. (The controller's queue merges a delayed request into an earlier one
// for the same Sync: a schedule thought pending could be long gone, and the changes until
// its time were dropped.) A nil trigger does nothing.
func (d *driftTrigger) track(id string, key types.NamespacedName) {
	if d == nil {
		return
	}
	d.states.with(key, func(st *syncState) { st.inventoryID, st.driftTaken = id, true })
}

// untrack stops drift reconciles of the Sync key (being deleted). A nil trigger does nothing.
func (d *driftTrigger) untrack(key types.NamespacedName) {
	if d == nil {
		return
	}
	d.states.with(key, func(st *syncState) {
		st.inventoryID, st.driftNext, st.driftFree, st.driftTaken = "", time.Time{}, time.Time{}, false
	})
}

// reconciled records that a reconcile of key just ended after took: the next drift-triggered
// reconcile waits at least as long again (and at least driftMinGap), so a Sync whose objects
// something keeps changing spends at most about half its time reconciling for drift, however
// slow its reconciles are (I10: no hot loop).
func (d *driftTrigger) reconciled(key types.NamespacedName, took time.Duration) {
	if d == nil {
		return
	}
	free := d.now().Add(max(took, driftMinGap))
	d.states.with(key, func(st *syncState) { st.driftFree = free })
}

// changed schedules a reconcile of the Sync owning inventory id, unless one is already
// scheduled. It never blocks.
func (d *driftTrigger) changed(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.queue == nil {
		return
	}
	now := d.now()
	var key types.NamespacedName
	var at time.Time
	d.states.owner(id, func(k types.NamespacedName, st *syncState) {
		if st.driftNext.After(now) && !st.driftTaken {
			return // already scheduled
		}
		at = now.Add(driftDebounce)
		if gap := st.driftNext.Add(driftMinGap); at.Before(gap) {
			at = gap
		}
		if at.Before(st.driftFree) {
			at = st.driftFree
		}
		st.driftNext, st.driftTaken, key = at, false, k
	})
	if !at.IsZero() {
		d.queue.AddAfter(reconcile.Request{NamespacedName: key}, at.Sub(now))
	}
}
