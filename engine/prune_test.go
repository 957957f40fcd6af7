package engine

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/e2e/fault"
)

func TestCheckPrune(t *testing.T) {
	tests := []struct {
		name                string
		desired, candidates int
		allowEmpty          bool
		budget              int
		wantRefused         bool
	}{
		{name: "nothing to prune", desired: 0, candidates: 0},
		{name: "empty set refused", desired: 0, candidates: 2, wantRefused: true},
		{name: "empty set allowed", desired: 0, candidates: 2, allowEmpty: true},
		{name: "within budget", desired: 5, candidates: 2, budget: 2},
		{name: "over budget", desired: 5, candidates: 3, budget: 2, wantRefused: true},
		{name: "unlimited", desired: 5, candidates: 300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkPrune(tt.desired, tt.candidates, ApplyOptions{AllowEmpty: tt.allowEmpty, PruneBudget: tt.budget})
			if got := errors.Is(err, ErrPruneRefused); got != tt.wantRefused {
				t.Errorf("checkPrune = %v, want refused %v", err, tt.wantRefused)
			}
		})
	}
}

// TestPruneRefused checks I8: a prune above the budget and a prune of everything (empty
// set) are refused before anything is written, unless allowed.
func TestPruneRefused(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "a", nil), configMap(h.ns, "b", nil), configMap(h.ns, "c", nil))

	budget := opts
	budget.PruneBudget = 1
	_, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "a", nil), configMap(h.ns, "new", nil)), budget)
	if !errors.Is(err, ErrPruneRefused) || !IsTerminal(err) {
		t.Errorf("over budget: error = %v, want a terminal ErrPruneRefused", err)
	}
	_, err = h.eng.Apply(h.ctx, h.set(), opts)
	if !errors.Is(err, ErrPruneRefused) {
		t.Errorf("empty set: error = %v, want ErrPruneRefused", err)
	}
	if h.liveCM("new") != nil {
		t.Error("a refused run applied objects")
	}
	for _, n := range []string{"a", "b", "c"} {
		if h.liveCM(n) == nil {
			t.Errorf("a refused prune deleted %s", n)
		}
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"), cmID(h.ns, "b"), cmID(h.ns, "c"))

	opts.AllowEmpty = true
	res := h.apply(opts)
	if diff := cmp.Diff(Summary{Pruned: 3}, res.Summary()); diff != "" {
		t.Errorf("allowed empty prune (-want +got):\n%s", diff)
	}
	wantKeys(t, "inventory", h.inventory())
}

