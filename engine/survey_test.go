package engine

import (
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// TestNoopNoRequestPerObject checks the re-apply of an unchanged set without the watch
// cache (the CLI): the live objects come from two LISTs per kind and namespace (names, then
// the objects), and each is trusted on its managedFields (appliedAsDesired), so no object
// costs a dry-run or a GET, and nothing is written (I7). Before appliedAsDesired each cost
// one dry-run.
func TestNoopNoRequestPerObject(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 20)
	h.apply(opts, objs...)
	h.rt.Reset()
	res := h.apply(opts, objs...)
	if s := res.Summary(); s.Unchanged != 20 {
		t.Errorf("re-apply: %+v, want 20 unchanged", s)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("re-apply of an unchanged set wrote: %v", w)
	}
	p, g, l := h.rt.Count("patch"), h.rt.CountResource("get", "configmaps", ""), h.rt.Count("list")
	if p != 0 || g > 1 || l != 2 {
		t.Errorf("re-apply of 20 unchanged objects: %d PATCH (dry-runs), %d GET, %d LIST; want 0, at most 1 (the inventory), 2: %v",
			p, g, l, h.rt.Counts())
	}
}

// TestStaleListingIsReadAgain checks that a live object the survey listed is compared with a
// dry-run only at the resourceVersion the dry-run started from: an object edited out of band
// after the LIST is read again, so its drift is found (I7), not hidden by the older copy
// (a DryRun, which always asks the server). A real apply judges a listed object as of its
// LIST (appliedAsDesired): an edit made while the run goes on is found by the next run, as
// one made just after the run would be (with Options.Changed, the edit's watch event triggers it).
func TestStaleListingIsReadAgain(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 2)
	h.apply(opts, objs...)

	listed := h.liveCM("cm-00") // what a LIST would have answered, before the edit below
	edited := listed.DeepCopy()
	if err := unstructured.SetNestedField(edited.Object, "drift", "data", "v"); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, edited, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}

	items, _, err := h.eng.prepare(h.set(objs...), opts)
	if err != nil {
		t.Fatal(err)
	}
	old, err := h.eng.store.Get(h.ctx, h.ref)
	if err != nil {
		t.Fatal(err)
	}
	id := object.ObjMetadata{Namespace: h.ns, Name: "cm-00", GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	r := &applyRun{e: h.eng, ref: h.ref, claim: inventory.Claim{ID: h.ref.ID}, opts: opts, old: old, items: items}
	r.view, r.listed = h.eng.newLiveView(h.ref.ID, opts)
	r.listed.surveyed = map[object.ObjMetadata]*unstructured.Unstructured{id: listed}
	var it *item
	for _, i := range items {
		if i.id == id {
			it = i
		}
	}
	r.opts.DryRun = true
	out, err := r.applyOne(h.ctx, it)
	if err != nil || out.change.Err != nil {
		t.Fatalf("applyOne: %v %v", err, out.change.Err)
	}
	if out.change.Action != ActionConfigured {
		t.Errorf("edited object dry-run from a stale listing: %s, want configured", out.change.Action)
	}
	r.opts.DryRun = false
	if out, err = r.applyOne(h.ctx, it); err != nil || out.change.Err != nil {
		t.Fatalf("applyOne: %v %v", err, out.change.Err)
	}
	h.apply(opts, objs...) // the next run
	if v, _, _ := unstructured.NestedString(h.liveCM("cm-00").Object, "data", "v"); v == "drift" {
		t.Error("the out-of-band edit was not corrected")
	}
}

