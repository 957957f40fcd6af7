package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The shortcuts of the no-op reconcile (50,000 objects in ≤ 2 s) each have a test
// here that fails if the shortcut changed what is applied: prepare's single metadata copy,
// the reused hash encoder, the watch cache read without a copy, the memo entry read once per
// item, and the prune candidates skipped when the stored inventory holds exactly the set.

// TestPrepareLeavesInputAlone checks prepare's copy: the caller's objects are not modified
// (their metadata maps are shared no deeper than the top level), the prepared copy has the
// namespace, owner annotation and no server fields, and the item keys are the inventory's
// ns_name_group_kind strings, RBAC names with colons included.
func TestPrepareLeavesInputAlone(t *testing.T) {
	h := newHarness(t, Hooks{})
	cm := configMap("", "cm", map[string]any{"k": "v"})
	cm.Object["metadata"].(map[string]any)["labels"] = map[string]any{"app": "x"}
	cm.Object["metadata"].(map[string]any)["annotations"] = map[string]any{"note": "n", "empty": nil}
	cm.Object["metadata"].(map[string]any)["resourceVersion"] = "12"
	cm.Object["metadata"].(map[string]any)["uid"] = "u-1"
	role := obj("rbac.authorization.k8s.io/v1", "ClusterRole", "somewhere", "system:converge:test", nil)
	in := []*unstructured.Unstructured{cm, role}
	before := []*unstructured.Unstructured{cm.DeepCopy(), role.DeepCopy()}

	opts := testOpts()
	opts.DefaultNamespace = h.ns
	items, desired, err := h.eng.prepare(h.set(in...), opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if diff := cmp.Diff(before[i].Object, in[i].Object); diff != "" {
			t.Errorf("prepare modified its input %s (-before +after):\n%s", in[i].GetName(), diff)
		}
	}
	if len(items) != 2 || desired.Len() != 2 {
		t.Fatalf("%d items, desired %d, want 2 and 2", len(items), desired.Len())
	}
	for _, it := range items {
		if it.key != it.id.String() {
			t.Errorf("item key %q, want the inventory's %q", it.key, it.id.String())
		}
		if !desired.Has(it.id) {
			t.Errorf("%s not in the desired inventory", it.key)
		}
		md := it.obj.Object["metadata"].(map[string]any)
		if _, ok := md["resourceVersion"]; ok {
			t.Errorf("%s: resourceVersion kept", it.key)
		}
		if _, ok := md["uid"]; ok {
			t.Errorf("%s: uid kept", it.key)
		}
		if got := it.annotation(OwnerAnnotation); got != h.ref.ID {
			t.Errorf("%s: owner annotation %q, want %q", it.key, got, h.ref.ID)
		}
	}
	// ClusterRole sorts first (stage of definitions) and loses its namespace.
	if got := items[0].obj.GetNamespace(); got != "" {
		t.Errorf("cluster-scoped ClusterRole keeps namespace %q", got)
	}
	c := items[1].obj
	if c.GetNamespace() != h.ns {
		t.Errorf("ConfigMap namespace %q, want the default %q", c.GetNamespace(), h.ns)
	}
	want := map[string]string{"note": "n", "empty": "", OwnerAnnotation: h.ref.ID}
	if diff := cmp.Diff(want, c.GetAnnotations()); diff != "" {
		t.Errorf("prepared annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"app": "x"}, c.GetLabels()); diff != "" {
		t.Errorf("prepared labels (-want +got):\n%s", diff)
	}
	keepOwner(c, "someone") // what a plain diff does to its copy: never to the input
	if diff := cmp.Diff(before[0].Object, cm.Object); diff != "" {
		t.Errorf("a change of the prepared copy reached the input (-before +after):\n%s", diff)
	}
}

// TestPrepareInPlaceForOwnObjects checks Set.Own: an object handed over is prepared in
// place (the item's object is the caller's, with its metadata set as a copy's would be),
// one not handed over is copied and left alone.
func TestPrepareInPlaceForOwnObjects(t *testing.T) {
	h := newHarness(t, Hooks{})
	mk := func() []*unstructured.Unstructured {
		cm := configMap("", "cm", map[string]any{"k": "v"})
		md := cm.Object["metadata"].(map[string]any)
		md["labels"] = map[string]any{"app": "x"}
		md["annotations"] = map[string]any{"note": "n", "empty": nil}
		md["resourceVersion"] = "12"
		role := obj("rbac.authorization.k8s.io/v1", "ClusterRole", "somewhere", "system:converge:test", nil)
		return []*unstructured.Unstructured{cm, role}
	}
	opts := testOpts()
	opts.DefaultNamespace = h.ns
	copied, _, err := h.eng.prepare(h.set(mk()...), opts)
	if err != nil {
		t.Fatal(err)
	}
	in := mk()
	untouched := in[1].DeepCopy()
	set := h.set(in...)
	set.Own = []bool{true, false}
	items, _, err := h.eng.prepare(set, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if diff := cmp.Diff(copied[i].obj.Object, it.obj.Object); diff != "" {
			t.Errorf("%s prepared in place differs from its prepared copy (-copy +in place):\n%s", it.key, diff)
		}
	}
	// items[1] is the ConfigMap (the ClusterRole sorts first).
	if items[1].obj != in[0] {
		t.Error("the ConfigMap handed over was copied, not prepared in place")
	}
	if got := in[0].GetAnnotations()[OwnerAnnotation]; got != h.ref.ID {
		t.Errorf("the ConfigMap handed over has owner annotation %q, want %q", got, h.ref.ID)
	}
	if items[0].obj == in[1] {
		t.Error("the ClusterRole not handed over was not copied")
	}
	if diff := cmp.Diff(untouched.Object, in[1].Object); diff != "" {
		t.Errorf("prepare modified the ClusterRole not handed over (-before +after):\n%s", diff)
	}
}

// TestHashObjectConcurrent checks the reused encoders: objects hashed by many goroutines at
// once hash as they do one at a time, and objects that differ only in where nested values
// sit hash differently.
func TestHashObjectConcurrent(t *testing.T) {
	objs := make([]*unstructured.Unstructured, 200)
	for i := range objs {
		objs[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "labels": map[string]any{"i": fmt.Sprint(i % 7)}},
			"data":     map[string]any{"a": map[string]any{"x": int64(i)}, "b": []any{map[string]any{"y": fmt.Sprint(i)}}},
		}}
	}
	want := make([][32]byte, len(objs))
	for i, u := range objs {
		want[i] = hashObject("converge", u)
	}
	var wg sync.WaitGroup
	errs := make(chan string, len(objs)*8)
	for range 8 {
		wg.Go(func() {
			for i, u := range objs {
				if hashObject("converge", u) != want[i] {
					errs <- u.GetName()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for name := range errs {
		t.Errorf("%s: hashed differently when hashed concurrently", name)
	}
	swapped := func(a, b map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"a": a, "b": b}}
	}
	if hashObject("m", swapped(map[string]any{"x": "1"}, map[string]any{"y": "2"})) ==
		hashObject("m", swapped(map[string]any{"y": "2"}, map[string]any{"x": "1"})) {
		t.Error("nested maps swapped between keys: same hash")
	}
}

// TestWatchNoOpThenChanges checks the watch path after no-ops (where the memo entry is read
// once per item and not written again, and the cache is read without a copy): a changed
// render, an out-of-band edit and an object swapped for another (the stored inventory holds
// as many objects as the set, but not the same ones) are each applied, and the watch cache
// still shows what the API server holds.
func TestWatchNoOpThenChanges(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 4)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs) // no-ops from here

	// A changed render, deep in the object.
	objs[2] = configMap(h.ns, "cm-02", map[string]any{"v": "1", "nested": "2"})
	res := h.apply(opts, objs...)
	if got := actions(res.Changes)[cmID(h.ns, "cm-02")]; got != ActionConfigured {
		t.Errorf("changed render: action %s, want configured", got)
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("cm-02").Object, "data", "nested"); v != "2" {
		t.Errorf("changed render not applied: data.nested = %q", v)
	}
	h.settle(opts, 1, objs)

	// An out-of-band edit after no-ops.
	live := h.liveCM("cm-01")
	if err := unstructured.SetNestedField(live.Object, "edited", "data", "v"); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, live, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	var got string
	for range 50 { // until the watch cache shows the edit, runs may still skip cm-01
		h.apply(opts, objs...)
		if got, _, _ = unstructured.NestedString(h.liveCM("cm-01").Object, "data", "v"); got == "1" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "1" {
		t.Fatalf("out-of-band edit after no-ops not corrected: data.v = %q", got)
	}
	h.settle(opts, 1, objs)

	// The watch cache's objects were only read: they still match the API server.
	for _, name := range []string{"cm-00", "cm-01", "cm-02", "cm-03"} {
		cached, err := h.eng.cache.cachedLive(h.ctx, objs[0].GroupVersionKind(), client.ObjectKey{Namespace: h.ns, Name: name})
		if err != nil || cached == nil {
			t.Fatalf("%s: cache read: %v, %v", name, cached, err)
		}
		live := h.liveCM(name)
		if cached.GetResourceVersion() != live.GetResourceVersion() ||
			!cmp.Equal(cached.GetAnnotations(), live.GetAnnotations()) || !cmp.Equal(cached.GetLabels(), live.GetLabels()) {
			t.Errorf("%s: cache shows rv %s %v %v, API server rv %s %v %v", name, cached.GetResourceVersion(),
				cached.GetAnnotations(), cached.GetLabels(), live.GetResourceVersion(), live.GetAnnotations(), live.GetLabels())
		}
	}

	// One object swapped for another: as many objects as stored, but cm-03 left the set.
	swapped := append(objs[:3:3], configMap(h.ns, "cm-new", map[string]any{"v": "1"}))
	res = h.apply(opts, swapped...)
	if got := actions(res.Pruned)[cmID(h.ns, "cm-03")]; got != ActionPruned {
		t.Errorf("cm-03 left the set: prune action %q, want pruned", got)
	}
	if h.liveCM("cm-03") != nil {
		t.Error("cm-03 left the set but still exists")
	}
	if h.liveCM("cm-new") == nil {
		t.Error("cm-new was not created")
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "cm-00"), cmID(h.ns, "cm-01"), cmID(h.ns, "cm-02"), cmID(h.ns, "cm-new"))
}

