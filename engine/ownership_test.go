package engine

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// TestConcurrentCreateHasOneOwner runs two sets (two inventories, one field manager, as two
// Syncs of one daemon) that declare the same new objects, started at the same moment, for
// several rounds. Invariants I11 and I2: every object has exactly one owner from its creation
// on, its data is the owner's version, only the owner's inventory lists it (the other's
// write-ahead entry is removed again, the object is not deleted), and the other set reports
// the overlap (ErrNotOwned) in that very run.
//
// Both engines read the API server directly (the CLI), or both run a watch cache (the daemon).
//
// Without it: both applies were server-side applies of the shared field manager, so the
// second silently rewrote the first's owner annotation and data, and both runs reported
// "created" and recorded the object (direct engines: 8, 10, 9 and 9 of 10 rounds failed in
// four runs; watch engines: 8 of 10).
func TestConcurrentCreateHasOneOwner(t *testing.T) {
	t.Run("direct", func(t *testing.T) { concurrentCreate(t, false) })
	t.Run("watch", func(t *testing.T) { concurrentCreate(t, true) })
}

func concurrentCreate(t *testing.T, watch bool) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Prune = false // each round declares new objects; the earlier ones stay
	var other *Engine
	if watch {
		h.useWatchEngine(Options{})
		other = runWatchEngine(t)
	} else {
		var err error
		if other, err = New(env.Config, Options{}); err != nil {
			t.Fatal(err)
		}
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
			var err error
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

// runWatchEngine starts an engine with a watch cache on the test cluster, running until the
// test ends.
func runWatchEngine(t *testing.T) *Engine {
	t.Helper()
	eng, err := New(env.Config, Options{Watch: true, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, eng)
	return eng
}

// immutableCM is a ConfigMap whose data cannot change (immutable: true).
func immutableCM(ns, name, v string) *unstructured.Unstructured {
	u := configMap(ns, name, map[string]any{"k": v})
	u.Object["immutable"] = true
	return u
}

// TestForceRecreatesOnlyOurs checks I1 and I11 for ApplyOptions.Force: an immutable-field
// change recreates only an object our inventory owns (our owner annotation, the UID we
// recorded). An object without the annotation that another tool manages (Helm, kubectl's
// client-side apply) is not adopted at all without ApplyOptions.Adopt, with a message naming
// it and the manager, and even with Adopt a forced recreate never deletes it; an object
// recreated by someone else under our annotation (another UID) is not deleted either.
//
// Without it: every unannotated object was adopted silently, and Force deleted the Helm
// object and the look-alike.
func TestForceRecreatesOnlyOurs(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Force = true
	// Helm's object: created with an update (not an apply) by manager "helm".
	helm := immutableCM(h.ns, "helm", "1")
	if err := h.plain.Create(h.ctx, helm, client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}
	// Ours, then recreated by someone else with our annotation: another UID.
	h.apply(opts, immutableCM(h.ns, "swapped", "1"))
	if err := h.plain.Delete(h.ctx, h.liveCM("swapped")); err != nil {
		t.Fatal(err)
	}
	lookalike := annotate(immutableCM(h.ns, "swapped", "1"), OwnerAnnotation, h.ref.ID)
	if err := h.plain.Create(h.ctx, lookalike, client.FieldOwner("restore-tool")); err != nil {
		t.Fatal(err)
	}
	before := map[string]*unstructured.Unstructured{"helm": h.liveCM("helm"), "swapped": h.liveCM("swapped")}

	res, err := h.eng.Apply(h.ctx, h.set(immutableCM(h.ns, "helm", "2"), immutableCM(h.ns, "swapped", "2")), opts)
	if err == nil || !errors.Is(err, ErrNotAdopted) || !strings.Contains(err.Error(), "ConfigMap "+h.ns+"/helm") ||
		!strings.Contains(err.Error(), `"helm"`) {
		t.Errorf("Apply error = %v, want the Helm object refused (%v), naming ConfigMap %s/helm and its manager", err, ErrNotAdopted, h.ns)
	}
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "swapped")) || !strings.Contains(err.Error(), "not recreated") {
		t.Errorf("Apply error = %v, want swapped refused (not recreated)", err)
	}
	if diff := actions(res.Changes); diff[cmID(h.ns, "helm")] != ActionFailed || diff[cmID(h.ns, "swapped")] != ActionFailed {
		t.Errorf("actions = %v, want both failed", diff)
	}
	if _, ok := h.inventory()[cmID(h.ns, "helm")]; ok {
		t.Error("the refused Helm object is listed in our inventory")
	}

	// With Adopt, the Helm object is adopted, but Force still does not delete it: it is not
	// ours until an apply has put our annotation on it.
	opts.Adopt = true
	_, err = h.eng.Apply(h.ctx, h.set(immutableCM(h.ns, "helm", "2")), opts)
	if err == nil || !strings.Contains(err.Error(), "not recreated") {
		t.Errorf("adopt and force an immutable change of the Helm object: error %v, want not recreated", err)
	}
	for name, b := range before {
		live := h.liveCM(name)
		if live == nil || live.GetUID() != b.GetUID() {
			t.Errorf("I1: force deleted %s, which is not ours", name)
			continue
		}
		if v, _, _ := unstructured.NestedString(live.Object, "data", "k"); v != "1" {
			t.Errorf("%s changed: data.k = %q", name, v)
		}
	}
	// Our own object is still recreated.
	h.apply(opts, immutableCM(h.ns, "mine", "1"))
	uid := h.liveCM("mine").GetUID()
	h.apply(opts, immutableCM(h.ns, "mine", "2"))
	if live := h.liveCM("mine"); live.GetUID() == uid {
		t.Error("Force did not recreate our own object")
	}
}

