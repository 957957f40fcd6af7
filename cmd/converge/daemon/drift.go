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
// reconciles themselves.
type driftTrigger struct {
	mu     sync.Mutex
	queue  workqueue.TypedRateLimitingInterface[reconcile.Request] // nil until the controller starts
	owners map[string]types.NamespacedName                         // inventory ID → Sync
	next   map[types.NamespacedName]time.Time                      // when the last drift reconcile was scheduled
	free   map[types.NamespacedName]time.Time                      // no drift reconcile before this (see reconciled)
	now    func() time.Time
}

func newDriftTrigger() *driftTrigger {
	return &driftTrigger{owners: map[string]types.NamespacedName{}, next: map[types.NamespacedName]time.Time{},
		free: map[types.NamespacedName]time.Time{}, now: time.Now}
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

// track records that the Sync key owns the inventory id. A nil trigger does nothing.
func (d *driftTrigger) track(id string, key types.NamespacedName) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.owners[id] = key
}

// forget drops the Sync key (deleted).
func (d *driftTrigger) forget(key types.NamespacedName) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, k := range d.owners {
		if k == key {
			delete(d.owners, id)
		}
	}
	delete(d.next, key)
	delete(d.free, key)
}

// reconciled records that a reconcile of key just ended after took: the next drift-triggered
// reconcile waits at least as long again (and at least driftMinGap), so a Sync whose objects
// something keeps changing spends at most about half its time reconciling for drift, however
// slow its reconciles are (I10: no hot loop).
func (d *driftTrigger) reconciled(key types.NamespacedName, took time.Duration) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.free[key] = d.now().Add(max(took, driftMinGap))
}

// changed schedules a reconcile of the Sync owning inventory id, unless one is already
// scheduled. It never blocks.
func (d *driftTrigger) changed(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	key, ok := d.owners[id]
	if !ok || d.queue == nil {
		return
	}
	now := d.now()
	last := d.next[key]
	if last.After(now) {
		return // already scheduled
	}
	at := now.Add(driftDebounce)
	if gap := last.Add(driftMinGap); at.Before(gap) {
		at = gap
	}
	if free := d.free[key]; at.Before(free) {
		at = free
	}
	d.next[key] = at
	d.queue.AddAfter(reconcile.Request{NamespacedName: key}, at.Sub(now))
}
