package engine

import (
	"github.com/converge-dev/converge/e2e/fault"

	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestApplyLifecycle applies a set, re-applies it unchanged, changes one object and drops
// one. Invariants: I2 (every created object is inventoried, with its UID), I7 (a converged
// re-apply is all unchanged and sends zero mutating requests, also to the inventory), I1
// (the prune deletes exactly the dropped object), and a Secret diff never shows values.
func TestApplyLifecycle(t *testing.T) {
	h := newHarness(t, Hooks{})
	secret := obj("v1", "Secret", h.ns, "s", map[string]any{"stringData": map[string]any{"password": "hunter2"}})
	objs := func(bData string) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			configMap(h.ns, "a", map[string]any{"k": "1"}),
			configMap(h.ns, "b", map[string]any{"k": bData}),
			configMap(h.ns, "c", map[string]any{"k": "3"}),
			secret.DeepCopy(),
		}
	}
	opts := testOpts()
	res := h.apply(opts, objs("2")...)
	if diff := cmp.Diff(Summary{Created: 4}, res.Summary()); diff != "" {
		t.Fatalf("first apply (-want +got):\n%s", diff)
	}
	inv := h.inventory()
	wantKeys(t, "inventory", inv, cmID(h.ns, "a"), cmID(h.ns, "b"), cmID(h.ns, "c"), h.ns+"_s__Secret")
	if got, want := inv[cmID(h.ns, "a")], h.liveCM("a").GetUID(); got != want {
		t.Errorf("inventory UID of a = %q, want live UID %q", got, want)
	}
	if got := h.liveCM("a").GetAnnotations()[OwnerAnnotation]; got != h.ref.ID {
		t.Errorf("owner annotation = %q, want %q", got, h.ref.ID)
	}

	h.rt.Reset()
	res = h.apply(opts, objs("2")...)
	if diff := cmp.Diff(Summary{Unchanged: 4}, res.Summary()); diff != "" {
		t.Errorf("re-apply (-want +got):\n%s", diff)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("I7: a no-op re-apply sent writes: %v", w)
	}

	dry := opts
	dry.DryRun = true
	changedSecret := obj("v1", "Secret", h.ns, "s", map[string]any{"stringData": map[string]any{"password": "swordfish"}})
	res = h.apply(dry, append(objs("2")[:3], changedSecret)...)
	for _, c := range res.Changes {
		if c.ID == h.ns+"_s__Secret" {
			if c.Action != ActionConfigured || strings.Contains(c.Diff, "swordfish") || strings.Contains(c.Diff, "hunter2") ||
				!strings.Contains(c.Diff, "*** (after)") {
				t.Errorf("secret dry-run change = %s, diff:\n%s", c.Action, c.Diff)
			}
		}
	}

	h.rt.Reset()
	res = h.apply(opts, objs("changed")...)
	want := map[string]Action{cmID(h.ns, "a"): ActionUnchanged, cmID(h.ns, "b"): ActionConfigured,
		cmID(h.ns, "c"): ActionUnchanged, h.ns + "_s__Secret": ActionUnchanged}
	if diff := cmp.Diff(want, actions(res.Changes)); diff != "" {
		t.Errorf("change one (-want +got):\n%s", diff)
	}
	if w := h.rt.Writes(); len(w) != 1 {
		t.Errorf("changing one object sent %d writes, want 1: %v", len(w), w)
	}

	res = h.apply(opts, objs("changed")[1:]...)
	if diff := cmp.Diff(map[string]Action{cmID(h.ns, "a"): ActionPruned}, actions(res.Pruned)); diff != "" {
		t.Errorf("prune (-want +got):\n%s", diff)
	}
	if h.liveCM("a") != nil {
		t.Error("pruned object a still exists")
	}
	wantKeys(t, "inventory after prune", h.inventory(), cmID(h.ns, "b"), cmID(h.ns, "c"), h.ns+"_s__Secret")
}

// TestOwnershipConflict checks I11: a desired object that another inventory owns is not
// adopted (failed, naming the other inventory), the rest of the set is applied, and a
// partial failure prunes nothing (I8).
func TestOwnershipConflict(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))
	theirs := annotate(configMap(h.ns, "theirs", map[string]any{"v": "theirs"}), OwnerAnnotation, "other-inv")
	if err := h.plain.Create(h.ctx, theirs); err != nil {
		t.Fatal(err)
	}
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "mine", nil), configMap(h.ns, "theirs", map[string]any{"v": "mine"})), opts)
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "theirs")) || !strings.Contains(err.Error(), "other-inv") {
		t.Fatalf("Apply error = %v, want one naming %s and other-inv", err, cmID(h.ns, "theirs"))
	}
	if !errors.Is(err, ErrNotOwned) || !IsTerminal(err) {
		t.Errorf("error is not a terminal ErrNotOwned: %v", err)
	}
	want := map[string]Action{cmID(h.ns, "mine"): ActionCreated, cmID(h.ns, "theirs"): ActionFailed}
	if diff := cmp.Diff(want, actions(res.Changes)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if len(res.Pruned) != 0 || h.liveCM("old") == nil {
		t.Errorf("a partial failure pruned: %v", res.Pruned)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("theirs").Object, "data", "v"); v != "theirs" {
		t.Errorf("I11: the other inventory's object was changed: data.v = %q", v)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "old"), cmID(h.ns, "mine"))
}

