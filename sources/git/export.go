package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// checkout exports the target commit (once) and returns it, removing old exports.
func (c *cache) checkout(ctx context.Context, t target, keep int) (*Checkout, error) {
	commit, err := c.commitObject(t.hash)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(c.dir, "checkouts")
	dir := filepath.Join(root, t.hash.String())
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := export(ctx, commit, root, dir); err != nil {
			return nil, fmt.Errorf("export commit %s: %w", t.hash, err)
		}
	} else if err != nil {
		return nil, err
	}
	now := time.Now()
	if err := os.Chtimes(dir, now, now); err != nil {
		return nil, err
	}
	if err := prune(root, keep); err != nil {
		return nil, fmt.Errorf("remove old checkouts: %w", err)
	}
	return &Checkout{
		Dir:        dir,
		Revision:   t.revision(),
		Commit:     t.hash.String(),
		CommitTime: commit.Committer.When,
	}, nil
}

func (c *cache) commitObject(h plumbing.Hash) (*object.Commit, error) {
	for _, name := range []string{"shallow.git", "full.git"} {
		r, err := gogit.PlainOpen(filepath.Join(c.dir, name))
		if err != nil {
			continue
		}
		if commit, err := r.CommitObject(h); err == nil {
			return commit, nil
		}
	}
	return nil, fmt.Errorf("commit %s: not in the cache after fetch", h)
}

// export writes the commit's files into a temporary directory and renames it to dir, so
// a checkout directory is either complete or absent.
func export(ctx context.Context, commit *object.Commit, root, dir string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(root, ".tmp-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	tree, err := commit.Tree()
	if err != nil {
		return err
	}
	err = tree.Files().ForEach(func(f *object.File) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return writeFile(tmp, f)
	})
	if err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeFile writes one blob. Tree entry names come from the remote and are not trusted:
// a name that is not a local path (absolute, "..") is refused.
func writeFile(root string, f *object.File) error {
	if !filepath.IsLocal(f.Name) || slices.Contains(strings.Split(f.Name, "/"), ".git") {
		return fmt.Errorf("refusing tree entry %q", f.Name)
	}
	path := filepath.Join(root, filepath.FromSlash(f.Name))
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if f.Mode == filemode.Symlink {
		// Symlinks are written as they are; the renderer refuses those that escape.
		target, err := f.Contents()
		if err != nil {
			return err
		}
		return os.Symlink(target, path)
	}
	perm := os.FileMode(0o644)
	if f.Mode == filemode.Executable {
		perm = 0o755
	}
	r, err := f.Reader()
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// prune keeps the keep most recently used checkouts under root and removes the rest.
func prune(root string, keep int) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	type aged struct {
		path string
		used time.Time
	}
	var dirs []aged
	var errs []error
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			// Left by an interrupted export; a running one is younger than an hour.
			if time.Since(info.ModTime()) > time.Hour {
				errs = append(errs, os.RemoveAll(filepath.Join(root, e.Name())))
			}
			continue
		}
		dirs = append(dirs, aged{filepath.Join(root, e.Name()), info.ModTime()})
	}
	slices.SortFunc(dirs, func(a, b aged) int { return b.used.Compare(a.used) })
	for _, d := range dirs[min(keep, len(dirs)):] {
		errs = append(errs, os.RemoveAll(d.path))
	}
	return errors.Join(errs...)
}
