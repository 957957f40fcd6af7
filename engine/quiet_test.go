package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestQuietAnswersOnlyWhileNothingChanged: after a run under a Set.Key that changed
// nothing, Quiet answers the next run under that key (every object unchanged) without the
// set; it stops answering when an object of the set is changed or deleted out of band, when
// the inventory's ConfigMap is edited, and under another key; a run that changed something
// is not clean, the next one is.
func TestQuietAnswersOnlyWhileNothingChanged(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.useWatchEngine(Options{Heads: runHeads(t)})
	opts := testOpts()
	opts.Wait = true
	const key = "render-1"
	run := func() *Result {
		t.Helper()
		set := h.set(manyCMs(h.ns, "1", 10)...)
		set.Key = key
		res, err := h.eng.Apply(h.ctx, set, opts)
		if err != nil {
			t.Fatalf("Apply: %v", err)
		}
		return res
	}
	// quiet runs the set until Quiet answers (a run may still meet the events of the last
	// writes), and checks its answer.
	quiet := func(what string) {
		t.Helper()
		for range 50 {
			if res, ok := h.eng.Quiet(h.ref, key); ok {
				if s := res.Summary(); s.Unchanged != 10 || s.Created+s.Configured+s.Pruned+s.Failed+s.NotReady != 0 || res.Inventory.Len() != 10 {
					t.Fatalf("%s: Quiet answered %+v with %d inventory entries, want 10 unchanged", what, s, res.Inventory.Len())
				}
				return
			}
			run()
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: Quiet never answered", what)
	}
	// stops waits until Quiet no longer answers (the cache's event reached it).
	stops := func(what string) {
		t.Helper()
		for range 100 {
			if _, ok := h.eng.Quiet(h.ref, key); !ok {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("Quiet still answers after %s", what)
	}

	if _, ok := h.eng.Quiet(h.ref, key); ok {
		t.Fatal("Quiet answered before any run")
	}
	run()
	quiet("after the first runs")
	if _, ok := h.eng.Quiet(h.ref, "render-2"); ok {
		t.Error("Quiet answered under another key")
	}

	cm := &corev1.ConfigMap{}
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "cm-03"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["v"] = "edited"
	if err := h.plain.Update(h.ctx, cm); err != nil {
		t.Fatal(err)
	}
	stops("an object edited out of band")
	if got := actions(run().Changes)[cmID(h.ns, "cm-03")]; got != ActionConfigured {
		t.Errorf("the run after the edit: cm-03 %s, want configured", got)
	}
	quiet("after the edit was corrected")

	if err := h.plain.Delete(h.ctx, &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta}); err != nil {
		t.Fatal(err)
	}
	stops("an object deleted out of band")
	if got := actions(run().Changes)[cmID(h.ns, "cm-03")]; got != ActionCreated {
		t.Errorf("the run after the delete: cm-03 %s, want created", got)
	}
	quiet("after the delete was corrected")

	inv := &corev1.ConfigMap{}
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: h.ref.Name}, inv); err != nil {
		t.Fatal(err)
	}
	inv.Annotations = map[string]string{"edited": "by hand"}
	if err := h.plain.Update(h.ctx, inv); err != nil {
		t.Fatal(err)
	}
	stops("the inventory edited")
	quiet("after the inventory edit")

	// An owner annotation rewritten to another inventory: a full run refuses the object
	// (not ours any more), so Quiet must not answer for it either.
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "cm-05"}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Annotations[OwnerAnnotation] = "someone-else"
	if err := h.plain.Update(h.ctx, cm); err != nil {
		t.Fatal(err)
	}
	stops("an object's owner annotation rewritten")
}

// TestQuietCountsOnlyInventoriesItRan: the cache's events about objects whose owner
// annotation names an inventory this engine never ran (anybody may write the annotation,
// any value) keep nothing, and an inventory deleted or released is forgotten: the counts
// stay bounded by the inventories the engine runs.
func TestQuietCountsOnlyInventoriesItRan(t *testing.T) {
	q := newQuietRuns()
	w := &watchCache{memo: newMemo(), quiet: q}
	gk := schema.GroupKind{Kind: "ConfigMap"}
	for i := range 1000 {
		o := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: fmt.Sprintf("cm-%d", i),
			ResourceVersion: "1", Annotations: map[string]string{OwnerAnnotation: fmt.Sprintf("owner-%d-%s", i, strings.Repeat("x", 1024))}}}
		w.onAdd(gk, o)
		w.onDelete(o)
	}
	before := q.count("sync_a")
	w.onDelete(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{OwnerAnnotation: "sync_a"}}})
	if q.count("sync_a") == before {
		t.Error("an event about an inventory being run was not counted")
	}
	// A run in flight when its inventory is dropped never records a clean run over an
	// event that came after the drop.
	started := q.count("sync_a")
	q.drop("sync_a")
	w.onDelete(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{OwnerAnnotation: "sync_a"}}})
	q.count("sync_a") // another run starts
	q.record("sync_a", cleanRun{key: "k", events: started})
	if _, ok := q.get("sync_a", "k"); ok {
		t.Error("a run that started before its inventory was dropped recorded a clean run")
	}
	q.drop("sync_a")
	q.mu.Lock()
	kept := len(q.events)
	q.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d inventories counted, want none: only inventories being run are, until dropped", kept)
	}
}