// TestFieldConflicts checks that a field owned by another manager fails the object unless
// ForceConflicts is set (I11: force only where the user opted in).
func TestFieldConflicts(t *testing.T) {
	h := newHarness(t, Hooks{})
	other := configMap(h.ns, "shared", map[string]any{"k": "theirs"})
	if err := h.plain.Patch(h.ctx, other, client.Apply, client.FieldOwner("other-manager")); err != nil { //nolint:staticcheck // SSA with another manager
		t.Fatal(err)
	}
	opts := testOpts()
	opts.Adopt = true // the object is another manager's: taking it over at all needs the opt-in (TestAdoptNeedsOptIn)
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "shared", map[string]any{"k": "ours"})), opts)
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "shared")) || !strings.Contains(err.Error(), "ForceConflicts") {
		t.Fatalf("Apply error = %v, want a conflict naming the object", err)
	}
	if IsTerminal(err) {
		t.Errorf("a field conflict is classified terminal: %v", err)
	}
	if got := actions(res.Changes)[cmID(h.ns, "shared")]; got != ActionFailed {
		t.Errorf("action = %s, want failed", got)
	}
	opts.ForceConflicts = true
	res = h.apply(opts, configMap(h.ns, "shared", map[string]any{"k": "ours"}))
	if got := actions(res.Changes)[cmID(h.ns, "shared")]; got != ActionConfigured {
		t.Errorf("forced action = %s, want configured", got)
	}
}

// TestImperativeEditIsReverted checks that a field changed with a plain update (kubectl
// edit: an Update manager, not an apply manager) is drift, taken back by the next apply
// without ForceConflicts (I7), while TestFieldConflicts shows apply managers are respected.
func TestImperativeEditIsReverted(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "edited", map[string]any{"k": "ours"}))
	live := h.liveCM("edited")
	if err := unstructured.SetNestedField(live.Object, "by-hand", "data", "k"); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, live, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	res := h.apply(opts, configMap(h.ns, "edited", map[string]any{"k": "ours"}))
	if got := actions(res.Changes)[cmID(h.ns, "edited")]; got != ActionConfigured {
		t.Errorf("action = %s, want configured", got)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("edited").Object, "data", "k"); v != "ours" {
		t.Errorf("data.k = %q after re-apply, want the declared \"ours\"", v)
	}
}

// TestImmutableField checks that an immutable-field change fails terminally naming the
// object and the opt-in, and that the force annotation recreates the object (new UID,
// recorded in the inventory so a later prune can delete it: I2, I1).
func TestImmutableField(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	imm := func(v string) *unstructured.Unstructured {
		u := configMap(h.ns, "imm", map[string]any{"k": v})
		u.Object["immutable"] = true
		return u
	}
	h.apply(opts, imm("1"))
	uid := h.liveCM("imm").GetUID()
	_, err := h.eng.Apply(h.ctx, h.set(imm("2")), opts)
	if err == nil || !strings.Contains(err.Error(), cmName(h.ns, "imm")) || !strings.Contains(err.Error(), ForceAnnotation) {
		t.Fatalf("Apply error = %v, want an immutable error naming the object and %s", err, ForceAnnotation)
	}
	if !IsTerminal(err) {
		t.Errorf("immutable error not terminal: %v", err)
	}
	h.apply(opts, annotate(imm("2"), ForceAnnotation, ForceEnabled))
	live := h.liveCM("imm")
	if v, _, _ := unstructured.NestedString(live.Object, "data", "k"); v != "2" || live.GetUID() == uid {
		t.Errorf("not recreated: data.k = %q, uid %s (old %s)", v, live.GetUID(), uid)
	}
	if got := h.inventory()[cmID(h.ns, "imm")]; got != live.GetUID() {
		t.Errorf("inventory UID = %s, want the new UID %s", got, live.GetUID())
	}
}

// TestReconcileDisabled checks that an object annotated converge.dev/reconcile: disabled is
// skipped (not changed), stays in the inventory and is not pruned.
func TestReconcileDisabled(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "a", map[string]any{"k": "1"}))
	res := h.apply(opts, annotate(configMap(h.ns, "a", map[string]any{"k": "2"}), ReconcileAnnotation, ReconcileDisabled))
	if got := actions(res.Changes)[cmID(h.ns, "a")]; got != ActionSkipped {
		t.Errorf("action = %s, want skipped", got)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("a").Object, "data", "k"); v != "1" {
		t.Errorf("a skipped object was changed: data.k = %q", v)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"))
}

// TestWriteAheadFailure checks I2, I8 and S19: when the write-ahead inventory write fails
// (500), nothing is applied and nothing is pruned.
func TestWriteAheadFailure(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "old", nil))
	h.rt.SetRules(fault.Rule{Verb: "update", Resource: "configmaps", Name: h.ref.Name, Status: http.StatusInternalServerError},
		fault.Rule{Verb: "create", Resource: "configmaps", Status: http.StatusInternalServerError})
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "new", nil)), opts)
	if err == nil || IsTerminal(err) {
		t.Fatalf("Apply error = %v, want a transient write-ahead error", err)
	}
	if len(res.Changes) != 0 || len(res.Pruned) != 0 {
		t.Errorf("changes after a failed write-ahead: %v %v", res.Changes, res.Pruned)
	}
	if h.liveCM("new") != nil || h.liveCM("old") == nil {
		t.Error("objects changed despite the failed write-ahead")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "old"))
}

// TestTargetNamespace checks ApplyOptions.TargetNamespace puts every namespaced object in
// that namespace, whatever the manifest says.
func TestTargetNamespace(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.TargetNamespace = h.ns
	res := h.apply(opts, configMap("somewhere-else", "moved", nil), configMap("", "defaulted", nil))
	if diff := cmp.Diff(map[string]Action{cmID(h.ns, "moved"): ActionCreated, cmID(h.ns, "defaulted"): ActionCreated},
		actions(res.Changes)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if h.liveCM("moved") == nil {
		t.Error("the object was not applied in the target namespace")
	}
}
