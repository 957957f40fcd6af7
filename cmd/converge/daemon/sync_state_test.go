package daemon

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestSyncStateOfARecreatedSyncStartsAfresh: a Sync deleted and re-created under the same
// name between two reconciles (a new UID) inherits nothing of the old one: its state is
// forgotten, and what keeps more of it (metric series, the engine set's hold on its
// identity) is told, with the old state.
func TestSyncStateOfARecreatedSyncStartsAfresh(t *testing.T) {
	states := newSyncStates()
	var told []syncState
	states.onForget(func(_ types.NamespacedName, old syncState) { told = append(told, old) })
	key := types.NamespacedName{Namespace: "ns", Name: "app"}

	states.observe(key, "uid-1")
	states.with(key, func(st *syncState) { st.retries, st.inventoryID, st.user, st.acting = 3, "ns_app", "sa", true })
	states.observe(key, "uid-1") // the same Sync read again
	if len(told) != 0 {
		t.Fatalf("the same Sync read again forgot its state: %+v", told)
	}

	states.observe(key, "uid-2")
	if len(told) != 1 || told[0].retries != 3 || told[0].user != "sa" || !told[0].acting {
		t.Fatalf("told of forgotten states %+v, want the old Sync's (3 retries, acting as sa)", told)
	}
	states.with(key, func(st *syncState) {
		if st.retries != 0 || st.acting || st.uid != "uid-2" {
			t.Errorf("the new Sync's state = %+v, want empty with uid-2", *st)
		}
	})
	if states.owner("ns_app", func(types.NamespacedName, *syncState) {}) {
		t.Errorf("the old Sync's inventory still names an owner")
	}
}

// TestSyncStateInventoryOwner: the owner of an inventory follows the Sync's last apply: a
// Sync that moves to another inventory ID no longer owns the old one, and forgetting it
// leaves no owner.
func TestSyncStateInventoryOwner(t *testing.T) {
	states := newSyncStates()
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	owns := func(id string) bool { return states.owner(id, func(types.NamespacedName, *syncState) {}) }

	states.with(key, func(st *syncState) { st.inventoryID = "a" })
	states.with(key, func(st *syncState) { st.inventoryID = "b" })
	if owns("a") || !owns("b") {
		t.Errorf("after moving to inventory b: owns a = %v, owns b = %v; want false, true", owns("a"), owns("b"))
	}
	states.forget(key)
	if owns("b") || states.known(key) {
		t.Errorf("a forgotten Sync still owns b (%v) or has a state (%v)", owns("b"), states.known(key))
	}
}

// TestSyncStateWithoutUIDIsNotAdopted: a state written after its Sync was forgotten (a late
// write with no reconcile's read behind it) is not taken over by the next Sync read under
// the name: it is forgotten, and what it holds (an identity) released.
func TestSyncStateWithoutUIDIsNotAdopted(t *testing.T) {
	states := newSyncStates()
	var told []syncState
	states.onForget(func(_ types.NamespacedName, old syncState) { told = append(told, old) })
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	states.observe(key, "uid-a")
	states.forget(key)
	states.with(key, func(st *syncState) { st.retries, st.user, st.acting = 7, "sa", true })
	states.observe(key, "uid-b")
	states.with(key, func(st *syncState) {
		if st.retries != 0 || st.acting {
			t.Errorf("the Sync read as uid-b took over a state left without a UID: %+v", *st)
		}
	})
	if len(told) != 2 || !told[1].acting {
		t.Errorf("told of forgotten states %+v, want the forget and then the late state with its identity", told)
	}
}
