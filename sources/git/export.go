package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/converge-dev/converge/sources/diskcache"
)

// checkout exports the target commit (once) and returns it, removing old exports. The
// checkout is kept at least until readUntil (zero: no such promise).
func (c *cache) checkout(ctx context.Context, t target, readUntil time.Time, opts FetchOptions) (*Checkout, error) {
	root := filepath.Join(c.dir, "checkouts")
	dir := filepath.Join(root, t.hash.String())
	_, err := os.Stat(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	exists := err == nil
	// The commit is read only for a new export or a time not known: every Sync of one
	// repository checks out the same commit at each of its reconciles.
	when, known := c.fetcher.commits.time(dir)
	if !exists || !known {
		commit, err := c.commitObject(t.hash)
		if err != nil {
			return nil, err
		}
		if !exists {
			if err := c.exportNew(ctx, commit, root, dir, opts); err != nil {
				return nil, err
			}
		}
		when = commit.Committer.When
		c.fetcher.commits.remember(dir, when)
	}
	release, err := c.fetcher.readers.reserve(dir, readUntil)
	if err != nil {
		return nil, err
	}
	removed, err := prune(root, max(opts.KeepCheckouts, 1))
	if err != nil {
		release()
		return nil, fmt.Errorf("remove old checkouts: %w", err)
	}
	c.fetcher.shrunk(filepath.Base(c.dir), removed)
	return &Checkout{
		Dir:        dir,
		Revision:   t.revision(),
		Commit:     t.hash.String(),
		CommitTime: when,
		release:    release,
	}, nil
}

// exportNew writes commit out as dir, a checkout not on disk, under root.
func (c *cache) exportNew(ctx context.Context, commit *object.Commit, root, dir string, opts FetchOptions) error {
	c.wrote = true
	// Room for the new checkout first: the old ones past KeepCheckouts-1 that no reader
	// reserved go before it is written, not after.
	removed, err := prune(root, max(opts.KeepCheckouts, 1)-1)
	if err != nil {
		return fmt.Errorf("remove old checkouts: %w", err)
	}
	c.fetcher.shrunk(filepath.Base(c.dir), removed)
	if err := export(ctx, commit, root, dir, opts, c.claim); err != nil {
		return fmt.Errorf("export commit %s: %w", commit.Hash, err)
	}
	return nil
}

// commits remembers the committer time of each checkout directory exported or read
// (a directory name is its commit's hash), so that a checkout that exists is returned
// without reading its commit. It holds at most maxCommits directories; past that, an
// arbitrary one makes room.
type commits struct {
	mu   sync.Mutex
	when map[string]time.Time
}

const maxCommits = 1024

func (m *commits) time(dir string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.when[dir]
	return t, ok
}

func (m *commits) remember(dir string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.when == nil {
		m.when = map[string]time.Time{}
	}
	if _, ok := m.when[dir]; ok {
		m.when[dir] = t
		return
	}
	for d := range m.when { // one arbitrary entry makes room
		if len(m.when) < maxCommits {
			break
		}
		delete(m.when, d)
	}
	m.when[dir] = t
}

// readers counts, per checkout, the readers that fetched it and have not released it
// (Checkout.Release). Reservations are modification times (see reserve), which prune and
// the quota read; when the last reader releases, the reservation ends at once instead of at
// the readers' deadlines.
type readers struct {
	mu sync.Mutex
	n  map[string]int
}

// reserve reserves dir until readUntil for one more reader and returns its release.
func (r *readers) reserve(dir string, readUntil time.Time) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := reserve(dir, readUntil); err != nil {
		return nil, err
	}
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[dir]++
	var once sync.Once
	return func() { once.Do(func() { r.release(dir) }) }, nil
}

func (r *readers) release(dir string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n[dir]--; r.n[dir] > 0 {
		return
	}
	delete(r.n, dir)
	now := time.Now()
	_ = os.Chtimes(dir, now, now) // used now, reserved no longer
}

