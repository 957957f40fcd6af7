package sources

import (
	"errors"
	"strings"
)

// ErrIgnored marks a kustomization reference to a path that RenderOptions.Ignored leaves
// out of the source.
var ErrIgnored = errors.New("git-ignored, not part of the source")

// ignoredSet is RenderOptions.Ignored as a set; nil ignores nothing.
type ignoredSet map[string]bool

func newIgnoredSet(paths []string) ignoredSet {
	if len(paths) == 0 {
		return nil
	}
	s := make(ignoredSet, len(paths))
	for _, p := range paths {
		s[p] = true
	}
	return s
}

// has reports whether the slash path p, relative to the source root, is ignored: named in
// the set, or below a folder of the set (named with a trailing "/").
func (s ignoredSet) has(p string) bool {
	if len(s) == 0 || p == "" || p == "." {
		return false
	}
	if s[p] || s[p+"/"] {
		return true
	}
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if s[p[:i+1]] {
			return true
		}
	}
	return false
}
