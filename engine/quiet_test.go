package engine

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
}
