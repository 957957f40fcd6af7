package sources

import (
	"crypto/rand"
	"encoding/hex"
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

// TestRenderCacheBytes: the render cache keeps a render in a small fraction of the heap its
// decoded objects take (its JSON compressed as one stream: under a twentieth for these
// Deployments and ConfigMaps, whose objects repeat their fields), decodes it back to equal objects of the caller's own, and a cache bounded by
// bytes drops the least recently used renders to fit, keeping the one just used.
func TestRenderCacheBytes(t *testing.T) {
	for name, tc := range map[string]struct {
		gen      func(int) string
		num, den int64
	}{"ConfigMaps": {cmJSON, 1, 20}, "Deployments": {deploymentJSON, 1, 20}} {
		objs, heap := decodeAnswer(t, 2000, tc.gen)
		c := newRenderCache(256, 1<<30)
		if _, ok := c.put(name, objs, cacheEntry{}); !ok {
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
	noise := make([]byte, size*4) // kept compressed: random bytes, which do not compress below half their hex
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.put("huge", []*unstructured.Unstructured{{Object: map[string]any{"data": hex.EncodeToString(noise)}}}, cacheEntry{}); ok {
		t.Error("a render over the whole bound reported kept")
	}
	if _, ok := c.entries["huge"]; ok || len(c.entries) != 2 {
		t.Errorf("a render over the whole bound was kept, or dropped others: %d renders", len(c.entries))
	}
}

// TestRenderCacheLoadsOneRenderAlike: every load of a kept render gives the same objects,
// the one that rendered it included: a JSON file's 3.0 and 1e18 are floats when decoded from
// the file and integers once written back as 3 and 1000000000000000000, and the engine's memo
// hashes the two kinds apart. HTML characters are kept as they are, one byte each.
func TestRenderCacheLoadsOneRenderAlike(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/d.json": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"d","namespace":"apps",` +
		`"annotations":{"html":"<a & b>"}},"data":{"x":"y"},"spec":{"replicas":3.0,"big":1e18,"half":0.5}}`})
	l := NewLoader(t.TempDir())
	src := Source{Dir: dir, Path: "apps"}
	types := func() string {
		t.Helper()
		b, err := l.Load(t.Context(), src, DefaultLoadOptions())
		if err != nil {
			t.Fatal(err)
		}
		spec := b.Objects[0].Object["spec"].(map[string]any)
		return fmt.Sprintf("%T %T %T %s", spec["replicas"], spec["big"], spec["half"], b.Objects[0].GetAnnotations()["html"])
	}
	miss, hit := types(), types()
	if miss != hit {
		t.Errorf("one render loads as other objects: when rendered %s, when kept %s", miss, hit)
	}
	for _, e := range l.cache.entries {
		docs, err := e.documents()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(docs[0]), `"<a & b>"`) {
			t.Errorf("kept as %s: HTML characters escaped", docs[0])
		}
	}
}
