package daemon

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
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
// the workers evenly, at least one each. When no other namespace holds a Sync (shared is
// false) there is nobody to keep a worker for: the namespace alone uses them all.
func namespaceShare(workers, configured, active int, shared bool) int {
	workers, active = max(workers, 1), max(active, 1)
	if configured > 0 {
		return min(configured, workers)
	}
	if active == 1 {
		if !shared {
			return workers
		}
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
	// holders counts the Syncs per namespace (fed by the Sync informer); nil: every
	// namespace is taken to share the daemon with others.
	holders *syncHolders

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
	if !admitted(g.busy[ns], namespaceShare(g.workers, g.configured, g.activeLocked(ns, now), g.holders.others(ns))) {
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

// syncHolders counts the Syncs of each namespace, from the Sync informer's events.
type syncHolders struct {
	mu sync.Mutex
	n  map[string]int
}

// others reports whether a namespace other than ns holds a Sync (true when unknown).
func (h *syncHolders) others(ns string) bool {
	if h == nil {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.n) > 1 || (len(h.n) == 1 && h.n[ns] == 0)
}

func (h *syncHolders) add(ns string, d int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	if h.n[ns] += d; h.n[ns] <= 0 {
		delete(h.n, ns)
	}
}

// handler returns the informer event handler that keeps the counts.
func (h *syncHolders) handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(metav1.Object); ok {
				h.add(o.GetNamespace(), 1)
			}
		},
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if o, ok := obj.(metav1.Object); ok {
				h.add(o.GetNamespace(), -1)
			}
		},
	}
}
