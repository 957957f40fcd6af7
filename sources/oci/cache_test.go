package oci

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/registry"
)

// TestFetchCacheQuota: past the quota the least recently used artifact no fetch holds is
// removed, one held until its reader's deadline stays, and an artifact over the quota
// alone fails naming it.
func TestFetchCacheQuota(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	kb := strings.Repeat("x", 1000)
	for _, tag := range []string{"a", "b", "c"} {
		reg.PushFiles(t, "app", tag, map[string]string{"f.yaml": tag + kb})
	}
	f := NewFetcher(t.TempDir())
	opts := localOptions()
	opts.CacheQuota = 20_000 // two artifacts of 8 KiB on disk (a folder and a file), not three
	fetch := func(ctx context.Context, tag string) (*Result, error) {
		return f.Fetch(ctx, Artifact{URL: reg.URL("app"), Ref: Ref{Tag: tag}, Insecure: true}, opts)
	}
	held, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	a, err := fetch(held, "a") // held for an hour: its reader renders under this ctx
	if err != nil {
		t.Fatal(err)
	}
	b, err := fetch(t.Context(), "b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fetch(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Dir); err != nil {
		t.Errorf("the held artifact was removed: %v", err)
	}
	if _, err := os.Stat(b.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the least recently used free artifact is still on disk (%v)", err)
	}
	if got := f.CacheBytes(); got > opts.CacheQuota {
		t.Errorf("cache holds %d bytes, over the quota of %d", got, opts.CacheQuota)
	}
	opts.CacheQuota = 5_000
	if _, err := fetch(t.Context(), "b"); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--oci-cache-quota") {
		t.Errorf("an artifact over the quota alone: %v, want ErrTooLarge naming --oci-cache-quota", err)
	}
}

// TestFetchLayerSelector: a layer picked by media type is extracted (a plain tar) or
// copied as one file named by its title.
func TestFetchLayerSelector(t *testing.T) {
	reg := registry.Start(t, registry.Options{})
	reg.Push(t, "multi", "v1",
		registry.Layer{MediaType: registry.FluxContentMediaType, Data: registry.Tarball(t, map[string]string{"first.yaml": "1"})},
		registry.Layer{MediaType: "application/vnd.example.yaml", Data: []byte("kind: ConfigMap\n"), Title: "cm.yaml"})
	f := NewFetcher(t.TempDir())
	res, err := f.Fetch(t.Context(), Artifact{URL: reg.URL("multi"), Ref: Ref{Tag: "v1"}, Insecure: true,
		Layer: LayerSelector{MediaType: "application/vnd.example.yaml", Operation: OperationCopy}}, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Dir, "cm.yaml"); got != "kind: ConfigMap\n" {
		t.Errorf("copied layer = %q", got)
	}
	res, err = f.Fetch(t.Context(), Artifact{URL: reg.URL("multi"), Ref: Ref{Tag: "v1"}, Insecure: true}, localOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, res.Dir, "first.yaml"); got != "1" {
		t.Errorf("default layer: first.yaml = %q", got)
	}
}
