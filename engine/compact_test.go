package engine

import (
	"maps"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func sameString(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

func cachedMeta(ns, name string, labels, annotations map[string]string) *metav1.PartialObjectMetadata {
	pm := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: string([]byte("v1")), Kind: string([]byte("ConfigMap"))},
		ObjectMeta: metav1.ObjectMeta{Namespace: string([]byte(ns)), Name: name, Labels: labels, Annotations: annotations}}
	return pm
}

// TestSharedMapsAlike: objects whose labels or annotations are alike share one map and
// one copy of their namespace, kind and API version; a map that differs in a key or a
// value is not shared, and the table starts again past its bound.
func TestSharedMapsAlike(t *testing.T) {
	s := &sharedMaps{}
	a := cachedMeta("app", "a", map[string]string{"l": "1", "m": "2"}, map[string]string{OwnerAnnotation: "sync_app_web"})
	b := cachedMeta("app", "b", map[string]string{"m": "2", "l": "1"}, map[string]string{OwnerAnnotation: "sync_app_web"})
	c := cachedMeta("app", "c", map[string]string{"l": "1", "m": "3"}, map[string]string{OwnerAnnotation: "sync_app_api"})
	d := cachedMeta("app", "d", map[string]string{"l": "1\x00m", "": "2"}, nil)
	// A value that spells another map's entries out: never taken for it.
	e := cachedMeta("app", "e", map[string]string{"l": "1\x00m\x002\x00"}, map[string]string{"a": "x\x00" + OwnerAnnotation + "\x00sync_app_web"})
	f := cachedMeta("app", "f", map[string]string{"l": "1\x01m\x012"}, map[string]string{"a": "x", OwnerAnnotation: "sync_app_web"})
	for _, pm := range []*metav1.PartialObjectMetadata{a, b, c, d, e, f} {
		s.compact(pm)
	}
	if !sameMap(a.Labels, b.Labels) || !sameMap(a.Annotations, b.Annotations) {
		t.Error("alike labels or annotations are not shared")
	}
	if sameMap(a.Labels, c.Labels) || sameMap(a.Annotations, c.Annotations) || sameMap(a.Labels, d.Labels) {
		t.Error("maps that differ are shared")
	}
	if sameMap(e.Labels, a.Labels) || sameMap(e.Annotations, f.Annotations) || f.Annotations[OwnerAnnotation] != "sync_app_web" ||
		len(e.Annotations) != 1 {
		t.Error("a value spelling out other entries shares their map")
	}
	if b.Labels["m"] != "2" || c.Labels["m"] != "3" || d.Labels[""] != "2" || d.Annotations != nil {
		t.Errorf("shared maps changed what an object holds: %v %v %v", b.Labels, c.Labels, d.Labels)
	}
	if !sameString(a.Namespace, c.Namespace) || !sameString(a.Kind, b.Kind) || !sameString(a.APIVersion, d.APIVersion) {
		t.Error("namespace, kind or API version not one copy")
	}
	big := map[string]string{"a": strings.Repeat("x", maxSharedMapBytes)}
	many := map[string]string{}
	for i := range maxSharedMapEntries + 1 {
		many[string(rune('a'+i))] = ""
	}
	for what, m := range map[string]map[string]string{"over its bytes": big, "over its entries": many} {
		g, h := cachedMeta("app", "g", nil, m), cachedMeta("app", "h", nil, maps.Clone(m))
		s.compact(g)
		s.compact(h)
		if sameMap(g.Annotations, h.Annotations) || len(s.maps) != 9 {
			t.Errorf("a map %s is shared, or held (%d maps in the table, want 9)", what, len(s.maps))
		}
	}
	for i := range maxSharedMaps + 1 {
		s.compact(cachedMeta("app", "x", map[string]string{"i": string(rune('a' + i%26)), "n": string(rune(i))}, nil))
	}
	if len(s.maps) > maxSharedMaps {
		t.Errorf("the table holds %d maps, over its bound %d", len(s.maps), maxSharedMaps)
	}
}

// TestWatchCacheSharesMetadata: the watch cache's metadata objects of one set share their
// annotations (the owner annotation), as the engine's fast path reads them.
func TestWatchCacheSharesMetadata(t *testing.T) {
	h := newWatchHarness(t)
	h.apply(testOpts(), configMap(h.ns, "a", nil), configMap(h.ns, "b", nil))
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	read := func(name string) *metav1.PartialObjectMetadata {
		for range 100 {
			live, err := h.eng.cache.cachedLive(h.ctx, gvk, client.ObjectKey{Namespace: h.ns, Name: name})
			if err != nil {
				t.Fatal(err)
			}
			if live != nil {
				return live
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: not in the watch cache", name)
		return nil
	}
	a, b := read("a"), read("b")
	if a.Annotations[OwnerAnnotation] != h.ref.ID || !sameMap(a.Annotations, b.Annotations) {
		t.Errorf("annotations %v and %v: want the owner annotation, one map", a.Annotations, b.Annotations)
	}
}
