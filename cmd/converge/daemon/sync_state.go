package daemon

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/cmd/converge/daemon/notify"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/varsubst"
)

// syncState is what the daemon remembers about one Sync between its reconciles. It lives in
// the reconciler's syncStates and is dropped whole when the Sync is forgotten, or when a Sync
// of another UID takes its name.
type syncState struct {
	uid types.UID
	// retries counts consecutive transient failures: the back-off's exponent (requeue.go).
	retries int
	// inventoryID is the inventory the Sync last applied: the drift trigger's reports name
	// it (drift.go).
	inventoryID string
	// driftNext is when the last drift reconcile was scheduled; driftFree, the earliest the
	// next may run (drift.go).
	driftNext, driftFree time.Time
	// driftTaken says a reconcile has read the Sync's objects since driftNext was scheduled:
	// the schedule is no longer pending, even if its time is still to come (drift.go).
	driftTaken bool
	// lead is the revision the Sync last loaded and attempted, for the lead-time metrics
	// (metrics.go).
	lead leadClock
	// redactor hides the values of the Secrets read for the Sync and the values decrypted
	// for it in what is written about it; memo keeps its last substitution (prepare.go).
	redactor *varsubst.Redactor
	memo     *pipeline.Memo
	// decrypted keeps its last decryption (prepare.go).
	decrypted *pipeline.Memo
	// user is the identity the Sync last acted as, held in the engine set (engines.go);
	// acting says whether it acted at all.
	user   string
	acting bool
	// settled is the last settled state notifications compared with (notifications.go);
	// nil: read it from the status.
	settled *notify.State
	// rollbackChecked is what a rollback's check for dropped CRDs last passed on
	// (rollback.go): the recovery copy it read and the CRDs the revision declares.
	rollbackChecked string
}

// syncStates is the registry of syncState, keyed by the Sync. One lock guards it; the
// functions given to with must not call back into the registry.
type syncStates struct {
	mu          sync.Mutex
	byKey       map[types.NamespacedName]*syncState
	byInventory map[string]types.NamespacedName
	// released are told of every forgotten state, outside the lock: what other parts keep
	// per Sync outside the registry (metric series, the status writer's last write, the
	// loader's render, the engine set's hold on an identity).
	released []func(types.NamespacedName, syncState)
}

func newSyncStates() *syncStates {
	return &syncStates{byKey: map[types.NamespacedName]*syncState{}, byInventory: map[string]types.NamespacedName{}}
}

// onForget adds f to what is told of every forgotten state. Called while the daemon is wired,
// before any reconcile.
func (st *syncStates) onForget(f func(types.NamespacedName, syncState)) {
	st.released = append(st.released, f)
}

// with runs f on key's state under the registry's lock, creating an empty one first.
func (st *syncStates) with(key types.NamespacedName, f func(*syncState)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.getOrCreate(key)
	was := s.inventoryID
	f(s)
	if s.inventoryID == was {
		return
	}
	if was != "" && st.byInventory[was] == key {
		delete(st.byInventory, was)
	}
	if s.inventoryID != "" {
		st.byInventory[s.inventoryID] = key
	}
}

// read runs f on key's state under the registry's lock, if there is one: a read that must
// not leave a state behind (a Sync already forgotten).
func (st *syncStates) read(key types.NamespacedName, f func(*syncState)) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s := st.byKey[key]; s != nil {
		f(s)
	}
}

// owner returns the Sync that last applied inventory id, under the lock, and runs f on its
// state; ok is false, and f is not run, when no Sync of this daemon did.
func (st *syncStates) owner(id string, f func(types.NamespacedName, *syncState)) (ok bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	key, ok := st.byInventory[id]
	if !ok {
		return false
	}
	f(key, st.byKey[key])
	return true
}

// observe checks key's state against the UID of the Sync a reconcile just read: the state of
// another Sync that held the name (deleted and re-created between two reconciles), or one
// left without a UID by a late write after a forget, is forgotten, so nothing of it (its
// back-off, its identity, its redactor, its lead time) carries over.
func (st *syncStates) observe(key types.NamespacedName, uid types.UID) {
	st.mu.Lock()
	var old *syncState
	if s := st.byKey[key]; s != nil && s.uid != uid {
		o := st.drop(key)
		old = &o
	}
	st.getOrCreate(key).uid = uid
	st.mu.Unlock()
	if old != nil {
		st.release(key, *old)
	}
}

// forget drops key's state and tells what keeps more of it. Forgetting a key with no state
// tells them too: they may hold something from before the registry knew the Sync.
func (st *syncStates) forget(key types.NamespacedName) {
	st.mu.Lock()
	old := st.drop(key)
	st.mu.Unlock()
	st.release(key, old)
}

// drop removes key's state and returns it (zero when none); st.mu is held.
func (st *syncStates) drop(key types.NamespacedName) syncState {
	s := st.byKey[key]
	if s == nil {
		return syncState{}
	}
	delete(st.byKey, key)
	if s.inventoryID != "" && st.byInventory[s.inventoryID] == key {
		delete(st.byInventory, s.inventoryID)
	}
	return *s
}

func (st *syncStates) release(key types.NamespacedName, old syncState) {
	for _, f := range st.released {
		f(key, old)
	}
}

// getOrCreate returns key's state, creating it; st.mu is held.
func (st *syncStates) getOrCreate(key types.NamespacedName) *syncState {
	s := st.byKey[key]
	if s == nil {
		s = &syncState{}
		st.byKey[key] = s
	}
	return s
}

// known reports whether key has a state: whether the Sync is one this daemon reconciles and
// has not forgotten.
func (st *syncStates) known(key types.NamespacedName) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	_, ok := st.byKey[key]
	return ok
}

// current runs f, under the registry's lock, if key's state is of the Sync of uid: not
// forgotten, and not replaced by a Sync that took the name since. f must not call back into
// the registry.
func (st *syncStates) current(key types.NamespacedName, uid types.UID, f func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if s := st.byKey[key]; s != nil && s.uid == uid {
		f()
	}
}