func (c *cache) commitObject(h plumbing.Hash) (*object.Commit, error) {
	for _, name := range []string{"shallow.git", "full.git"} {
		r, err := openRepository(filepath.Join(c.dir, name), nil)
		if err != nil {
			continue
		}
		commit, err := r.CommitObject(h)
		switch {
		case err == nil:
			return commit, nil
		case !errors.Is(err, plumbing.ErrObjectNotFound):
			return nil, fmt.Errorf("read commit %s: %w", h, err)
		case have(r, h): // go-git answers "not found" for an object of another type
			return nil, fmt.Errorf("%s: not a commit: %w", h, ErrRefNotFound)
		}
	}
	return nil, fmt.Errorf("commit %s: not in the cache after fetch", h)
}

// export writes the commit's files into a temporary directory and renames it to dir, so
// a checkout directory is either complete or absent. The commit comes from the remote and
// is not trusted: every write goes through an os.Root of the temporary directory, and the
// export limits of opts are checked before a file is written.
func export(ctx context.Context, commit *object.Commit, root, dir string, opts FetchOptions, claim func(int64) error) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix)
	if err != nil {
		return err
	}
	// RemoveAll removes symlinks, never what they point to.
	defer func() { _ = os.RemoveAll(tmp) }()
	tree, err := commit.Tree()
	if err != nil {
		return err
	}
	w, err := newWriter(tmp, opts)
	if err != nil {
		return err
	}
	w.claim = claim
	err = tree.Files().ForEach(func(f *object.File) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return w.write(f)
	})
	if err := errors.Join(err, w.root.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// writer writes the files of one commit under its root, counting them against the limits.
// Submodules (gitlinks) are not files: go-git's file iterator skips them, and they are
// left out of the checkout.
type writer struct {
	root  *os.Root
	opts  FetchOptions
	files int
	bytes int64
	// links holds the symlinks written so far. A well-formed tree never has an entry under
	// one of its own symlinks; a crafted tree (the same name twice, once as a symlink and
	// once as a folder) would have its later files written through the link.
	links map[string]bool
	// claim counts a file's blocks, and the folders it creates, against the cache quota
	// before it is written (nil: no quota).
	claim func(int64) error
	dirs  map[string]bool // the folders claimed so far
}

func newWriter(dir string, opts FetchOptions) (*writer, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &writer{root: root, opts: opts, links: map[string]bool{}, dirs: map[string]bool{}}, nil
}

// write writes one blob. Tree entry names come from the remote and are not trusted: a
// name that is not a local path (absolute, ".."), one under a .git folder, and one under a
// symlink of the same commit are refused. os.Root refuses any other way out.
func (w *writer) write(f *object.File) error {
	if !filepath.IsLocal(f.Name) || slices.Contains(strings.Split(f.Name, "/"), ".git") {
		return fmt.Errorf("%q: %w: not a path inside the repository", f.Name, ErrUnsafeTree)
	}
	for dir := path.Dir(f.Name); dir != "."; dir = path.Dir(dir) {
		if w.links[dir] {
			return fmt.Errorf("%q: %w: its folder %q is a symlink of the same commit", f.Name, ErrUnsafeTree, dir)
		}
	}
	if err := w.count(f); err != nil {
		return err
	}
	name := filepath.FromSlash(f.Name)
	if dir := filepath.Dir(name); dir != "." {
		if err := w.root.MkdirAll(dir, 0o755); err != nil {
			return entryErr(f.Name, err)
		}
	}
	if f.Mode == filemode.Symlink {
		// Symlinks are written as they are; the renderer refuses those that resolve
		// outside the checkout, and no later entry of this commit is written through one.
		target, err := f.Contents()
		if err != nil {
			return err
		}
		w.links[f.Name] = true
		if err := w.root.Symlink(target, name); err != nil {
			return entryErr(f.Name, err)
		}
		return nil
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
	// O_EXCL: a name written twice (a crafted tree) is an error, never an overwrite or a
	// write through a symlink of that name.
	out, err := w.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return entryErr(f.Name, err)
	}
	if _, err := io.Copy(out, io.LimitReader(r, f.Size)); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}

// entryErr wraps a failure to write the entry name. A name that exists already, or a
// folder that is a file, can only come from a crafted tree holding a name twice.
func entryErr(name string, err error) error {
	if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTDIR) {
		return fmt.Errorf("%q: %w: the tree holds this name twice: %w", name, ErrUnsafeTree, err)
	}
	return fmt.Errorf("%q: %w", name, err)
}

