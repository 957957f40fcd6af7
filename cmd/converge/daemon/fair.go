package daemon

import (
	"sync"
	"time"
)

// deferDelay is how soon a reconcile deferred for its namespace's share is tried again: long
// enough that the deferrals of a busy namespace cost nothing, short enough that its Syncs
// take a freed slot within a second.
const deferDelay = time.Second

// namespaceShare is how many reconciles of one namespace may run at once with workers
// workers: configured (--max-concurrent-per-namespace) when positive, at most workers; else
// half the workers, at least one. With half the workers left to the other namespaces, their
// queued Syncs are reached while one namespace's slow fetches, renders or applies hold its
// share; the deferred Syncs of the busy namespace cost a queue round each.
func namespaceShare(workers, configured int) int {
	workers = max(workers, 1)
	if configured > 0 {
		return min(configured, workers)
	}
	return max(1, workers/2)
}

// admitted reports whether a reconcile of a namespace with inFlight reconciles running may
// start under share.
func admitted(inFlight, share int) bool { return inFlight < share }

// namespaceGate counts the reconciles running per namespace and admits one only within its
// namespace's share; the reconciler defers the others (RequeueAfter deferDelay, nothing read
// or written, no back-off).
type namespaceGate struct {
	share int
	mu    sync.Mutex
	busy  map[string]int
}

func newNamespaceGate(share int) *namespaceGate {
	return &namespaceGate{share: share, busy: map[string]int{}}
}

// enter admits a reconcile in namespace ns and returns the func that ends it, or false when
// ns already runs its share. A nil gate admits everything.
func (g *namespaceGate) enter(ns string) (func(), bool) {
	if g == nil {
		return func() {}, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !admitted(g.busy[ns], g.share) {
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