// TestAdoptNeedsOptIn checks the adoption rule of an object without an owner annotation: one
// another tool manages (here kubectl's client-side apply: its manager and its
// last-applied-configuration annotation) is refused, named with its manager, left unchanged
// and not inventoried, until ApplyOptions.Adopt; one only our own field manager ever wrote (an
// install from before the annotation) is adopted silently, as before; and one our inventory
// recorded, whose annotation someone removed (another manager, which set a label), is ours
// and gets it back
// (I11, I2).
//
// Without it: both were adopted without a word.
func TestAdoptNeedsOptIn(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	kubectl := annotate(configMap(h.ns, "kubectl", map[string]any{"k": "theirs"}),
		"kubectl.kubernetes.io/last-applied-configuration", `{"apiVersion":"v1","kind":"ConfigMap"}`)
	if err := h.plain.Create(h.ctx, kubectl, client.FieldOwner("kubectl-client-side-apply")); err != nil {
		t.Fatal(err)
	}
	legacy := configMap(h.ns, "legacy", map[string]any{"k": "old"})
	if err := h.plain.Patch(h.ctx, legacy, client.Apply, client.FieldOwner(FieldManager)); err != nil { //nolint:staticcheck // SSA as an old install did
		t.Fatal(err)
	}
	h.apply(opts, configMap(h.ns, "stripped", map[string]any{"k": "ours"}))
	stripped := h.liveCM("stripped")
	stripped.SetAnnotations(nil)
	stripped.SetLabels(map[string]string{"edited-by": "someone"}) // so that manager owns a field
	if err := h.plain.Update(h.ctx, stripped, client.FieldOwner("kubectl-annotate")); err != nil {
		t.Fatal(err)
	}
	desired := func() []*unstructured.Unstructured {
		return []*unstructured.Unstructured{configMap(h.ns, "kubectl", map[string]any{"k": "ours"}),
			configMap(h.ns, "legacy", map[string]any{"k": "ours"}), configMap(h.ns, "stripped", map[string]any{"k": "ours"})}
	}
	res, err := h.eng.Apply(h.ctx, h.set(desired()...), opts)
	if err == nil || !errors.Is(err, ErrNotAdopted) || !IsTerminal(err) ||
		!strings.Contains(err.Error(), "ConfigMap "+h.ns+"/kubectl") || !strings.Contains(err.Error(), "kubectl-client-side-apply") {
		t.Errorf("Apply error = %v, want a terminal %v naming ConfigMap %s/kubectl and its manager", err, ErrNotAdopted, h.ns)
	}
	want := map[string]Action{cmID(h.ns, "kubectl"): ActionFailed, cmID(h.ns, "legacy"): ActionConfigured,
		cmID(h.ns, "stripped"): ActionConfigured}
	if diff := cmp.Diff(want, actions(res.Changes)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("kubectl").Object, "data", "k"); v != "theirs" {
		t.Errorf("the refused object changed: data.k = %q", v)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "legacy"), cmID(h.ns, "stripped"))
	for _, name := range []string{"legacy", "stripped"} {
		if got := h.liveCM(name).GetAnnotations()[OwnerAnnotation]; got != h.ref.ID {
			t.Errorf("%s owner annotation = %q, want ours", name, got)
		}
	}

	opts.Adopt = true
	res = h.apply(opts, desired()...)
	if got := actions(res.Changes)[cmID(h.ns, "kubectl")]; got != ActionConfigured {
		t.Errorf("with Adopt: %s, want %s", got, ActionConfigured)
	}
	live := h.liveCM("kubectl")
	if v, _, _ := unstructured.NestedString(live.Object, "data", "k"); v != "ours" || live.GetAnnotations()[OwnerAnnotation] != h.ref.ID {
		t.Errorf("with Adopt: data.k = %q, owner %q", v, live.GetAnnotations()[OwnerAnnotation])
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "legacy"), cmID(h.ns, "stripped"), cmID(h.ns, "kubectl"))
}

// TestRecoveredCopyDoesNotAdopt: when the inventory ConfigMap is gone, a recovery copy
// (ApplyOptions.Recover, kept in a Sync's status that anyone with status rights can write)
// that lists an unannotated object another tool manages, with its real UID, does not make
// the object ours: it is refused as without the copy, left unchanged and not inventoried
// (I11).
//
// Without it: the copy's UID counted as recorded, and spec.adopt was skipped.
func TestRecoveredCopyDoesNotAdopt(t *testing.T) {
	h := newHarness(t, Hooks{})
	helm := configMap(h.ns, "helm", map[string]any{"k": "theirs"})
	if err := h.plain.Create(h.ctx, helm, client.FieldOwner("helm")); err != nil {
		t.Fatal(err)
	}
	opts := testOpts()
	forged := &inventory.Inventory{}
	forged.Add(entryOf(h.liveCM("helm")))
	opts.Recover = RecoverFrom(forged)
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "helm", map[string]any{"k": "ours"})), opts)
	if err == nil || !errors.Is(err, ErrNotAdopted) {
		t.Errorf("Apply error = %v, want %v", err, ErrNotAdopted)
	}
	if got := actions(res.Changes)[cmID(h.ns, "helm")]; got != ActionFailed {
		t.Errorf("action = %s, want %s", got, ActionFailed)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("helm").Object, "data", "k"); v != "theirs" {
		t.Errorf("the refused object changed: data.k = %q", v)
	}
	if _, ok := h.inventory()[cmID(h.ns, "helm")]; ok {
		t.Error("the refused object is listed in our inventory")
	}
}
