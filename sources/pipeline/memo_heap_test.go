package pipeline

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/converge-dev/converge/sources"
)

// heapInUse is the live heap after two collections.
func heapInUse() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestMemoKeepsOnlyWhatTheStepChanged: between two reconciles a Sync's memo holds the objects
// its substitution changed, not the render: each load decodes its own objects, and a memo
// that kept a whole result would keep that load's decoded render with it. The next load of
// the same render gets its own objects with the kept one in its place.
func TestMemoKeepsOnlyWhatTheStepChanged(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `---
{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d-%d","namespace":"apps","labels":{"app":"a"}},"spec":{"replicas":2,
"selector":{"matchLabels":{"app":"a"}},"template":{"metadata":{"labels":{"app":"a"}},"spec":{"containers":[{"name":"web",
"image":"registry.example/web:1","ports":[{"containerPort":8080}],"env":[{"name":"A","value":"1"}]}]}}}}
`, i)
	}
	sb.WriteString("---\n{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\",\"namespace\":\"apps\"},\"data\":{\"k\":\"${v}\"}}\n")
	if err := os.WriteFile(filepath.Join(dir, "all.yaml"), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	l := sources.NewLoaderSized(t.TempDir(), 1<<30)
	opts := sources.DefaultLoadOptions()
	opts.Owner = "apps/web"
	opts.Render.Limits.MaxRenderOutput = 64 << 20
	src := sources.Source{Dir: dir, Path: "."}
	load := func() *sources.Bundle {
		t.Helper()
		b, err := l.Load(t.Context(), src, opts)
		if err != nil || len(b.Objects) != n+1 {
			t.Fatalf("load: %v", err)
		}
		return b
	}
	load() // rendered, kept as JSON

	atRest := heapInUse()
	b := load()
	decodedHeap := heapInUse() - atRest
	m := &Memo{}
	first, err := substitute(m, b, map[string]string{"v": "one"}, false)
	if err != nil {
		t.Fatal(err)
	}
	kept := first.Bundle.Objects[n]
	b, first = nil, Result{}
	pinned := heapInUse() - atRest
	t.Logf("a load's objects: %d KB; the memo keeps %d KB", decodedHeap>>10, pinned>>10)
	if pinned > decodedHeap/10 {
		t.Errorf("the memo keeps %d KB between reconciles, against %d KB of one load's objects", pinned>>10, decodedHeap>>10)
	}

	again := load()
	second, err := substitute(m, again, map[string]string{"v": "one"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if second.Bundle.Objects[n] != kept || second.Bundle.Objects[0] != again.Objects[0] {
		t.Error("the same render and variables: want the new load's objects with the kept substitution in its place")
	}
	if second.Bundle.Key == again.Key || second.Bundle.Key == "" {
		t.Errorf("the substituted Bundle has the render's Key %q: a later step would take it for the render", second.Bundle.Key)
	}
	runtime.KeepAlive(m)
	runtime.KeepAlive(l)
}
