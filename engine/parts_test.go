package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/inventory"
)

// perPart is how many of the tests' ConfigMap entries one inventory ConfigMap holds: 300
// objects take a head and four parts.
const perPart = 60

// useParts gives h's engine an inventory store whose ConfigMaps hold perPart entries of
// h's objects (and the store's crash points hooks); h keeps its namespace and inventory.
func (h *harness) useParts(hooks inventory.StoreHooks) {
	entry := len(cmID(h.ns, "obj-000")) + 40 // inventory's entryBytes: the key and a UID
	h.eng.store = inventory.NewStoreWithOptions(h.eng.client, inventory.StoreOptions{PartBytes: perPart * entry, Hooks: hooks})
}

// partsHarness is newHarness with small inventory parts, on the namespace and inventory of
// base when given (a restarted engine).
func partsHarness(t *testing.T, base *harness, hooks Hooks, store inventory.StoreHooks) *harness {
	t.Helper()
	h := newHarness(t, hooks)
	if base != nil {
		h.ns, h.ref = base.ns, base.ref
	}
	h.useParts(store)
	return h
}

// objs returns ConfigMaps obj-<from>..obj-<to-1> of h's namespace with data v=value.
func (h *harness) objs(from, to int, value string) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, configMap(h.ns, fmt.Sprintf("obj-%03d", i), map[string]any{"v": value}))
	}
	return out
}

// ids are the inventory keys of objs.
func ids(objs []*unstructured.Unstructured) []string {
	out := make([]string, len(objs))
	for i, u := range objs {
		out[i] = cmID(u.GetNamespace(), u.GetName())
	}
	return out
}

// invConfigMaps are the inventory's ConfigMaps as stored: its head (nil when missing), the
// parts the head lists, and the ConfigMaps labelled as its parts that it does not list.
type invConfigMaps struct {
	head     *corev1.ConfigMap
	listed   []*corev1.ConfigMap
	unlisted []string
}

// stored reads the inventory's ConfigMaps with the independent client.
func (h *harness) stored() invConfigMaps {
	h.t.Helper()
	list := &corev1.ConfigMapList{}
	if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	byName := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		byName[list.Items[i].Name] = &list.Items[i]
	}
	var out invConfigMaps
	out.head = byName[h.ref.Name]
	var names []string
	if out.head != nil && out.head.Annotations[inventory.PartsAnnotation] != "" {
		names = strings.Split(out.head.Annotations[inventory.PartsAnnotation], ",")
	}
	for _, n := range names {
		if byName[n] == nil {
			h.t.Fatalf("the head lists part %s, which does not exist", n)
		}
		out.listed = append(out.listed, byName[n])
	}
	for name, cm := range byName {
		if _, ok := cm.Labels[inventory.PartOfLabel]; ok && !slices.Contains(names, name) {
			out.unlisted = append(out.unlisted, name)
		}
	}
	return out
}

// versions are the name=resourceVersion of every inventory ConfigMap, to tell whether one
// was written.
func (s invConfigMaps) versions() []string {
	var out []string
	for _, cm := range append([]*corev1.ConfigMap{s.head}, s.listed...) {
		if cm != nil {
			out = append(out, cm.Name+"="+cm.ResourceVersion)
		}
	}
	return out
}

// entries counts the entries over the head and listed parts.
func (s invConfigMaps) entries() int {
	n := 0
	for _, cm := range append([]*corev1.ConfigMap{s.head}, s.listed...) {
		if cm != nil {
			n += len(cm.Data)
		}
	}
	return n
}

// wantInventory checks that the stored inventory holds exactly want, each with a UID, in
// ConfigMaps that hold each entry once, with no unlisted part left.
func (h *harness) wantInventory(what string, want []string) invConfigMaps {
	h.t.Helper()
	inv := h.inventory()
	wantKeys(h.t, what+": inventory", inv, want...)
	for id, uid := range inv {
		if uid == "" {
			h.t.Errorf("%s: %s has no UID recorded", what, id)
		}
	}
	s := h.stored()
	if n := s.entries(); n != len(want) {
		h.t.Errorf("%s: %d entries over the head and its parts, want %d (each once)", what, n, len(want))
	}
	if len(s.unlisted) > 0 {
		h.t.Errorf("%s: unlisted parts left: %v", what, s.unlisted)
	}
	return s
}