// count checks the file against the export limits before it is written.
func (w *writer) count(f *object.File) error {
	w.files++
	w.bytes += f.Size
	o := w.opts
	switch {
	case o.MaxFiles > 0 && w.files > o.MaxFiles:
		return fmt.Errorf("%w: more than %d files (at %q)", ErrTooLarge, o.MaxFiles, f.Name)
	case o.MaxFileSize > 0 && f.Size > o.MaxFileSize:
		return fmt.Errorf("%q: %w: %d bytes, over the limit of %d per file", f.Name, ErrTooLarge, f.Size, o.MaxFileSize)
	case o.MaxTotalSize > 0 && w.bytes > o.MaxTotalSize:
		return fmt.Errorf("%w: more than %d bytes of files (at %q)", ErrTooLarge, o.MaxTotalSize, f.Name)
	}
	if w.claim == nil {
		return nil
	}
	n := onDisk(f.Size)
	for dir := path.Dir(f.Name); dir != "." && !w.dirs[dir]; dir = path.Dir(dir) {
		w.dirs[dir] = true
		n += blockSize
	}
	return w.claim(n)
}

// reserve marks the checkout dir as used now and kept until readUntil. Its modification
// time holds the later of the two, never lowered: a fetch without a deadline must not
// shorten another caller's reservation.
func reserve(dir string, readUntil time.Time) error {
	info, err := os.Stat(dir)
	if err != nil {
		return err
	}
	t := time.Now()
	if readUntil.After(t) {
		t = readUntil
	}
	if mt := info.ModTime(); mt.After(t) {
		t = mt
	}
	return os.Chtimes(dir, t, t)
}

// tmpPrefix names the folders of the git cache that are not (or no longer) what their
// place says: a checkout being exported, a checkout, repository or entry being removed.
const tmpPrefix = ".tmp-"

// removeDir removes a checkout, a repository or a whole entry of the cache so that no
// fetch finds it partial under its name (diskcache.RemoveDir): a checkout killed part-way
// through its removal would otherwise be taken for whole by a later fetch of its commit
// (a rollback) and render a truncated tree.
func removeDir(path string) error { return diskcache.RemoveDir(path, tmpPrefix) }

// sweep removes what removals stopped part-way left in folder dir. It is best effort: a
// removal still running may race it for the same files.
func sweep(dir string) {
	left, _ := filepath.Glob(filepath.Join(dir, tmpPrefix+"rm-*"))
	for _, p := range left {
		_ = os.RemoveAll(p)
	}
}

// prune keeps the checkouts under root reserved for a reader (see reserve) and, besides
// those, the keep most recently used ones, and removes the rest. A render reads its
// checkout after the fetch released the cache's lock, so another Sync's fetch of the same
// URL and credentials may prune meanwhile.
func prune(root string, keep int) (int64, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var removed int64
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
		path := filepath.Join(root, e.Name())
		switch {
		case strings.HasPrefix(e.Name(), tmpPrefix+"rm-"):
			// Left by a removal stopped part-way; never in use. Best effort: a removal
			// still running may race this one for the same files. Not counted as removed:
			// a removal of this process counted it when it renamed it, and the entry's
			// next measure drops what an earlier process left.
			_ = os.RemoveAll(path)
			continue
		case strings.HasPrefix(e.Name(), tmpPrefix):
			// Left by an interrupted export; a running one is younger than an hour.
			if time.Since(info.ModTime()) > time.Hour {
				errs = append(errs, os.RemoveAll(path))
			}
			continue
		}
		dirs = append(dirs, aged{path, info.ModTime()})
	}
	slices.SortFunc(dirs, func(a, b aged) int { return b.used.Compare(a.used) })
	now := time.Now()
	for _, d := range dirs {
		switch {
		case d.used.After(now): // reserved for a reader; not counted
		case keep > 0:
			keep--
		default:
			size := dirSize(d.path)
			err := removeDir(d.path)
			if err == nil {
				removed += size
			}
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
