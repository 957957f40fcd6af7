package sources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderLimits: too many files, a file too large or too many objects are refused with
// a terminal error naming the file or the count, in a plain folder and in a kustomize build
// (in-process and isolated).
func TestRenderLimits(t *testing.T) {
	big := cm("big", "default") + "  pad: " + strings.Repeat("x", 300) + "\n"
	kust := func(files ...string) string { return "resources: [" + strings.Join(files, ", ") + "]\n" }
	tests := []struct {
		name   string
		files  map[string]string
		path   string
		limits Limits
		want   string
		is     error
	}{
		{
			name:   "plain folder with too many files",
			files:  map[string]string{"apps/a.yaml": cm("a", "x"), "apps/b.yaml": cm("b", "x"), "apps/c.yaml": cm("c", "x")},
			path:   "apps",
			limits: Limits{MaxFiles: 2},
			want:   "apps: too many files: more than 2 files",
			is:     ErrTooManyFiles,
		},
		{
			name: "kustomize source with too many files",
			files: map[string]string{"k/kustomization.yaml": "resources: [a.yaml, ../base]\n", "k/a.yaml": cm("a", "x"),
				"base/kustomization.yaml": kust("b.yaml", "c.yaml"), "base/b.yaml": cm("b", "x"), "base/c.yaml": cm("c", "x")},
			path:   "k",
			limits: Limits{MaxFiles: 4},
			want:   "k/kustomization.yaml: too many files: the kustomization reaches more than 4 files",
			is:     ErrTooManyFiles,
		},
		{
			name:   "plain file too large",
			files:  map[string]string{"apps/a.yaml": cm("a", "x"), "apps/big.yaml": big},
			path:   "apps",
			limits: Limits{MaxFileSize: 200},
			want:   "apps/big.yaml: file too large: 395 bytes, more than 200",
			is:     ErrFileTooLarge,
		},
		{
			name:   "kustomize file too large",
			files:  map[string]string{"k/kustomization.yaml": "resources: [a.yaml, ../base]\n", "k/a.yaml": cm("a", "x"), "base/kustomization.yaml": kust("big.yaml"), "base/big.yaml": big},
			path:   "k",
			limits: Limits{MaxFileSize: 200},
			want:   "base/big.yaml: file too large: 395 bytes, more than 200",
			is:     ErrFileTooLarge,
		},
		{
			name:   "plain folder with too many objects",
			files:  map[string]string{"apps/a.yaml": cm("a", "x") + "---\n" + cm("b", "x"), "apps/c.yaml": cm("c", "x")},
			path:   "apps",
			limits: Limits{MaxObjects: 2},
			want:   "apps: too many objects: 3 objects, more than 2",
			is:     ErrTooManyObjects,
		},
		{
			name:   "kustomize build with too many objects",
			files:  map[string]string{"k/kustomization.yaml": kust("a.yaml"), "k/a.yaml": cm("a", "x") + "---\n" + cm("b", "x") + "---\n" + cm("c", "x")},
			path:   "k",
			limits: Limits{MaxObjects: 2},
			want:   "k/kustomization.yaml: too many objects: 3 objects, more than 2",
			is:     ErrTooManyObjects,
		},
		{
			name:   "kustomize builds of a folder with too many objects in all",
			files:  map[string]string{"apps/k1/kustomization.yaml": kust("a.yaml"), "apps/k1/a.yaml": cm("a", "x") + "---\n" + cm("b", "x"), "apps/k2/kustomization.yaml": kust("c.yaml"), "apps/k2/c.yaml": cm("c", "x")},
			path:   "apps",
			limits: Limits{MaxObjects: 2},
			want:   "apps: too many objects: 3 objects, more than 2",
			is:     ErrTooManyObjects,
		},
	}
	for _, tt := range tests {
		for _, isolate := range []bool{false, true} {
			name := tt.name
			if isolate {
				name += " isolated"
			}
			t.Run(name, func(t *testing.T) {
				dir := writeTree(t, tt.files)
				opts := DefaultRenderOptions()
				opts.Limits, opts.Isolate = tt.limits, isolate
				objs, err := Render(t.Context(), dir, tt.path, opts)
				if err == nil {
					t.Fatalf("Render returned %d objects and no error", len(objs))
				}
				if !strings.Contains(err.Error(), tt.want) || !errors.Is(err, tt.is) || !IsTerminal(err) {
					t.Errorf("error:\n%v\nwant a terminal %v containing %q", err, tt.is, tt.want)
				}
			})
		}
	}
}

// TestRenderWithinLimits: the limits of a render are inclusive, and zero fields mean the
// defaults.
func TestRenderWithinLimits(t *testing.T) {
	dir := writeTree(t, map[string]string{"apps/a.yaml": cm("a", "x"), "apps/b.yaml": cm("b", "x")})
	opts := RenderOptions{Limits: Limits{MaxFiles: 2, MaxObjects: 2, MaxFileSize: int64(len(cm("a", "x")))}}
	if _, err := Render(t.Context(), dir, "apps", opts); err != nil {
		t.Errorf("Render at the limits: %v", err)
	}
	if _, err := Render(t.Context(), dir, "apps", RenderOptions{}); err != nil {
		t.Errorf("Render with zero limits: %v", err)
	}
}

// TestRenderByteBudget: a plain folder of symlinks to one file reads the file once per
// symlink, and so does the copy made for a kustomize build that lists them; the render stops
// at Limits.MaxTotalSize with one terminal error naming the rendered path and the limit, in
// place of decoding (or copying) every link (I13: bounded in size).
func TestRenderByteBudget(t *testing.T) {
	big := cm("big", "default") + "  pad: " + strings.Repeat("x", 16<<10) + "\n"
	dir := writeTree(t, map[string]string{
		"apps/big.yaml": big,
		"k/big.yaml":    big,
	})
	var links []string
	for i := range 50 {
		link := fmt.Sprintf("link%02d.yaml", i)
		for _, d := range []string{"apps", "k"} {
			if err := os.Symlink("big.yaml", filepath.Join(dir, d, link)); err != nil {
				t.Fatal(err)
			}
		}
		links = append(links, link)
	}
	if err := os.WriteFile(filepath.Join(dir, "k", "kustomization.yaml"), []byte("resources: ["+strings.Join(links, ", ")+"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"apps", "k"} {
		for _, isolate := range []bool{false, true} {
			opts := DefaultRenderOptions()
			opts.Isolate = isolate
			opts.Limits.MaxTotalSize = 10 * int64(len(big))
			_, err := Render(t.Context(), dir, path, opts)
			want := fmt.Sprintf("%s: source too large: more than %d bytes read", path, opts.Limits.MaxTotalSize)
			if !errors.Is(err, ErrSourceTooLarge) || !IsTerminal(err) || !strings.Contains(err.Error(), want) ||
				strings.Contains(err.Error(), "duplicate") {
				t.Errorf("%s, isolate=%t: error:\n%v\nwant only a terminal ErrSourceTooLarge containing %q", path, isolate, err, want)
			}
		}
	}
}
