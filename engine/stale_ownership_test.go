package engine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/converge-dev/converge/inventory"
)

// TestStaleCacheRecreatedIsNotTakenOver freezes the engine's cache of ConfigMaps; behind its
// back an inventoried object is deleted and recreated by another set (its own inventory, the
// same field manager). A changed desired object then takes the watch path (the memo knows
// another desired hash), whose apply must land only on the object the cache saw (UID
// precondition): the other set's object keeps its owner, data and UID, this set reports the
// overlap and neither records its UID nor keeps listing it (I11, I14).
//
// Without it: the watch path applied without a precondition, with the shared field
// manager that already owned the owner annotation, took the object over and recorded its UID.
func TestStaleCacheRecreatedIsNotTakenOver(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	mine := []*unstructured.Unstructured{configMap(h.ns, "keep", map[string]any{"v": "1"}), configMap(h.ns, "x", map[string]any{"v": "1"})}
	h.apply(opts, mine...)
	h.freezeSettled(stale, mine)
	oldUID := h.liveCM("x").GetUID()

	if err := h.plain.Delete(h.ctx, h.liveCM("x")); err != nil {
		t.Fatal(err)
	}
	otherRef := inventory.Ref{Namespace: h.ns, Name: "other-inventory", ID: "other-" + h.ns}
	otherEngine, err := New(env.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := otherEngine.Apply(h.ctx, Set{Inventory: otherRef, Objects: []*unstructured.Unstructured{
		configMap(h.ns, "x", map[string]any{"v": "theirs"})}}, opts); err != nil {
		t.Fatalf("the other set's apply: %v", err)
	}
	theirs := h.liveCM("x")

	served := stale.Served()
	_, err = h.eng.Apply(h.ctx, h.set(configMap(h.ns, "keep", map[string]any{"v": "1"}), configMap(h.ns, "x", map[string]any{"v": "2"})), opts)
	if stale.Served() == served {
		t.Fatal("the run read nothing from the frozen cache: the scenario did not run")
	}
	live := h.liveCM("x")
	if owner := live.GetAnnotations()[OwnerAnnotation]; owner != otherRef.ID {
		t.Errorf("I11: x was taken over from a stale cache: owner %q, want %q", owner, otherRef.ID)
	}
	if v, _, _ := unstructured.NestedString(live.Object, "data", "v"); v != "theirs" || live.GetResourceVersion() != theirs.GetResourceVersion() {
		t.Errorf("I11: the other set's x was written: data.v = %q", v)
	}
	if live.GetUID() == oldUID {
		t.Fatal("test setup: x kept its UID")
	}
	if err == nil || !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), cmName(h.ns, "x")) {
		t.Errorf("Apply error = %v, want the overlap on x (%v)", err, ErrNotOwned)
	}
	if uid, ok := h.inventory()[cmID(h.ns, "x")]; ok {
		t.Errorf("our inventory still lists x (UID %q), which another inventory owns", uid)
	}
}

// TestStaleCachePrunedThenReAddedIsApplied freezes the engine's cache of ConfigMaps, prunes an
// object through it and then declares the object again while the cache still shows the old
// copy: the object is created again (and inventoried with its new UID), not reported
// unchanged from the memo of the deleted copy (I7, I2).
//
// Without it: the memo still held the pruned copy's resourceVersion, which the frozen
// cache showed, so the run reported "unchanged" and the object stayed deleted.
func TestStaleCachePrunedThenReAddedIsApplied(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	objs := cms(h.ns, "keep", "back")
	h.apply(opts, objs...)
	h.freezeSettled(stale, objs)

	res := h.apply(opts, cms(h.ns, "keep")...)
	if got := actions(res.Pruned)[cmID(h.ns, "back")]; got != ActionPruned || h.liveCM("back") != nil {
		t.Fatalf("prune of back: %s, live %v", got, h.liveCM("back") != nil)
	}
	res = h.apply(opts, objs...)
	if got := actions(res.Changes)[cmID(h.ns, "back")]; got != ActionCreated {
		t.Errorf("re-added back: %s, want %s", got, ActionCreated)
	}
	live := h.liveCM("back")
	if live == nil {
		t.Fatal("re-added back was not applied")
	}
	if got := h.inventory()[cmID(h.ns, "back")]; got != live.GetUID() {
		t.Errorf("inventory UID of back = %q, want the new %q", got, live.GetUID())
	}
}

// deployment is a Deployment the Full cluster makes Available; note goes into its pod
// template, so changing it starts a rollout (a new generation).
func deployment(ns, name, note string) *unstructured.Unstructured {
	return obj("apps/v1", "Deployment", ns, name, map[string]any{"spec": map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": name}, "annotations": map[string]any{"note": note}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.invalid/app:1"}}},
		},
	}})
}

// TestStaleCacheReadinessWaitsForAppliedGeneration freezes the engine's cache of Deployments
// once a Deployment is Available, then changes its pod template. The apply answers with a
// new generation that the frozen cache never shows: the wait must not call the Deployment
// Current on the old copy (I6: Ready only for what was applied and seen Current). Once the
// cache thaws, the rollout is judged and the run is Ready.
//
// Without it: kstatus judged the cached copy of the old generation, Available with
// observedGeneration equal to its (old) generation, so the run was Ready at once.
func TestStaleCacheReadinessWaitsForAppliedGeneration(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	opts.Wait = true
	opts.Timeout = 2 * time.Minute
	h.apply(opts, deployment(h.ns, "web", "1"))
	gvk := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	if err := stale.Freeze(h.ctx, gvk, h.ns); err != nil {
		t.Fatal(err)
	}
	served := stale.Served()
	short := opts
	short.Timeout = 5 * time.Second
	res, err := h.eng.Apply(h.ctx, h.set(deployment(h.ns, "web", "2")), short)
	if stale.Served() == served {
		t.Fatal("the wait read nothing from the frozen cache: the scenario did not run")
	}
	if got := actions(res.Changes)[h.ns+"_web_apps_Deployment"]; got != ActionConfigured {
		t.Fatalf("changed Deployment: %s, want %s", got, ActionConfigured)
	}
	if err == nil || len(res.Health) != 1 || res.Health[0].Status == "Current" {
		t.Errorf("I6: Ready on a cached copy older than the apply: health %+v, error %v", res.Health, err)
	} else if !strings.Contains(res.Health[0].Message, "generation") {
		t.Errorf("health message %q does not say which generation it waits for", res.Health[0].Message)
	}

	stale.Thaw(gvk.GroupKind())
	res, err = h.eng.Apply(h.ctx, h.set(deployment(h.ns, "web", "2")), opts)
	if err != nil || len(res.Health) != 1 || res.Health[0].Status != "Current" {
		t.Errorf("after Thaw: health %+v, error %v; want Current", res.Health, err)
	}
}
