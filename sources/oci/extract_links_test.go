package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func tarOf(t *testing.T, hs ...*tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Linkname))
			data := h.Linkname
			h.Linkname = ""
			h.Mode = 0o644
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(data))
			continue
		}
		h.Mode = 0o755
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	return buf.Bytes()
}

func escapes(t *testing.T, dir, name string) bool {
	target, err := filepath.EvalSymlinks(filepath.Join(dir, name))
	if err != nil {
		t.Logf("%s: %v", name, err)
		return false
	}
	rel, _ := filepath.Rel(dir, target)
	t.Logf("%s resolves to %s (rel %s)", name, target, rel)
	return rel == ".." || len(rel) > 2 && rel[:3] == "../"
}

// TestExtractRefusesEntriesUnderSymlink: a link's target is checked lexically from the
// entry's name, so no entry is written under an earlier symlink of the layer (one to a
// shallower folder would make a lexically inside target lead out). Without it: esc was
// written through up and led out of the artifact.
func TestExtractRefusesEntriesUnderSymlink(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b", "c")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(base, "host-secret"), []byte("HOST"), 0o644)
	data := tarOf(t,
		&tar.Header{Name: "x/y/", Typeflag: tar.TypeDir},
		&tar.Header{Name: "x/y/up", Typeflag: tar.TypeSymlink, Linkname: "../.."},                    // = root, lexically fine
		&tar.Header{Name: "x/y/up/esc", Typeflag: tar.TypeSymlink, Linkname: "../../../host-secret"}, // lexically x/host-secret... really root/../../../host-secret
	)
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	_, err := extract("test", bytes.NewReader(data), root, limits{})
	if errors.Is(err, ErrUnsafeEntry) {
		return
	}
	if err != nil {
		t.Fatalf("extract: %v, want ErrUnsafeEntry", err)
	}
	if escapes(t, dir, "esc") {
		b, _ := os.ReadFile(filepath.Join(dir, "esc"))
		t.Errorf("a symlink leading out of the artifact was extracted: esc -> %q", b)
	}
}

// TestExtractRefusesHardLinkToSymlink: a hard link to an earlier symlink, placed in a
// shallower folder, would carry a relative target that leads out: refused.
func TestExtractRefusesHardLinkToSymlink(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "a", "b")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(base, "host-secret"), []byte("HOST"), 0o644)
	data := tarOf(t,
		&tar.Header{Name: "p/q/", Typeflag: tar.TypeDir},
		&tar.Header{Name: "p/q/l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}, // = root/x
		&tar.Header{Name: "top", Typeflag: tar.TypeLink, Linkname: "p/q/l"},
	)
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	_, err := extract("test", bytes.NewReader(data), root, limits{})
	if errors.Is(err, ErrUnsafeEntry) {
		return
	}
	if err != nil {
		t.Fatalf("extract: %v, want ErrUnsafeEntry", err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "top")); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		tgt, _ := os.Readlink(filepath.Join(dir, "top"))
		t.Errorf("hard link of a symlink extracted at the root: top -> %q, leads out of the artifact", tgt)
	}
}