// TestSyncAcrossParts drives a set whose inventory spans a head and four parts through its
// life against the API server: apply, a no-op (no inventory ConfigMap written), a 1% change
// (none either), a prune (the parts shrink, emptied ones are deleted), and Delete (every
// object, the head and the parts gone).
func TestSyncAcrossParts(t *testing.T) {
	h := partsHarness(t, nil, Hooks{}, inventory.StoreHooks{})
	opts := testOpts()
	all := h.objs(0, 300, "1")
	h.apply(opts, all...)
	s := h.wantInventory("apply", ids(all))
	if len(s.listed) < 3 || len(s.head.Data) == 0 {
		t.Fatalf("%d parts listed, %d entries in the head: want a head with entries and at least 3 parts", len(s.listed), len(s.head.Data))
	}
	for _, p := range s.listed {
		if _, ok := p.Labels[inventory.IDLabel]; ok {
			t.Errorf("part %s carries the inventory-id label: a tool would take it for an inventory", p.Name)
		}
	}
	before := s.versions()

	res := h.apply(opts, all...)
	for _, c := range res.Changes {
		if c.Action != ActionUnchanged {
			t.Errorf("no-op: %s %s", c.ID, c.Action)
		}
	}
	if got := h.stored().versions(); !slices.Equal(got, before) {
		t.Errorf("a no-op wrote inventory ConfigMaps: %v, before %v", got, before)
	}

	changed := h.objs(0, 300, "1")
	for i := range 3 { // 1%
		changed[i*100] = configMap(h.ns, changed[i*100].GetName(), map[string]any{"v": "2"})
	}
	res = h.apply(opts, changed...)
	n := 0
	for _, c := range res.Changes {
		if c.Action != ActionUnchanged {
			n++
		}
	}
	if n != 3 {
		t.Errorf("1%% change: %d objects not unchanged, want 3 (%v)", n, actions(res.Changes))
	}
	if got := h.liveCM("obj-100"); got == nil || got.Object["data"].(map[string]any)["v"] != "2" {
		t.Errorf("obj-100 after the change: %v", got)
	}
	if got := h.stored().versions(); !slices.Equal(got, before) {
		t.Errorf("a change that adds and removes nothing wrote inventory ConfigMaps: %v, before %v", got, before)
	}

	kept := changed[:150]
	res = h.apply(opts, kept...)
	pruned := 0
	for _, c := range res.Pruned {
		if c.Action == ActionPruned {
			pruned++
		}
	}
	if pruned != 150 {
		t.Errorf("pruned %d, want 150", pruned)
	}
	for _, name := range []string{"obj-150", "obj-299"} {
		if h.liveCM(name) != nil {
			t.Errorf("%s survived its prune", name)
		}
	}
	shrunk := h.wantInventory("prune", ids(kept))
	if len(shrunk.listed) >= len(s.listed) {
		t.Errorf("after pruning half, %d parts, before %d: want fewer", len(shrunk.listed), len(s.listed))
	}

	if _, err := h.eng.Delete(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for _, name := range []string{"obj-000", "obj-149"} {
		if h.liveCM(name) != nil {
			t.Errorf("%s survived Delete", name)
		}
	}
	if s := h.stored(); s.head != nil || len(s.unlisted) > 0 {
		t.Errorf("after Delete: head %v, parts %v left", s.head != nil, s.unlisted)
	}
}

// TestSyncGrowsIntoPartsAndBack: an inventory in today's format (one ConfigMap, no
// annotation, as earlier versions wrote it) keeps working when it grows into parts (its
// entries stay in the head) and, once it shrinks to entries its head holds, is in today's
// format again, without parts.
func TestSyncGrowsIntoPartsAndBack(t *testing.T) {
	h := newHarness(t, Hooks{}) // the default part size: 40 objects fit in one ConfigMap
	opts := testOpts()
	first := h.objs(0, 40, "1")
	h.apply(opts, first...)
	s := h.wantInventory("one ConfigMap", ids(first))
	if len(s.head.Annotations) != 0 || len(s.listed) != 0 || s.head.Labels[inventory.IDLabel] != h.ref.ID {
		t.Fatalf("small inventory: annotations %v, %d parts, labels %v; want the cli-utils format", s.head.Annotations, len(s.listed), s.head.Labels)
	}
	headKeys := keysOf(s.head.Data)

	h.useParts(inventory.StoreHooks{})
	all := h.objs(0, 300, "1")
	h.apply(opts, all...)
	s = h.wantInventory("grown", ids(all))
	if len(s.listed) < 3 {
		t.Errorf("grown to 300: %d parts, want at least 3", len(s.listed))
	}
	for _, k := range headKeys {
		if _, ok := s.head.Data[k]; !ok {
			t.Errorf("%s left the head when the inventory grew: entries must not move", k)
		}
	}

	small := h.objs(0, 20, "1")
	h.apply(opts, small...)
	s = h.wantInventory("shrunk", ids(small))
	if len(s.head.Annotations) != 0 || len(s.listed) != 0 {
		t.Errorf("shrunk to 20: annotations %v, %d parts; want the one-ConfigMap format again", s.head.Annotations, len(s.listed))
	}
	if h.liveCM("obj-299") != nil || h.liveCM("obj-019") == nil {
		t.Error("the prune of the shrink deleted the wrong objects")
	}
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
