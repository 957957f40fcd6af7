package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/converge-dev/converge/sources/git"
)

// Source names what Load renders: a git repository or a local folder, and a path in it.
type Source struct {
	// Git is fetched when its URL is set; Dir is used otherwise.
	Git git.Repository
	// Dir is the root of a local source. Nothing outside it is read.
	Dir string
	// Path is the folder (or file) to render, relative to the source root.
	Path string
}

// String describes the source for messages, without credentials.
func (s Source) String() string {
	if s.Git.URL != "" {
		return fmt.Sprintf("%s (%s) path %q", s.Git.URL, s.Git.Ref, s.Path)
	}
	return fmt.Sprintf("%s path %q", s.Dir, s.Path)
}

// LoadOptions are per-call settings of Load.
type LoadOptions struct {
	Fetch  git.FetchOptions
	Render RenderOptions
	// Owner names the caller's use of the render (a daemon's Sync), so that the render cache
	// keeps one render per owner: the render an owner loaded before is dropped when it loads
	// another one and no other owner still uses it. Empty: the render ages out of the
	// cache only.
	Owner string
}

// DefaultLoadOptions returns the default fetch and render options.
func DefaultLoadOptions() LoadOptions {
	return LoadOptions{Fetch: git.DefaultFetchOptions(), Render: DefaultRenderOptions()}
}

// Loader fetches and renders sources, rendering each (content, path, options) once. It is
// safe for concurrent use.
type Loader struct {
	fetcher *git.Fetcher
	cache   *renderCache
}

// renderCacheSize is how many renders a Loader remembers: one per Sync is typical, so it
// must exceed the Syncs of a daemon (at 64, 100 Syncs re-rendered on every reconcile).
const renderCacheSize = 256

// NewLoader returns a Loader that keeps git repositories and checkouts under cacheDir, and
// at most DefaultRenderCacheBytes of renders.
func NewLoader(cacheDir string) *Loader {
	return NewLoaderSized(cacheDir, DefaultRenderCacheBytes)
}

// NewLoaderSized is NewLoader keeping at most cacheBytes of renders (by an estimate of
// their objects' heap; 0: DefaultRenderCacheBytes).
func NewLoaderSized(cacheDir string, cacheBytes int64) *Loader {
	if cacheBytes <= 0 {
		cacheBytes = DefaultRenderCacheBytes
	}
	return &Loader{fetcher: git.NewFetcher(cacheDir), cache: newRenderCache(renderCacheSize, cacheBytes)}
}

// Load fetches the source (for git) and renders its path.
//
// The revision is the git revision ("main@sha1:<hex>") or, for a local folder,
// "sha256:<hex>" over the names and contents of the files under Dir (hidden folders such
// as .git and opts.Render.Ignored left out), so uncommitted edits change it.
//
// A fetch error returns a nil Bundle; it is transient (see IsTerminal). A render error,
// ErrEmptyRender included, returns a Bundle with the revision and no objects, so callers
// can report which revision failed.
func (l *Loader) Load(ctx context.Context, src Source, opts LoadOptions) (*Bundle, error) {
	root, revision, digest := src.Dir, "", ""
	var commitTime time.Time
	var sigs []git.Signature
	if src.Git.URL != "" {
		co, err := l.fetcher.Fetch(ctx, src.Git, exportLimits(opts))
		if err != nil {
			return nil, err
		}
		root, revision, digest, commitTime, sigs = co.Dir, co.Revision, "sha1:"+co.Commit, co.CommitTime, co.Signatures
	} else {
		abs, err := filepath.Abs(src.Dir)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			return nil, &InputError{File: src.Dir, Err: ErrPathNotFound}
		}
		d, err := digestDir(ctx, abs, newIgnoredSet(opts.Render.Ignored))
		if err != nil {
			return nil, err
		}
		root, revision, digest = abs, "sha256:"+d, "sha256:"+d
	}
	// The render cache is read only after the fetch succeeded with the caller's own
	// credentials: a commit the caller could not fetch never reaches it.
	key := cacheKey(digest, src.Path, opts.Render)
	// Before rendering: the owner's previous render, if nobody else uses it, is dropped
	// now rather than held next to the new one while it is built.
	l.cache.own(opts.Owner, key)
	e, ok := l.cache.get(key)
	if !ok {
		e.objs, e.origins, e.ordered, e.err = render(ctx, root, src.Path, opts.Render)
		if e.err == nil || IsTerminal(e.err) {
			l.cache.put(key, e)
		}
	}
	return &Bundle{Revision: revision, Objects: e.objs, Origins: e.origins, Ordered: e.ordered, CommitTime: commitTime, Signatures: sigs}, e.err
}

// exportLimits returns opts.Fetch with its export limits raised to the render's where
// these are higher (a zero, no limit, stays): the render limits are what the flags set, and
// an operator who raises --max-files or --max-total-size expects a repository of that size
// to load, not to be refused by the export's defaults. The fetch's owner is the load's,
// so that Forget also drops the git cache entry only that owner used.
func exportLimits(opts LoadOptions) git.FetchOptions {
	f, l := opts.Fetch, opts.Render.Limits.withDefaults()
	if f.Owner == "" {
		f.Owner = opts.Owner
	}
	if f.MaxFiles > 0 {
		f.MaxFiles = max(f.MaxFiles, l.MaxFiles)
	}
	if f.MaxFileSize > 0 {
		f.MaxFileSize = max(f.MaxFileSize, l.MaxFileSize)
	}
	if f.MaxTotalSize > 0 {
		f.MaxTotalSize = max(f.MaxTotalSize, l.MaxTotalSize)
	}
	return f
}

// Forget drops owner's hold on the render it loaded last (LoadOptions.Owner): the render is
// dropped unless another owner's last load is that render, and so is the git cache entry of
// its last fetch (git.Fetcher.Forget). For a Sync that is gone.
func (l *Loader) Forget(owner string) {
	l.cache.forget(owner)
	l.fetcher.Forget(owner)
}

// FetchStats returns the git fetcher's counters.
func (l *Loader) FetchStats() git.Stats {
	return l.fetcher.Stats()
}
