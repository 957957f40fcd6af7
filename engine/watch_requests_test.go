package engine

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/e2e/fault"
)

// TestWatchOneRequestPerObject checks the request budget of the watch path (the cold-apply and
// no-op targets in docs/benchmarks.md): a cold apply sends one apply per object and reads none from the API
// server; a change of k objects sends k applies; after a restart (empty memo, warm cluster)
// a re-apply lists the objects once and trusts each on its managedFields (appliedAsDesired),
// with no request per object, writing nothing (I7).
func TestWatchOneRequestPerObject(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 20)

	h.rt.Reset()
	res := h.apply(opts, objs...)
	if s := res.Summary(); s.Created != 20 {
		t.Fatalf("cold apply: %+v, want 20 created", s)
	}
	// One apply per object; the only GETs are of the inventory ConfigMap.
	if p, g := h.rt.Count("patch"), h.rt.CountResource("get", "configmaps", ""); p != 20 || g > 3 {
		t.Errorf("cold apply of 20 objects: %d PATCH and %d GET, want 20 and at most 3 (the inventory read and the reads of its two updates): %v",
			p, g, h.rt.Counts())
	}
	if l := h.rt.CountResource("list", "configmaps", ""); l > 2 {
		t.Errorf("cold apply: %d LISTs of configmaps, want at most 2 (the informer's and the survey's)", l)
	}
	h.ownedSubsetOfInventory()

	h.settle(opts, 1, objs)
	objs[3] = configMap(h.ns, "cm-03", map[string]any{"v": "2"})
	objs[7] = configMap(h.ns, "cm-07", map[string]any{"v": "2"})
	time.Sleep(500 * time.Millisecond) // let the cache see the last run (not a timing assertion)
	h.rt.Reset()
	res = h.apply(opts, objs...)
	acts := actions(res.Changes)
	if acts[cmID(h.ns, "cm-03")] != ActionConfigured || acts[cmID(h.ns, "cm-07")] != ActionConfigured {
		t.Errorf("changed objects: %v", acts)
	}
	if p, g := h.rt.Count("patch"), h.rt.CountResource("get", "configmaps", ""); p != 2 || g > 1 {
		t.Errorf("change of 2 objects: %d PATCH and %d GET, want 2 and at most 1: %v", p, g, h.rt.Counts())
	}
	for _, name := range []string{"cm-03", "cm-07"} {
		if v, _, _ := unstructured.NestedString(h.liveCM(name).Object, "data", "v"); v != "2" {
			t.Errorf("%s: data.v = %q after the change, want 2", name, v)
		}
	}

	// A restarted daemon: a new engine with an empty memo on the same cluster.
	cfg, rt := fault.Config(env.Config)
	eng, err := New(cfg, Options{Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	defer cancel()
	go func() { _ = eng.Run(ctx) }()
	h.eng, h.rt = eng, rt
	res = h.apply(opts, objs...)
	if s := res.Summary(); s.Unchanged != 20 {
		t.Errorf("re-apply after a restart: %+v, want 20 unchanged", s)
	}
	if w := rt.Writes(); len(w) != 0 {
		t.Errorf("re-apply after a restart wrote: %v", w)
	}
	if p, g, l := rt.Count("patch"), rt.CountResource("get", "configmaps", ""), rt.CountResource("list", "configmaps", ""); p != 0 || g > 1 || l > 3 {
		t.Errorf("re-apply after a restart: %d PATCH (dry-runs), %d GET, %d LIST; want 0, at most 1, at most 3 (the survey's two and the informer's): %v",
			p, g, l, rt.Counts())
	}
}

// TestWatchNeverAdoptsFromCache checks the watch path leaves ownership to the API server
// (I11): an object another inventory owns, or one nobody owns, is not taken over on the
// strength of the cache, and the set still converges.
func TestWatchNeverAdoptsFromCache(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	foreign := configMap(h.ns, "foreign", map[string]any{"v": "theirs"})
	foreign.SetAnnotations(map[string]string{OwnerAnnotation: "someone-else"})
	if err := h.plain.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	objs := append(manyCMs(h.ns, "1", 3), configMap(h.ns, "foreign", map[string]any{"v": "ours"}))
	res, err := h.eng.Apply(h.ctx, h.set(objs...), opts)
	if err == nil {
		t.Fatal("Apply over a foreign object returned no error")
	}
	if got := actions(res.Changes)[cmID(h.ns, "foreign")]; got != ActionFailed {
		t.Errorf("foreign object: %s, want failed", got)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("foreign").Object, "data", "v"); v != "theirs" {
		t.Errorf("foreign object changed: data.v = %q", v)
	}
	if _, ok := h.inventory()[cmID(h.ns, "foreign")]; ok {
		t.Error("foreign object recorded in our inventory")
	}
}

// TestColdApplyOneRequestPerObject checks the cold apply without the watch cache (the CLI):
// new objects are confirmed missing by one LIST per kind and namespace, then applied with one
// request each, no GET or dry-run per object; an object that exists but is not inventoried
// still takes the per-object path, so a foreign one is not adopted (I11).
func TestColdApplyOneRequestPerObject(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	foreign := configMap(h.ns, "foreign", map[string]any{"v": "theirs"})
	foreign.SetAnnotations(map[string]string{OwnerAnnotation: "someone-else"})
	if err := h.plain.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	objs := manyCMs(h.ns, "1", 20)
	h.rt.Reset()
	res, err := h.eng.Apply(h.ctx, h.set(append(objs, configMap(h.ns, "foreign", map[string]any{"v": "ours"}))...), opts)
	if err == nil || actions(res.Changes)[cmID(h.ns, "foreign")] != ActionFailed {
		t.Errorf("the foreign object was not refused: %v", err)
	}
	if s := res.Summary(); s.Created != 20 {
		t.Errorf("cold apply: %+v, want 20 created", s)
	}
	p, g, l := h.rt.Count("patch"), h.rt.CountResource("get", "configmaps", ""), h.rt.Count("list")
	// 20 applies; the foreign object costs a GET (refused before any write), the inventory 3 reads.
	if p != 20 || g > 4 || l != 1 {
		t.Errorf("cold apply of 20 new objects: %d PATCH, %d GET, %d LIST; want 20, at most 4, 1: %v", p, g, l, h.rt.Counts())
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("foreign").Object, "data", "v"); v != "theirs" {
		t.Errorf("I11: the foreign object changed: data.v = %q", v)
	}
}
