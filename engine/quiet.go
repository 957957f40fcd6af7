package engine

import (
	"sync"

	"github.com/converge-dev/converge/inventory"
)

// A run that changed nothing leaves its inventory quiet: the next run under the same
// Set.Key, with no event of the watch cache about any object of that inventory since the
// first run started and its inventory's ConfigMap at the same version, would decide the
// same from the same inputs: every object unchanged, nothing to prune, nothing to write.
// Engine.Quiet answers such a run without its objects (the caller need not decode them),
// from what the clean run recorded.
//
// What a run decides on is its Set (named by Set.Key, which the caller derives from
// everything that makes the objects and the options), the stored inventory (its head's
// version, heads.go), the memo and the watch cache's objects. The memo changes only by
// runs. Every change of a cached object (an update at another resourceVersion, an add, a
// delete, an informer's relist) reaches the cache's handlers after the cache holds it, and
// counts against its owner's inventory: a run that started before the count moved is not
// recorded as clean, and a record made before it moved is no longer answered. The cache
// holds only what its informers list and watch, so a run is clean only when every kind of
// its set is read through a synced informer with these handlers.

// quietRuns keeps, per inventory ID, the count of cache events about its objects and the
// last clean run.
type quietRuns struct {
	mu sync.Mutex
	// events is, per inventory, the mark of its last event (or of its registration): a
	// value of seq, which only grows, so that an inventory dropped and counted again never
	// shows a mark a run read before.
	events map[string]uint64
	seq    uint64
	clean  map[string]cleanRun
}

// cleanRun is what a run that changed nothing recorded: its key, the event count when it
// started, its inventory's head version, and what Quiet answers.
type cleanRun struct {
	key    string
	events uint64
	head   string
	inv    *inventory.Inventory
	// ignoreUnmatched is the run's Result.IgnoreUnmatched.
	ignoreUnmatched []string
}

func newQuietRuns() *quietRuns {
	return &quietRuns{events: map[string]uint64{}, clean: map[string]cleanRun{}}
}

// touch counts an event about an object of the inventory id, if a run of it was started
// (count): the owner annotation of any object in the cache's scope is anybody's to write,
// so other values are not kept. A nil quietRuns does nothing.
func (q *quietRuns) touch(id string) {
	if q == nil || id == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.events[id]; ok {
		q.seq++
		q.events[id] = q.seq
		delete(q.clean, id)
	}
}

// count is the mark of the last event about the inventory id's objects; the first run of
// id starts counting them.
func (q *quietRuns) count(id string) uint64 {
	if q == nil || id == "" {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	n, ok := q.events[id]
	if !ok {
		q.seq++
		n = q.seq
		q.events[id] = n
	}
	return n
}

// drop forgets the inventory id altogether: its objects are deleted or released (Delete,
// Abandon). A run of it started later counts anew, from a mark no earlier run read.
func (q *quietRuns) drop(id string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.events, id)
	delete(q.clean, id)
}

// record keeps c as the inventory id's clean run, unless an event came since c.events.
func (q *quietRuns) record(id string, c cleanRun) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if n, ok := q.events[id]; !ok || n != c.events {
		delete(q.clean, id)
		return
	}
	q.clean[id] = c
}

// forget drops the inventory id's clean run.
func (q *quietRuns) forget(id string) {
	if q == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.clean, id)
}

// get returns the inventory id's clean run under key when no event came since it started.
func (q *quietRuns) get(id, key string) (cleanRun, bool) {
	if q == nil || key == "" {
		return cleanRun{}, false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.clean[id]
	if !ok || c.key != key || q.events[id] != c.events {
		return cleanRun{}, false
	}
	return c, true
}

// Quiet returns the Result a run of ref's set under key would have, without the set, when
// the last run of ref's inventory under key changed nothing and nothing it decided on has
// changed since (quiet.go): every object of the inventory unchanged. ok is false
// otherwise; the caller then runs Apply. Only an engine with Watch and Heads answers.
// The Result has what a caller counts and records: Changes (each object unchanged, in the
// inventory's order, without Origin or Wave), the Inventory and IgnoreUnmatched; Health is
// nil (the clean run found every object Current).
func (e *Engine) Quiet(ref inventory.Ref, key string) (res *Result, ok bool) {
	c, ok := e.quiet.get(ref.ID, key)
	if !ok {
		return nil, false
	}
	if v, found := e.heads.versions.Version(ref.Namespace, ref.Name); !found || v != c.head {
		e.quiet.forget(ref.ID)
		return nil, false
	}
	res = &Result{Inventory: c.inv, IgnoreUnmatched: c.ignoreUnmatched, Changes: make([]Change, 0, c.inv.Len())}
	for _, en := range c.inv.Entries() {
		res.Changes = append(res.Changes, Change{ID: objectKey(en.Object), Object: en.Object, Action: ActionUnchanged})
	}
	return res, true
}

// recordQuiet records the run of set that ended with res as its inventory's clean run when
// it changed nothing and every input it decided on is watched (quiet.go); otherwise it
// drops the inventory's clean run. events is the count when the run started.
func (r *applyRun) recordQuiet(set Set, st start, res *Result, err error, events uint64) {
	q := r.e.quiet
	if q == nil {
		return
	}
	if !r.clean(set, st, res, err) {
		q.forget(set.Inventory.ID)
		return
	}
	q.record(set.Inventory.ID, cleanRun{key: set.Key, events: events, head: st.claim.Version, inv: res.Inventory,
		ignoreUnmatched: res.IgnoreUnmatched})
}

// clean says the run of set that ended with res and err changed nothing and decided only
// on what the watch cache and the heads report changes of.
func (r *applyRun) clean(set Set, st start, res *Result, err error) bool {
	// Its inventory is the one the heads' watch shows at st.claim.Version: remembered from
	// an earlier read (gate), or read by this run, which wrote nothing ahead. (A record of
	// new UIDs moves the head: the watch then shows another version and Quiet answers no
	// more.)
	fromHead := st.gate != nil || !st.wrote && rememberable(st.claim)
	if set.Key == "" || err != nil || r.opts.DryRun || r.e.heads == nil || !fromHead ||
		len(r.opts.HealthChecks) > 0 || res.Inventory == nil || res.MigrationPending != "" || res.Held != "" ||
		len(res.Pruned) > 0 || len(res.Left) > 0 || len(res.Drift) > 0 || res.Inventory.Len() != len(r.items) {
		return false
	}
	if _, watched := r.view.(*watchedView); !watched {
		return false
	}
	for _, c := range res.Changes {
		if c.Action != ActionUnchanged {
			return false
		}
	}
	for _, h := range res.Health {
		if h.Status != "Current" {
			return false
		}
	}
	for _, it := range r.items {
		if it.pending || it.pendingErr != nil || len(it.external) > 0 || !r.e.cache.watches(it.gvk) {
			return false
		}
	}
	return true
}
