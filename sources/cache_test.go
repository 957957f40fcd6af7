package sources

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/internal/childproc"
)

// decodedEntry decodes n objects made by gen as a render child's answer would be, and
// returns them as a cache entry with the heap they took.
func decodedEntry(t *testing.T, n int, gen func(int) string) (cacheEntry, int64) {
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
	var e cacheEntry
	for _, d := range objs {
		e.objs = append(e.objs, d.obj)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(&answer) // its bytes were in the heap before: not freed by the decode
	if err != nil || len(objs) != n {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	return e, int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

func cmJSON(i int) string {
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-%d","namespace":"apps"},"data":{"config.yaml":%q}}`,
		i, strings.Repeat("key: value\n", 90))
}

// TestRenderCacheBytes: the render cache's size estimate is within a factor of two of the
// heap its objects take, and a cache bounded by bytes drops the least recently used
// renders to fit, keeping the one just used. Before the bound it kept 256 renders whatever
// their size: all three stayed.
func TestRenderCacheBytes(t *testing.T) {
	for name, gen := range map[string]func(int) string{"ConfigMaps": cmJSON, "Deployments": deploymentJSON} {
		e, heap := decodedEntry(t, 2000, gen)
		est := objectsSize(e)
		t.Logf("%s: estimated %d bytes, heap %d", name, est, heap)
		if est < heap/2 || est > heap*2 {
			t.Errorf("%s: estimated %d bytes for %d of heap", name, est, heap)
		}
		runtime.KeepAlive(e)
	}

	one := func(name string) cacheEntry {
		return cacheEntry{objs: []*unstructured.Unstructured{{Object: map[string]any{"kind": "ConfigMap", "data": map[string]any{"k": strings.Repeat(name, 1000)}}}}}
	}
	size := objectsSize(one("a"))
	c := newRenderCache(256, size*5/2)
	c.put("a", one("a"))
	c.put("b", one("b"))
	c.get("a")
	c.put("c", one("c"))
	for key, want := range map[string]bool{"a": true, "b": false, "c": true} {
		if _, ok := c.entries[key]; ok != want {
			t.Errorf("render %s kept: %t, want %t", key, ok, want)
		}
	}
	if c.bytes != 2*size {
		t.Errorf("cache bytes: %d, want %d", c.bytes, 2*size)
	}
	c.put("huge", cacheEntry{objs: []*unstructured.Unstructured{{Object: map[string]any{"data": strings.Repeat("x", int(size*3))}}}})
	if _, ok := c.entries["huge"]; ok || len(c.entries) != 2 {
		t.Errorf("a render over the whole bound was kept, or dropped others: %d renders", len(c.entries))
	}
}
