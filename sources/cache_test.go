package sources

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/internal/childproc"
)

// decodeAnswer decodes n objects made by gen as a render child's answer would be, and returns
// them with the heap they took.
func decodeAnswer(t *testing.T, n int, gen func(int) string) ([]*unstructured.Unstructured, int64) {
	t.Helper()
	var answer strings.Builder
	for i := range n {
		fmt.Fprintf(&answer, `{"r":%s}`+"\n", gen(i))
	}
	answer.WriteString(`{"end":{"read":0}}` + "\n")
	b := newBudget("k", Limits{MaxRenderOutput: 1 << 30})
	defer b.release()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	objs, _, err := readAnswer(&childproc.Reader{R: strings.NewReader(answer.String()), Max: 1 << 30}, "k/kustomization.yaml", b)
	var out []*unstructured.Unstructured
	for _, d := range objs {
		out = append(out, d.obj)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(&answer) // its bytes were in the heap before: not freed by the decode
	if err != nil || len(objs) != n {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	return out, int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

func cmJSON(i int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"apps"},"data":{"config.yaml":%q}}`,
		i, strings.Repeat("key: value\n", 90))
}

// TestRenderCacheBytes: the render cache keeps a render in a fraction of the heap its decoded
// objects take (a fifth for Deployments, mostly maps; two thirds for ConfigMaps, mostly one
// string), decodes it back to equal objects of the caller's own, and a cache bounded by
// bytes drops the least recently used renders to fit, keeping the one just used.
func TestRenderCacheBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		gen      func(int) string
		num, den int64
	}{"ConfigMaps": {cmJSON, 2, 3}, "Deployments": {deploymentJSON, 1, 5}} {
		objs, heap := decodeAnswer(t, 2000, tc.gen)
		c := newRenderCache(256, 1<<30)
		if !c.put(name, objs, cacheEntry{}) {
			t.Fatalf("%s: not kept", name)
		}
		t.Logf("%s: kept in %d bytes, decoded %d", name, c.bytes, heap)
		if c.bytes > heap*tc.num/tc.den {
			t.Errorf("%s: kept in %d bytes, over %d/%d of the %d its decoded objects take", name, c.bytes, tc.num, tc.den, heap)
		}
		e, _ := c.get(name)
		back, err := e.objects()
		if err != nil || !equality.Semantic.DeepEqual(back, objs) {
			t.Fatalf("%s: decoded back unequal: %v", name, err)
		}
		back[0].Object["kind"] = "Changed"
		if again, _ := e.objects(); again[0].GetKind() == "Changed" {
			t.Errorf("%s: two loads share their objects", name)
		}
	}

	one := func(name string) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{{Object: map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": strings.Repeat(name, 1000)}}}}
	}
	c := newRenderCache(256, 1<<30)
	c.put("a", one("a"), cacheEntry{})
	size := c.bytes
	c = newRenderCache(256, size*5/2)
	c.put("a", one("a"), cacheEntry{})
	c.put("b", one("b"), cacheEntry{})
	c.get("a")
	c.put("c", one("c"), cacheEntry{})
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := c.entries[key]; ok != want {
			t.Errorf("render %s kept: %t, want %t", key, ok, want)
		}
	}
	if c.bytes != 2*size {
		t.Errorf("cache bytes: %d, want %d", c.bytes, 2*size)
	}
	if c.put("huge", []*unstructured.Unstructured{{Object: map[string]any{"data": strings.Repeat("x", int(size*3))}}}, cacheEntry{}) {
		t.Error("a render over the whole bound reported kept")
	}
	if _, ok := c.entries["huge"]; ok || len(c.entries) != 2 {
		t.Errorf("a render over the whole bound was kept, or dropped others: %d renders", len(c.entries))
	}
}
