package engine

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

const testScopeKey = "test.converge.dev/share"

// namedCMs returns n ConfigMaps prefix-0 ... in ns.
func namedCMs(ns, prefix string, n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, n)
	for i := range n {
		out = append(out, configMap(ns, fmt.Sprintf("%s-%d", prefix, i), map[string]any{"v": "1"}))
	}
	return out
}

// cachedNames lists the names of the ConfigMaps of ns that e's watch cache holds.
func cachedNames(t *testing.T, h *harness, e *Engine) []string {
	t.Helper()
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(configMapGVK.GroupVersion().WithKind("ConfigMapList"))
	if err := e.cache.cache.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Items {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}

// TestScopedCacheHoldsOnlyItsShare checks Options.Scope, as daemon replicas use it for the
// shards they hold: two engines scoped to shares "a" and "b" of one base engine each apply a
// set. Every object carries its share's label; each engine's watch cache holds its own
// share's objects and none of the other's; a re-apply of an unchanged set sends no write.
// What the cache cannot show takes the API server's word, as any cache miss does: share a's
// set declaring an object of share b's set is refused (ErrNotOwned) and leaves it as it was,
// and objects applied before the label existed (by an engine without scope) are taken over
// by the scoped engine's apply, which labels them, and its prune deletes one it never cached.
//
// Without it, the watch cache listed and watched every object of a kind in the cluster: each
// replica held the metadata of every managed object, whatever its share.
func TestScopedCacheHoldsOnlyItsShare(t *testing.T) {
	h := newHarness(t, Hooks{})
	base := h.eng
	a, err := base.Scoped(Label{Key: testScopeKey, Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := base.Scoped(Label{Key: testScopeKey, Value: "b"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	runUntilCleanup(t, b)
	opts := testOpts()
	refB := inventory.Ref{Namespace: h.ns, Name: "inventory-b", ID: "inv-b-" + h.ns}
	setA, setB := namedCMs(h.ns, "a", 3), namedCMs(h.ns, "b", 3)
	h.eng = a
	h.apply(opts, setA...)
	if _, err := b.Apply(h.ctx, Set{Inventory: refB, Objects: setB}, opts); err != nil {
		t.Fatalf("apply of share b: %v", err)
	}
	for _, u := range append(slices.Clone(setA), setB...) {
		want := u.GetName()[:1]
		if got := h.liveCM(u.GetName()).GetLabels()[testScopeKey]; got != want {
			t.Errorf("ConfigMap %s: label %s = %q, want %q", u.GetName(), testScopeKey, got, want)
		}
	}
	if got, want := cachedNames(t, h, a), []string{"a-0", "a-1", "a-2"}; !slices.Equal(got, want) {
		t.Errorf("share a's cache holds %v, want %v", got, want)
	}
	if got, want := cachedNames(t, h, b), []string{"b-0", "b-1", "b-2"}; !slices.Equal(got, want) {
		t.Errorf("share b's cache holds %v, want %v", got, want)
	}
	if res := h.settle(opts, 1, setA); res.Summary().Unchanged != 3 || len(h.rt.Writes()) != 0 {
		t.Errorf("a no-op of share a: %+v, writes %v", res.Summary(), h.rt.Writes())
	}

	// b-0 is share b's: share a's cache does not show it, and the API server's word refuses it.
	stolen := configMap(h.ns, "b-0", map[string]any{"v": "a's"})
	res, err := a.Apply(h.ctx, h.set(append(slices.Clone(setA), stolen)...), opts)
	if !errors.Is(err, ErrNotOwned) {
		t.Errorf("share a declaring share b's object: err = %v, want ErrNotOwned (result %+v)", err, res)
	}
	live := h.liveCM("b-0")
	if v, _, _ := unstructured.NestedString(live.Object, "data", "v"); v != "1" || live.GetLabels()[testScopeKey] != "b" ||
		live.GetAnnotations()[OwnerAnnotation] != refB.ID {
		t.Errorf("share b's object after share a declared it: data %q, labels %v, owner %q", v, live.GetLabels(), live.GetAnnotations()[OwnerAnnotation])
	}

	// Objects applied before the label existed: not in the scoped cache, taken over by the
	// next apply (labelled), and one of them pruned.
	refOld := inventory.Ref{Namespace: h.ns, Name: "inventory-old", ID: "inv-old-" + h.ns}
	old := namedCMs(h.ns, "old", 2)
	if _, err := base.Apply(h.ctx, Set{Inventory: refOld, Objects: old}, opts); err != nil {
		t.Fatalf("apply without scope: %v", err)
	}
	if _, ok := h.liveCM("old-0").GetLabels()[testScopeKey]; ok {
		t.Fatalf("an engine without scope labelled its object: %v", h.liveCM("old-0").GetLabels())
	}
	res, err = a.Apply(h.ctx, Set{Inventory: refOld, Objects: old[:1]}, opts)
	if err != nil {
		t.Fatalf("the scoped apply of objects applied before the label: %v", err)
	}
	if got := h.liveCM("old-0").GetLabels()[testScopeKey]; got != "a" {
		t.Errorf("old-0 after the scoped apply: label %q, want a (%v)", got, actions(res.Changes))
	}
	if h.liveCM("old-1") != nil {
		t.Errorf("old-1 was not pruned by the scoped apply: %v", actions(res.Changes))
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(cachedNames(t, h, a), "old-0") && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := cachedNames(t, h, a); !slices.Contains(got, "old-0") || slices.Contains(got, "old-1") {
		t.Errorf("share a's cache after the take-over holds %v, want old-0 and not old-1", got)
	}
}

// scopedHarness is newHarness whose engine is scoped to share "a" of its base, running.
func scopedHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t, Hooks{})
	a, err := h.eng.Scoped(Label{Key: testScopeKey, Value: "a"})
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, a)
	h.eng = a
	return h
}

// TestScopedHealthCheckOfObjectItDidNotApply: spec.healthChecks may name an object the set
// does not apply (another Sync's, an operator's), which has no label of the engine's scope:
// its readiness is read from the API server, not judged missing from the scoped cache
// (without it: "wait: timeout ... ConfigMap .../ext: status NotFound").
func TestScopedHealthCheckOfObjectItDidNotApply(t *testing.T) {
	h := scopedHarness(t)
	if err := h.plain.Create(h.ctx, configMap(h.ns, "ext", map[string]any{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	opts := testOpts()
	opts.Wait, opts.Timeout = true, 20*time.Second
	opts.HealthChecks = []object.ObjMetadata{{GroupKind: schema.GroupKind{Kind: "ConfigMap"}, Namespace: h.ns, Name: "ext"}}
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "cm", nil)), opts)
	if err != nil {
		t.Fatalf("a health check of an existing object the scoped engine did not apply: %v", err)
	}
	if oh := healthOf(res, h.ns+"_ext__ConfigMap"); oh.Status != "Current" {
		t.Errorf("health of ext = %+v, want Current", oh)
	}
}

// TestScopedKeepsMalformedLabelsForTheServer: a label value that is not a string (YAML's
// unquoted 1.5) is refused, naming the label, as without a scope (by prepare, as
// terminal; the API server refuses it too). Without it, the scoped engine read such a map as no labels and
// applied the object with its scope's label alone: every label of the manifest (here a
// Pod Security level) silently dropped, and the Sync Ready.
func TestScopedKeepsMalformedLabelsForTheServer(t *testing.T) {
	h := scopedHarness(t)
	cm := configMap(h.ns, "bad", map[string]any{"k": "v"})
	cm.Object["metadata"].(map[string]any)["labels"] = map[string]any{
		"pod-security.kubernetes.io/enforce": "restricted",
		"app.kubernetes.io/version":          1.5,
	}
	_, err := h.eng.Apply(h.ctx, h.set(cm), testOpts())
	if err == nil || !strings.Contains(err.Error(), "app.kubernetes.io/version") {
		t.Errorf("apply of a non-string label value: err = %v, want the API server's refusal naming the label", err)
	}
	if live := h.liveCM("bad"); live != nil {
		t.Errorf("the object was applied with labels %v", live.GetLabels())
	}
	good := configMap(h.ns, "good", nil)
	good.SetLabels(map[string]string{"app": "x"})
	h.apply(testOpts(), good)
	if got := h.liveCM("good").GetLabels(); got["app"] != "x" || got[testScopeKey] != "a" {
		t.Errorf("labels of a well-formed object = %v, want app=x and %s=a", got, testScopeKey)
	}
}

// TestMalformedAnnotationsRefused: an annotation value that is not a string (YAML's
// unquoted 1) is refused before anything is written, naming the object and the annotation,
// and the object keeps what it had. Without it, the engine read such a map as no annotations and
// applied the object with only its owner annotation: the apply succeeded and removed every
// annotation the set had applied before (here "note").
func TestMalformedAnnotationsRefused(t *testing.T) {
	h := newHarness(t, Hooks{})
	h.apply(testOpts(), annotate(configMap(h.ns, "cm", map[string]any{"k": "v"}), "note", "kept"))
	cm := configMap(h.ns, "cm", map[string]any{"k": "v2"})
	cm.Object["metadata"].(map[string]any)["annotations"] = map[string]any{"note": "kept", "replicas": int64(1)}
	_, err := h.eng.Apply(h.ctx, h.set(cm), testOpts())
	if err == nil || !strings.Contains(err.Error(), "ConfigMap "+h.ns+"/cm") || !strings.Contains(err.Error(), "annotations.replicas") || !IsTerminal(err) {
		t.Errorf("apply of a non-string annotation value: err = %v, want a terminal error naming the object and the annotation", err)
	}
	live := h.liveCM("cm")
	if got := live.GetAnnotations(); got["note"] != "kept" || got[OwnerAnnotation] != h.ref.ID {
		t.Errorf("annotations after the refused apply = %v, want note=kept and ours", got)
	}
	if data, _, _ := unstructured.NestedString(live.Object, "data", "k"); data != "v" {
		t.Errorf("data after the refused apply = %q, want v", data)
	}
}
