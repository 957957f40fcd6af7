package daemon

import (
	"sync"
	"time"
)

// deferDelay is how soon a reconcile deferred for its namespace's share is tried again: long
// enough that the deferrals of a busy namespace cost nothing, short enough that its Syncs
// take a freed slot within a second.
const deferDelay = time.Second

// waitingFor is how long a namespace counts as waiting for a worker after its last deferral
// (its deferred Syncs come back every deferDelay while it waits).
const waitingFor = 3 * deferDelay

// namespaceShare is how many reconciles of one namespace may run at once with workers
// workers while active namespaces (those with reconciles running or deferred within
// waitingFor, the asking one included) want them: configured (--max-concurrent-per-namespace)
// when positive, at most workers; else a namespace alone may use all workers but one, so a
// free worker reaches another namespace's Sync as soon as it is queued, and several share
// the workers evenly, at least one each.
func namespaceShare(workers, configured, active int) int {
	workers, active = max(workers, 1), max(active, 1)
	if configured > 0 {
		return min(configured, workers)
	}
	if active == 1 {
		return max(1, workers-1)
	}
	return max(1, workers/active)
}

// admitted reports whether a reconcile of a namespace with inFlight reconciles running may
// start under share.
func admitted(inFlight, share int) bool { return inFlight < share }

// namespaceGate counts the reconciles running per namespace and when each namespace was last
// deferred, and admits a reconcile only within its namespace's share; the reconciler defers
// the others (RequeueAfter deferDelay, nothing read or written, no back-off).
type namespaceGate struct {
	workers, configured int
	now                 func() time.Time

	mu       sync.Mutex
	busy     map[string]int
	deferred map[string]time.Time // last deferral per namespace
}

func newNamespaceGate(workers, configured int) *namespaceGate {
	return &namespaceGate{workers: workers, configured: configured, now: time.Now,
		busy: map[string]int{}, deferred: map[string]time.Time{}}
}

// enter admits a reconcile in namespace ns and returns the func that ends it, or false when
// ns already runs its share. A nil gate admits everything.
func (g *namespaceGate) enter(ns string) (func(), bool) {
	if g == nil {
		return func() {}, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	if !admitted(g.busy[ns], namespaceShare(g.workers, g.configured, g.activeLocked(ns, now))) {
		g.deferred[ns] = now
		return nil, false
	}
	g.busy[ns]++
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.busy[ns]--; g.busy[ns] <= 0 {
			delete(g.busy, ns)
		}
	}, true
}

// activeLocked counts the namespaces with reconciles running or deferred within waitingFor,
// ns included, forgetting older deferrals.
func (g *namespaceGate) activeLocked(ns string, now time.Time) int {
	n := len(g.busy)
	if g.busy[ns] == 0 {
		n++
	}
	for other, at := range g.deferred {
		switch {
		case now.Sub(at) > waitingFor:
			delete(g.deferred, other)
		case other != ns && g.busy[other] == 0:
			n++
		}
	}
	return n
}