// TestPruneLeavesWhatIsNotOurs covers the objects a prune must not delete. Invariants: I1
// (no delete of an object without our owner annotation — a foreign look-alike that got
// into the inventory, a UID-swapped object recreated by someone else), the prune-disabled
// annotation, and that such entries leave the inventory instead of lingering.
func TestPruneLeavesWhatIsNotOurs(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	keep := annotate(configMap(h.ns, "keep", nil), PruneAnnotation, PruneDisabled)
	h.apply(opts, configMap(h.ns, "a", nil), keep, configMap(h.ns, "swapped", nil))

	// A foreign object that looks like ours (same labels, another owner), smuggled into our
	// inventory as a corrupted or hand-edited inventory would.
	foreign := annotate(configMap(h.ns, "foreign", map[string]any{"x": "y"}), OwnerAnnotation, "someone-else")
	foreign.SetLabels(map[string]string{"app": "demo"})
	if err := h.plain.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	unannotated := configMap(h.ns, "unannotated", nil)
	if err := h.plain.Create(h.ctx, unannotated); err != nil {
		t.Fatal(err)
	}
	inv, err := h.eng.Inventory(h.ctx, h.ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []*unstructured.Unstructured{foreign, unannotated} {
		inv.Add(entryOf(u))
	}
	if err := h.eng.store.Write(h.ctx, h.ref, inv); err != nil {
		t.Fatal(err)
	}
	// Someone deletes "swapped" and recreates it with our annotation: a new UID.
	old := h.liveCM("swapped")
	if err := h.plain.Delete(h.ctx, old); err != nil {
		t.Fatal(err)
	}
	recreated := annotate(configMap(h.ns, "swapped", nil), OwnerAnnotation, h.ref.ID)
	if err := h.plain.Create(h.ctx, recreated); err != nil {
		t.Fatal(err)
	}
	foreignRV := h.liveCM("foreign").GetResourceVersion()

	res := h.apply(opts, configMap(h.ns, "a", nil))
	want := map[string]Action{cmID(h.ns, "keep"): ActionSkipped, cmID(h.ns, "swapped"): ActionSkipped,
		cmID(h.ns, "foreign"): ActionSkipped, cmID(h.ns, "unannotated"): ActionSkipped}
	if diff := cmp.Diff(want, actions(res.Pruned)); diff != "" {
		t.Errorf("prune actions (-want +got):\n%s", diff)
	}
	for _, name := range []string{"keep", "swapped", "foreign", "unannotated"} {
		if h.liveCM(name) == nil {
			t.Errorf("I1: %s was deleted", name)
		}
	}
	if got := h.liveCM("foreign").GetResourceVersion(); got != foreignRV {
		t.Errorf("I1: the foreign object was modified (resourceVersion %s -> %s)", foreignRV, got)
	}
	if got := h.liveCM("swapped").GetUID(); got == old.GetUID() {
		t.Error("test setup: swapped kept its UID")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"))
}

// TestDeleteDeniedStaysTracked checks I3 then I7: a prune whose DELETE is denied (403)
// fails, keeps the object and its inventory entry; once allowed, the next run prunes it
// and the inventory shrinks.
func TestDeleteDeniedStaysTracked(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "a", nil), configMap(h.ns, "b", nil))
	h.rt.SetRules(fault.Rule{Verb: "delete", Resource: "configmaps", Name: "b", Status: http.StatusForbidden})
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "a", nil)), opts)
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "b")) {
		t.Fatalf("Apply error = %v, want a prune error naming b", err)
	}
	if got := actions(res.Pruned)[cmID(h.ns, "b")]; got != ActionFailed {
		t.Errorf("prune action = %s, want failed", got)
	}
	if h.liveCM("b") == nil {
		t.Fatal("denied delete: b is gone")
	}
	wantKeys(t, "I3: inventory after a denied delete", h.inventory(), cmID(h.ns, "a"), cmID(h.ns, "b"))

	h.rt.SetRules()
	res = h.apply(opts, configMap(h.ns, "a", nil))
	if got := actions(res.Pruned)[cmID(h.ns, "b")]; got != ActionPruned {
		t.Errorf("retry prune action = %s, want pruned", got)
	}
	if h.liveCM("b") != nil {
		t.Error("b survived the allowed retry")
	}
	wantKeys(t, "inventory after retry", h.inventory(), cmID(h.ns, "a"))
}

// TestDeleteConflictKeepsEntry replays fault-sweep seed 40: a 409 on a prune's DELETE is not
// a UID-precondition failure, and the entry must not be dropped while the object still
// lives with our annotation (I2). The object is read again: it stays tracked, and the next
// run prunes it (I3, I7).
func TestDeleteConflictKeepsEntry(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, cms(h.ns, "a", "b")...)
	h.rt.SetRules(fault.Rule{Verb: "delete", Resource: "configmaps", Name: "b", Times: 1, Status: http.StatusConflict})
	if _, err := h.eng.Apply(h.ctx, h.set(cms(h.ns, "a")...), opts); err == nil {
		t.Error("a conflicted delete was reported as success")
	}
	h.ownedSubsetOfInventory()
	wantKeys(t, "inventory after the conflicted delete", h.inventory(), cmID(h.ns, "a"), cmID(h.ns, "b"))
	h.apply(opts, cms(h.ns, "a")...)
	if h.liveCM("b") != nil {
		t.Error("b survived the retry")
	}
	wantKeys(t, "inventory after the retry", h.inventory(), cmID(h.ns, "a"))
}

// TestWatchPruneOneRequestEach checks a prune through the watch cache costs one DELETE per
// pruned object (UID and resourceVersion preconditions, no GET), and still leaves a foreign
// object alone (I1).
func TestWatchPruneOneRequestEach(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 10)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	h.rt.Reset()
	res := h.apply(opts, objs[:6]...)
	if s := res.Summary(); s.Pruned != 4 {
		t.Fatalf("pruned %d, want 4: %+v", s.Pruned, res.Pruned)
	}
	deletes, gets := h.rt.Count("delete"), h.rt.Count("get")
	if deletes != 4 {
		t.Errorf("%d DELETE requests for 4 prunes, want 4", deletes)
	}
	// The inventory read, and the record update's read: nothing per pruned object.
	if gets > 2 {
		t.Errorf("%d GET requests during a 4-object prune, want at most 2 (no GET per object)", gets)
	}
	for i := 6; i < 10; i++ {
		if h.liveCM(fmt.Sprintf("cm-%02d", i)) != nil {
			t.Errorf("cm-%02d survived the prune", i)
		}
	}
}
