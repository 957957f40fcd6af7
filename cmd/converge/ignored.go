package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/converge-dev/converge/sources"
)

// gitIgnored lists what git ignores under the folder root, as slash paths relative to it
// (folders end with "/"): the build outputs and local files that a checkout of the
// repository would not have, and that a render therefore never reads. Outside a git work
// tree, or without a git binary, nothing is ignored. An ignored folder that holds path (the
// slash path rendered, relative to root), or path itself, is not left out: the user named it.
// core.fsmonitor is off: listing files runs no program that a repository's config names.
func gitIgnored(ctx context.Context, root, path string) []string {
	cmd := exec.CommandContext(ctx, "git", "-C", root, "-c", "core.fsmonitor=false", "ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory")
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	var paths []string
	for p := range bytes.SplitSeq(out, []byte{0}) {
		if len(p) > 0 && !holds(string(p), path) {
			paths = append(paths, string(p))
		}
	}
	return paths
}

// holds reports whether the ignored slash path entry (a folder when it ends with "/") is
// path or a folder above it.
func holds(entry, path string) bool {
	return strings.TrimSuffix(entry, "/") == path || strings.HasSuffix(entry, "/") && strings.HasPrefix(path, entry)
}

// rootHint adds to a render error of the local source src that a path left the source root
// which root that was and how to widen it: outside a git work tree the root is PATH itself,
// and an overlay's "../base" leaves it.
func rootHint(err error, src sources.Source) error {
	if err == nil || src.Git.URL != "" || src.OCI.URL != "" || !errors.Is(err, sources.ErrPathEscape) {
		return err
	}
	return fmt.Errorf("%w (the source root is %s; widen it with --root)", err, filepath.Clean(src.Dir))
}
