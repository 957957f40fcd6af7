package git

import (
	"fmt"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing/transport"
)

// checkURL applies the URL policy of a fetch: remote protocols always; local paths and
// file:// URLs only with allowLocal; never a path into cacheDir, which holds the
// repositories other credentials fetched (reading it would bypass their per-credential
// cache).
func checkURL(rawURL, cacheDir string, allowLocal bool) error {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return fmt.Errorf("parse url %s: %w", redact(rawURL), err)
	}
	if ep.Protocol != "file" {
		return nil
	}
	if !allowLocal {
		return fmt.Errorf("url %s: %w: file:// URLs and local paths are for the CLI and tests (the daemon allows them with --allow-local-git)", redact(rawURL), ErrLocalURL)
	}
	if within(resolve(ep.Path), resolve(cacheDir)) {
		return fmt.Errorf("url %s: %w: it points into the git cache", redact(rawURL), ErrLocalURL)
	}
	return nil
}

// resolve returns the absolute path p names, its symlinks resolved as far as they exist.
func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return filepath.Clean(p)
	}
	// Resolve the longest existing prefix, so a path that does not exist yet (a cache
	// directory before its first fetch) still compares equal to its real location.
	rest := ""
	for dir := abs; ; dir = filepath.Dir(dir) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		if filepath.Dir(dir) == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}
