package engine

import (
	"maps"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/inventory"
)

// TestAbandonReleasesOnlyOurs releases a set (I1, I11): a and b lose the owner annotation
// and keep their data, c (taken over by another inventory) and d (deleted and recreated by
// someone else with our annotation copied, another UID) are not touched, and the inventory
// goes. A second Abandon (a retry after a crash) finds nothing to do.
func TestAbandonReleasesOnlyOurs(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.apply(testOpts(), configMap(h.ns, "a", map[string]any{"k": "v"}), configMap(h.ns, "b", nil),
		configMap(h.ns, "c", nil), configMap(h.ns, "d", nil))
	c := h.liveCM("c")
	annotate(c, OwnerAnnotation, "someone-else")
	if err := h.plain.Update(h.ctx, c); err != nil {
		t.Fatal(err)
	}
	d := h.liveCM("d")
	if err := h.plain.Delete(h.ctx, d); err != nil {
		t.Fatal(err)
	}
	look := configMap(h.ns, "d", nil)
	annotate(look, OwnerAnnotation, h.ref.ID)
	if err := h.plain.Create(h.ctx, look); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := h.eng.Abandon(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
			t.Fatalf("Abandon: %v", err)
		}
	}
	for name, want := range map[string]string{"a": "", "b": "", "c": "someone-else", "d": h.ref.ID} {
		live := h.liveCM(name)
		if live == nil {
			t.Errorf("%s was deleted", name)
			continue
		}
		if got := live.GetAnnotations()[OwnerAnnotation]; got != want {
			t.Errorf("%s: owner annotation %q, want %q", name, got, want)
		}
	}
	if data, _, _ := unstructured.NestedString(h.liveCM("a").Object, "data", "k"); data != "v" {
		t.Errorf("a lost its data: %q", data)
	}
	if h.live("v1", "ConfigMap", h.ns, h.ref.Name) != nil {
		t.Error("the inventory ConfigMap survived Abandon")
	}
}

// TestDeleteRecoversLostInventory deletes a set whose inventory ConfigMap was lost, from a
// recovery copy: what is ours goes, the look-alike without our annotation stays (I1), and
// no ConfigMap is written back.
func TestDeleteRecoversLostInventory(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.apply(testOpts(), configMap(h.ns, "a", nil), configMap(h.ns, "b", nil))
	copyInv := inventory.New(entryOf(h.liveCM("a")), entryOf(h.liveCM("b")), entryOf(configMap(h.ns, "plain", nil)))
	if err := h.plain.Create(h.ctx, configMap(h.ns, "plain", nil)); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Delete(h.ctx, h.live("v1", "ConfigMap", h.ns, h.ref.Name)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Delete(h.ctx, h.ref, DeleteOptions{Concurrency: 2}); err != nil {
		t.Fatalf("Delete without a copy: %v", err)
	}
	if h.liveCM("a") == nil {
		t.Fatal("Delete without a copy deleted a")
	}
	if _, err := h.eng.Delete(h.ctx, h.ref, DeleteOptions{Concurrency: 2, Recover: RecoverFrom(copyInv)}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if h.liveCM("a") != nil || h.liveCM("b") != nil || h.liveCM("plain") == nil {
		t.Errorf("after Delete from the copy: a %v, b %v, plain %v (want gone, gone, kept)",
			h.liveCM("a") != nil, h.liveCM("b") != nil, h.liveCM("plain") != nil)
	}
	if h.live("v1", "ConfigMap", h.ns, h.ref.Name) != nil {
		t.Error("Delete wrote a ConfigMap back")
	}
}

// TestAbandonKeepsEntryAddedMeanwhile (I2 with two writers): another writer records an
// object under the inventory and creates it while Abandon releases the others, after
// Abandon read the inventory. The inventory ConfigMap must not go with that entry in it:
// Abandon fails with a conflict, and its retry releases the new object too. Without it,
// the ConfigMap was deleted whatever it listed by then, and the new object carried our
// owner annotation with no inventory listing it (the test failed on I2).
func TestAbandonKeepsEntryAddedMeanwhile(t *testing.T) {
	var h *harness
	var once sync.Once
	h = newHarness(t, Hooks{AfterAbandon: func(j int, _ string) error {
		if j == 2 {
			once.Do(func() { h.addOwned("late") })
		}
		return nil
	}})
	h.apply(testOpts(), configMap(h.ns, "a", nil), configMap(h.ns, "b", nil))
	_, err := h.eng.Abandon(h.ctx, h.ref, DefaultDeleteOptions())
	if !apierrors.IsConflict(err) {
		t.Errorf("Abandon with an entry added meanwhile: %v, want a conflict", err)
	}
	h.ownedSubsetOfInventory()
	if _, err := h.eng.Abandon(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
		t.Fatalf("Abandon retried: %v", err)
	}
	for _, name := range []string{"a", "b", "late"} {
		if got := h.liveCM(name).GetAnnotations()[OwnerAnnotation]; got != "" {
			t.Errorf("%s still carries our owner annotation %q", name, got)
		}
	}
	if h.live("v1", "ConfigMap", h.ns, h.ref.Name) != nil {
		t.Error("the inventory ConfigMap survived Abandon")
	}
}

// addOwned does what another writer's apply of a new object does: records it in the
// inventory, then creates it with our owner annotation.
func (h *harness) addOwned(name string) {
	h.t.Helper()
	cm := configMap(h.ns, name, nil)
	annotate(cm, OwnerAnnotation, h.ref.ID)
	if _, err := inventory.NewStore(h.plain).Update(h.ctx, h.ref, func(s *inventory.Inventory) *inventory.Inventory {
		return s.Union(inventory.New(inventory.Entry{Object: idOf(cm)}))
	}); err != nil {
		h.t.Error(err)
		return
	}
	if err := h.plain.Create(h.ctx, cm); err != nil {
		h.t.Error(err)
	}
}

// TestScopedAbandonRemovesScopeLabel: a scoped engine (a daemon's shard) stamps its label on
// every object it applies; abandoning the set (deletionPolicy Orphan) releases the objects
// of that label too, so a released object carries nothing of converge's. Only the scope's
// own value goes: a value changed since (here by a user, to "z") is not ours to remove.
// The objects keep the rest of their metadata and their data. Without it: "a" kept
// the label test.converge.dev/share=a after Abandon.
func TestScopedAbandonRemovesScopeLabel(t *testing.T) {
	h := scopedHarness(t)
	a := configMap(h.ns, "a", map[string]any{"k": "v"})
	a.SetLabels(map[string]string{"app": "x"})
	h.apply(testOpts(), a, configMap(h.ns, "b", nil))
	b := h.liveCM("b")
	labels := b.GetLabels()
	labels[testScopeKey] = "z"
	b.SetLabels(labels)
	if err := h.plain.Update(h.ctx, b); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Abandon(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
		t.Fatalf("Abandon: %v", err)
	}
	for name, want := range map[string]map[string]string{"a": {"app": "x"}, "b": {testScopeKey: "z"}} {
		live := h.liveCM(name)
		if live == nil {
			t.Errorf("%s was deleted", name)
			continue
		}
		if got := live.GetLabels(); !maps.Equal(got, want) {
			t.Errorf("%s: labels %v after Abandon, want %v", name, got, want)
		}
		if got, ok := live.GetAnnotations()[OwnerAnnotation]; ok {
			t.Errorf("%s: owner annotation %q survived Abandon", name, got)
		}
	}
	if data, _, _ := unstructured.NestedString(h.liveCM("a").Object, "data", "k"); data != "v" {
		t.Errorf("a lost its data: %q", data)
	}
}
