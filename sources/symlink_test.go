package sources

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// symlinkCase is a source and the path of it to render.
type symlinkCase struct {
	name, path string
	files      map[string]string
}

// symlinkCases are sources with one symlink to target, outside the source, reached by each
// way a render reads: the rendered path itself, a file of a plain folder, the kustomization
// file of a folder, and a file a kustomization references.
func symlinkCases(target string) []symlinkCase {
	return []symlinkCase{
		{"rendered path", "link", map[string]string{"a.yaml": cm("a", "x"), "link": "symlink:" + target}},
		{"plain folder file", "apps", map[string]string{"apps/a.yaml": cm("a", "x"), "apps/link.yaml": "symlink:" + target}},
		{"kustomization file", "k", map[string]string{"k/a.yaml": cm("a", "x"), "k/kustomization.yaml": "symlink:" + target}},
		{"kustomization reference", "k", map[string]string{"k/kustomization.yaml": "resources: [link.yaml]\n", "k/link.yaml": "symlink:" + target}},
		{"folder reference", "k", map[string]string{"k/kustomization.yaml": "resources: [link]\n", "k/link": "symlink:" + target}},
	}
}

// TestSymlinkOutsideNamesNoTarget: a symlink out of the source is refused as a symlink that
// "points outside the source", naming the link and never what it points to: not the
// target, not a path of this machine (/proc/self/cwd resolves to the process's folder,
// /proc/self/fd/N to whatever file it has open, another tenant's checkout among them).
func TestSymlinkOutsideNamesNoTarget(t *testing.T) {
	outside := writeTree(t, map[string]string{"secret.yaml": cm("stolen", "x"), "kustomization.yaml": "resources: [secret.yaml]\n"})
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"/etc/passwd", outside, filepath.Join(outside, "secret.yaml"), "/proc/self/cwd", "/proc/self/fd/0"} {
		for _, tc := range symlinkCases(target) {
			for _, isolate := range []bool{false, true} {
				dir := writeTree(t, tc.files)
				opts := DefaultRenderOptions()
				opts.Isolate = isolate
				_, err := Render(t.Context(), dir, tc.path, opts)
				if err == nil {
					t.Errorf("%s to %s (isolate=%t): rendered, want an error", tc.name, target, isolate)
					continue
				}
				msg := err.Error()
				if !strings.Contains(msg, "points outside the source") || !errors.Is(err, ErrPathEscape) || !IsTerminal(err) {
					t.Errorf("%s to %s (isolate=%t): error %q; want a terminal ErrPathEscape saying it points outside the source", tc.name, target, isolate, msg)
				}
				for _, leak := range []string{target, "/proc/", outside, cwd, "stolen", "root:"} {
					if strings.Contains(msg, leak) {
						t.Errorf("%s to %s (isolate=%t): error %q shows %q", tc.name, target, isolate, msg, leak)
					}
				}
			}
		}
	}
}

// TestSymlinkOutsideIsNoExistenceOracle: whether what a symlink out of the source points
// to exists is not observable: a render gives the same result and the same message.
func TestSymlinkOutsideIsNoExistenceOracle(t *testing.T) {
	outside := writeTree(t, map[string]string{"present/kustomization.yaml": "resources: [a.yaml]\n", "present/a.yaml": cm("a", "x"), "present.yaml": cm("p", "x")})
	pairs := [][2]string{
		{filepath.Join(outside, "present.yaml"), filepath.Join(outside, "absent.yaml")},
		{filepath.Join(outside, "present"), filepath.Join(outside, "absent")},
		{filepath.Join(outside, "present", "kustomization.yaml"), filepath.Join(outside, "absent", "kustomization.yaml")},
		{"/etc/passwd", "/etc/no-such-file"},
	}
	for _, pair := range pairs {
		existing, missing := symlinkCases(pair[0]), symlinkCases(pair[1])
		for i := range existing {
			var msgs [2]string
			for j, tc := range []symlinkCase{existing[i], missing[i]} {
				objs, err := Render(t.Context(), writeTree(t, tc.files), tc.path, DefaultRenderOptions())
				msgs[j] = "<nil>"
				if err != nil {
					msgs[j] = err.Error()
				}
				if len(objs) != 0 {
					t.Errorf("%s to %s: rendered %d objects", tc.name, pair[j], len(objs))
				}
			}
			if msgs[0] != msgs[1] {
				t.Errorf("%s: a link to %s and one to %s differ:\n%s\n%s", existing[i].name, pair[0], pair[1], msgs[0], msgs[1])
			}
		}
	}
}
