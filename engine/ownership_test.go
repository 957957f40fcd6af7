package engine

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/inventory"
)

// TestConcurrentCreateHasOneOwner runs two sets (two inventories, one field manager, as two
// Syncs of one daemon) that declare the same new objects, started at the same moment, for
// several rounds. Invariants I11 and I2: every object has exactly one owner from its creation
// on, its data is the owner's version, only the owner's inventory lists it (the other's
// write-ahead entry is removed again, the object is not deleted), and the other set reports
// the overlap (ErrNotOwned) in that very run.
//
// It failed before: both applies were server-side applies of the shared field manager, so the
// second silently rewrote the first's owner annotation and data, and both runs reported
// "created" and recorded the object (5 of 10 rounds failed in one run, 7 in another).
func TestConcurrentCreateHasOneOwner(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Prune = false // each round declares new objects; the earlier ones stay
	other, err := New(env.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	engines := []*Engine{h.eng, other}
	refs := []inventory.Ref{h.ref, {Namespace: h.ns, Name: "other-inventory", ID: "other-" + h.ns}}
	store := inventory.NewStore(h.plain)
	const rounds = 10
	failedRounds := 0
	for round := range rounds {
		names := []string{fmt.Sprintf("r%02d-a", round), fmt.Sprintf("r%02d-b", round), fmt.Sprintf("r%02d-c", round)}
		var results [2]*Result
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range engines {
			objs := make([]*unstructured.Unstructured, 0, len(names))
			for _, n := range names {
				objs = append(objs, configMap(h.ns, n, map[string]any{"by": refs[i].ID}))
			}
			wg.Go(func() {
				<-start
				results[i], errs[i] = engines[i].Apply(h.ctx, Set{Inventory: refs[i], Objects: objs}, opts)
			})
		}
		close(start)
		wg.Wait()
		var invs [2]*inventory.Inventory
		for i := range refs {
			if invs[i], err = store.Get(h.ctx, refs[i]); err != nil {
				t.Fatal(err)
			}
		}
		bad := false
		for _, n := range names {
			live := h.liveCM(n)
			owner := live.GetAnnotations()[OwnerAnnotation]
			w := -1
			for i := range refs {
				if refs[i].ID == owner {
					w = i
				}
			}
			if w < 0 {
				t.Errorf("round %d: %s has owner %q, want one of the two inventories", round, n, owner)
				bad = true
				continue
			}
			l := 1 - w
			id := idOf(live)
			if by, _, _ := unstructured.NestedString(live.Object, "data", "by"); by != owner {
				t.Errorf("round %d: %s is owned by %s but holds %s's data", round, n, owner, by)
				bad = true
			}
			if got := invs[w].UID(id); got != live.GetUID() {
				t.Errorf("round %d: the owner's inventory has %s with UID %q, want %q", round, n, got, live.GetUID())
				bad = true
			}
			if invs[l].Has(id) {
				t.Errorf("round %d: %s is listed by %s's inventory, but %s owns it", round, n, refs[l].ID, owner)
				bad = true
			}
			var loser Change
			for _, c := range results[l].Changes {
				if c.Object == id {
					loser = c
				}
			}
			if loser.Action != ActionFailed || !errors.Is(loser.Err, ErrNotOwned) || !errors.Is(errs[l], ErrNotOwned) {
				t.Errorf("round %d: the other set's run reported %s %q (run error %v), want the overlap (%v)",
					round, loser.Action, loser.Message, errs[l], ErrNotOwned)
				bad = true
			}
		}
		if bad {
			failedRounds++
		}
	}
	if failedRounds > 0 {
		t.Errorf("%d of %d rounds broke single ownership", failedRounds, rounds)
	}
}