// TestListedMissingIsCheckedAgain checks that an object the survey listed as missing, but
// that another inventory created since, is read again before anything is applied, so it is
// refused, not adopted (I11). A dry-run create has no resourceVersion; an existing object's
// has one.
func TestListedMissingIsCheckedAgain(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Diff = true           // dry-run before the apply, with the listed (missing) answer
	opts.ForceConflicts = true // so no field conflict stops the apply: only the owner check can
	foreign := configMap(h.ns, "taken", map[string]any{"v": "theirs"})
	foreign.SetAnnotations(map[string]string{OwnerAnnotation: "someone-else"})
	if err := h.plain.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	ours := configMap(h.ns, "taken", map[string]any{"v": "ours"})
	items, _, err := h.eng.prepare(h.set(ours), opts)
	if err != nil {
		t.Fatal(err)
	}
	id := object.ObjMetadata{Namespace: h.ns, Name: "taken", GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	r := &applyRun{e: h.eng, ref: h.ref, claim: inventory.Claim{ID: h.ref.ID}, opts: opts, old: &inventory.Inventory{}, items: items}
	r.view, r.listed = h.eng.newLiveView(h.ref.ID, opts)
	r.listed.surveyed = map[object.ObjMetadata]*unstructured.Unstructured{id: nil}
	out, err := r.applyOne(h.ctx, items[0])
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out.change.Err, ErrNotOwned) {
		t.Errorf("an object listed as missing, then created by another inventory: %s %v, want %v", out.change.Action, out.change.Err, ErrNotOwned)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("taken").Object, "data", "v"); v != "theirs" {
		t.Errorf("I11: the other inventory's object changed: data.v = %q", v)
	}
}

// TestSurveyListsInFullOnlyAGoodShare checks that the live objects are not listed in full
// when the set's objects are a small part of their kind in the namespace (the others may be
// many, or large): the run reads its own objects one by one instead.
func TestSurveyListsInFullOnlyAGoodShare(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	for i := range 10 {
		other := configMap(h.ns, fmt.Sprintf("other-%02d", i), map[string]any{"v": "x"})
		if err := h.plain.Create(h.ctx, other); err != nil {
			t.Fatal(err)
		}
	}
	objs := manyCMs(h.ns, "1", 2)
	h.apply(opts, objs...)
	h.rt.Reset()
	if s := h.apply(opts, objs...).Summary(); s.Unchanged != 2 {
		t.Errorf("re-apply: %+v, want 2 unchanged", s)
	}
	if l, g := h.rt.Count("list"), h.rt.CountResource("get", "configmaps", ""); l != 1 || g != 3 {
		t.Errorf("re-apply of 2 objects among 12 of their kind: %d LIST and %d GET, want 1 (names only) and 3 (the inventory and each object): %v",
			l, g, h.rt.Counts())
	}
}

// TestSurveySplitKindRequests checks the CLI's re-apply and prune of a kind that spans two
// survey chunks (surveyChunk objects each): the chunk that holds only a few of the kind's
// objects lists them in full like the first (the set holds the whole kind), instead of
// reading each with a GET, and skips the names-only LIST the first chunk already took.
func TestSurveySplitKindRequests(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Concurrency = 16
	n := surveyChunk + 10
	objs := manyCMs(h.ns, "1", n)
	h.apply(opts, objs...)

	h.rt.Reset()
	if s := h.apply(opts, objs...).Summary(); s.Unchanged != n {
		t.Errorf("re-apply: %+v, want %d unchanged", s, n)
	}
	// The inventory's GET; per chunk one full LIST of two pages (511 ConfigMaps with the
	// inventory), and one names-only LIST for the first; no dry-run (appliedAsDesired).
	p, g, l := h.rt.Count("patch"), h.rt.CountResource("get", "configmaps", ""), h.rt.Count("list")
	if p != 0 || g != 1 || l != 6 {
		t.Errorf("re-apply of %d unchanged objects in two chunks: %d PATCH (dry-runs), %d GET, %d LIST; want 0, 1 (the inventory), 6: %v",
			n, p, g, l, h.rt.Counts())
	}

	kept := objs[:n-5]
	h.rt.Reset()
	res := h.apply(opts, kept...)
	if s := res.Summary(); s.Unchanged != n-5 || s.Pruned != 5 {
		t.Errorf("prune: %+v, want %d unchanged and 5 pruned", s, n-5)
	}
	// The inventory's two reads (load, record) and one GET per pruned object (I1: its owner
	// and UID are checked on the API server's word just before its delete).
	if g, l := h.rt.CountResource("get", "configmaps", ""), h.rt.Count("list"); g != 2+5 || l != 6 {
		t.Errorf("prune of 5 of %d objects: %d GET, %d LIST; want 7, 6: %v", n, g, l, h.rt.Counts())
	}
}
