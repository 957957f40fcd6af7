package sources

import "testing"

// TestRenderIgnoredPaths: a path is ignored when named, or below an ignored folder; a
// file named like a folder's prefix, or a folder's parent, is not.
func TestRenderIgnoredPaths(t *testing.T) {
	s := newIgnoredSet([]string{"bin/", "app/out.yaml", "a/b/"})
	for p, want := range map[string]bool{
		"bin": true, "bin/converge": true, "bin/x/y.yaml": true,
		"app/out.yaml": true, "a/b": true, "a/b/c.yaml": true,
		"binary/x": false, "app": false, "app/out.yaml.bak": false, "a": false, "a/bc": false,
		".": false, "": false,
	} {
		if got := s.has(p); got != want {
			t.Errorf("has(%q) = %t, want %t", p, got, want)
		}
	}
	if newIgnoredSet(nil).has("bin") {
		t.Error("an empty set ignores bin")
	}
}
