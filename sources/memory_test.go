package sources

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestRenderChildMemoryLimit: a kustomization whose generators name one 4 MiB file 28
// times asks its build for well over 100 MiB; under a 32 MiB render memory limit the child
// dies alone and the render fails, terminal, naming the limit and the flag that raises it.
// The same kustomization over a small file renders under the same limit.
func TestRenderChildMemoryLimit(t *testing.T) {
	var files []string
	for i := range 28 {
		files = append(files, fmt.Sprintf("k%d=data.txt", i))
	}
	kust := "resources: [cm.yaml]\nconfigMapGenerator:\n- name: big\n  files: [" + strings.Join(files, ", ") + "]\n"
	opts := DefaultRenderOptions()
	opts.Isolate = true
	opts.Limits.MaxTotalSize = 1 << 30 // only the memory limit is under test
	opts.Limits.MaxRenderMemory = 32 << 20

	small := writeTree(t, map[string]string{"k/kustomization.yaml": kust, "k/cm.yaml": cm("a", "default"), "k/data.txt": "small\n"})
	if objs, err := Render(t.Context(), small, "k", opts); err != nil || len(objs) != 2 {
		t.Fatalf("small render under the limit: %d objects, %v", len(objs), err)
	}

	big := writeTree(t, map[string]string{"k/kustomization.yaml": kust, "k/cm.yaml": cm("a", "default"),
		"k/data.txt": strings.Repeat("0123456789abcdef\n", 4<<20/17)})
	objs, err := Render(t.Context(), big, "k", opts)
	if err == nil {
		t.Fatalf("Render returned %d objects and no error", len(objs))
	}
	want := "k/kustomization.yaml: render exceeded the memory limit of 32 MiB (raise it with --render-memory-limit)"
	if err.Error() != want || !errors.Is(err, ErrRenderMemory) || !IsTerminal(err) {
		t.Errorf("error:\n%v\nwant a terminal ErrRenderMemory:\n%s", err, want)
	}
}

// TestPlainYAMLAliasExpansionBounded: a 110 KB manifest whose one 100 KB anchored scalar
// is aliased 2,000 times would decode to 200 MB (under the decoder's own alias-ratio guard,
// which counts nodes, not bytes). It is refused before it is decoded, naming the file and
// the limit, and the render allocates a small multiple of the file, not of its expansion.
func TestPlainYAMLAliasExpansionBounded(t *testing.T) {
	doc := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: laughs, namespace: default}\nanchor: &a \"" +
		strings.Repeat("x", 100_000) + "\"\ndata:\n  list: [" + strings.TrimSuffix(strings.Repeat("*a, ", 2000), ", ") + "]\n"
	dir := writeTree(t, map[string]string{"apps/laughs.yaml": doc})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	objs, err := Render(t.Context(), dir, "apps", DefaultRenderOptions())
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatalf("Render returned %d objects and no error", len(objs))
	}
	want := "apps/laughs.yaml:1: file too large: alias expansion exceeds 8388608 bytes (raise the limit with --max-file-size)"
	if err.Error() != want || !errors.Is(err, ErrFileTooLarge) || !IsTerminal(err) {
		t.Errorf("error:\n%v\nwant a terminal ErrFileTooLarge:\n%s", err, want)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32<<20 {
		t.Errorf("the render allocated %d MiB for a %d KB file", alloc>>20, len(doc)/1000)
	}
}