// TestApplyLeavesRenderAlone: the same render objects (as the daemon's render cache
// keeps them) go through several full Apply runs — first create, no-ops, an out-of-band
// edit, a dry-run without inventory, a diff — while another goroutine reads them (as a
// render cache's other readers would): the race detector flags any write by the engine,
// and the objects must equal their original copy afterwards. prepare shares the nested
// metadata maps with its input, so a write into them would change the next reconcile's
// desired state.
func TestApplyLeavesRenderAlone(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 6)
	for i, o := range objs {
		md := o.Object["metadata"].(map[string]any)
		md["labels"] = map[string]any{"app": "x", "i": string(rune('a' + i))}
		md["annotations"] = map[string]any{"note": "n", ForceAnnotation: ForceEnabled}
	}
	before := make([]map[string]any, len(objs))
	for i, o := range objs {
		before[i] = o.DeepCopy().Object
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, o := range objs {
				_ = o.DeepCopy()
			}
		}
	}()
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	live := h.liveCM("cm-01")
	live.SetLabels(map[string]string{"edited": "yes"})
	if err := h.plain.Update(h.ctx, live); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		h.apply(opts, objs...)
	}
	dry := opts
	dry.DryRun = true
	if _, err := h.eng.Apply(h.ctx, Set{Objects: objs}, dry); err != nil {
		t.Logf("dry-run without inventory: %v", err)
	}
	h.apply(dry, objs...)
	df := opts
	df.Diff = true
	h.apply(df, objs...)
	w := opts
	w.Wait = true
	h.apply(w, objs...)
	close(stop)
	<-done
	for i, o := range objs {
		if diff := cmp.Diff(before[i], o.Object); diff != "" {
			t.Errorf("%s: Apply modified the render object (-before +after):\n%s", o.GetName(), diff)
		}
	}
}
