package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/helmrepo"
	"github.com/converge-dev/converge/sources/oci"
	"github.com/converge-dev/converge/sources/signature"
)

// Source names what Load renders: a git repository, an OCI artifact or a local folder, and
// a path in it.
type Source struct {
	// Git is fetched when its URL is set; then OCI when its URL is set; Dir is used otherwise.
	Git git.Repository
	// OCI is an artifact in an OCI registry (a chart in one: OCIChart).
	OCI oci.Artifact
	// Chart is a chart of an HTTP Helm repository, fetched when its Repository is set; Path
	// is then ChartPath.
	Chart helmrepo.Chart
	// Dir is the root of a local source. Nothing outside it is read.
	Dir string
	// Path is the folder (or file) to render, relative to the source root.
	Path string
	// Helm, when set, renders Path as a Helm chart folder (RenderOptions.Helm).
	Helm *HelmOptions
	// Overlay, when set, extends the kustomize build of Path (RenderOptions.Overlay).
	Overlay *Overlay
}

// String describes the source for messages, without credentials.
func (s Source) String() string {
	if s.Git.URL != "" {
		return fmt.Sprintf("%s (%s) path %q", s.Git.URL, s.Git.Ref, s.Path)
	}
	if s.OCI.URL != "" {
		return fmt.Sprintf("%s path %q", s.OCI, s.Path)
	}
	if s.Chart.Repository != "" {
		return s.Chart.String()
	}
	return fmt.Sprintf("%s path %q", s.Dir, s.Path)
}

// LoadOptions are per-call settings of Load.
type LoadOptions struct {
	Fetch git.FetchOptions
	// OCI are the settings of an OCI fetch; its extraction limits are raised to the render's
	// as the git export's are (exportLimits).
	OCI oci.FetchOptions
	// Charts are the settings of a fetch from an HTTP Helm repository.
	Charts helmrepo.FetchOptions
	Render RenderOptions
	// Owner names the caller's use of the render (a daemon's Sync), so that the render cache
	// keeps one render per owner: the render an owner loaded before is dropped when it loads
	// another one and no other owner still uses it. Empty: the render ages out of the
	// cache only.
	Owner string
	// Tenant names who the render slots are shared between (a daemon's Sync's namespace):
	// a freed slot goes to the tenant that holds the fewest. Empty: one tenant.
	Tenant string
	// Unneeded, when set, is asked with the Key of a render the cache holds before its
	// objects are decoded; when it answers true, Load returns the Bundle without them
	// (Bundle.Unloaded): the caller already has what it would do with them. A render made
	// by this Load, or kept with an error, is returned whole.
	Unneeded func(key string) bool
	// Encoded asks for the objects as JSON (Bundle.Docs), for a caller that decodes each
	// when it needs it; decoded in Bundle.Objects otherwise.
	Encoded bool
}

// DefaultLoadOptions returns the default fetch and render options.
func DefaultLoadOptions() LoadOptions {
	return LoadOptions{Fetch: git.DefaultFetchOptions(), OCI: oci.DefaultFetchOptions(), Charts: helmrepo.DefaultFetchOptions(),
		Render: DefaultRenderOptions()}
}

// Loader fetches and renders sources, rendering each (content, path, options) once. It is
// safe for concurrent use.
type Loader struct {
	fetcher *git.Fetcher
	oci     *oci.Fetcher
	charts  *helmrepo.Fetcher
	cache   *renderCache
}

// renderCacheSize is how many renders a Loader remembers: one per Sync is typical, so it
// must exceed the Syncs of a daemon (at 256, a daemon of 1,000 Syncs rendered again on
// nearly every reconcile). The bound in bytes (--render-cache-size) is the one that holds
// in practice when renders are large (4,096 renders of 100 objects are about 100 MB of
// JSON before compression).
const renderCacheSize = 4096

// NewLoader returns a Loader that keeps git repositories and checkouts under cacheDir,
// extracted OCI artifacts and fetched charts beside it (OCICacheDir, ChartCacheDir), and
// at most DefaultRenderCacheBytes of renders.
func NewLoader(cacheDir string) *Loader {
	return NewLoaderSized(cacheDir, DefaultRenderCacheBytes)
}

// NewLoaderSized is NewLoader keeping at most cacheBytes of renders (their objects' JSON;
// 0: DefaultRenderCacheBytes; negative: none, for a command that loads once).
func NewLoaderSized(cacheDir string, cacheBytes int64) *Loader {
	if cacheBytes == 0 {
		cacheBytes = DefaultRenderCacheBytes
	}
	return &Loader{fetcher: git.NewFetcher(cacheDir), oci: oci.NewFetcher(OCICacheDir(cacheDir)),
		charts: helmrepo.NewFetcher(ChartCacheDir(cacheDir)), cache: newRenderCache(renderCacheSize, cacheBytes)}
}

// OCICacheDir is where a Loader made with the git cache cacheDir keeps OCI artifacts: beside
// it, not in it, since the git cache's quota counts and removes every folder of its own.
func OCICacheDir(cacheDir string) string {
	return filepath.Clean(cacheDir) + "-oci"
}

// ChartCacheDir is where a Loader made with the git cache cacheDir keeps charts fetched
// from HTTP Helm repositories: beside it, as OCICacheDir.
func ChartCacheDir(cacheDir string) string {
	return filepath.Clean(cacheDir) + "-charts"
}

// Load fetches the source (git or OCI) and renders its path.
//
// The revision is the git revision ("main@sha1:<hex>"), the OCI one ("v1.2.3@sha256:<hex>"
// of the manifest, "sha256:<hex>" for a digest reference), a chart's ("6.5.4@sha256:<hex>"
// of the packaged chart) or, for a local folder,
// "sha256:<hex>" over the names and contents of the files under Dir (hidden folders such
// as .git and opts.Render.Ignored left out), so uncommitted edits change it.
//
// A fetch error returns a nil Bundle; it is transient (see IsTerminal). A render error,
// ErrEmptyRender included, returns a Bundle with the revision and no objects, so callers
// can report which revision failed.
func (l *Loader) Load(ctx context.Context, src Source, opts LoadOptions) (*Bundle, error) {
	ctx = withTenant(ctx, opts.Tenant)
	root, revision, digest := src.Dir, "", ""
	var commitTime time.Time
	var sigs []signature.Signature
	switch {
	case src.Git.URL != "":
		co, err := l.fetcher.Fetch(ctx, src.Git, exportLimits(opts))
		if err != nil {
			return nil, err
		}
		defer co.Release() // read by the render below, not after
		root, revision, digest, commitTime, sigs = co.Dir, co.Revision, "sha1:"+co.Commit, co.CommitTime, co.Signatures
	case src.OCI.URL != "":
		a, err := l.oci.Fetch(ctx, src.OCI, ociLimits(opts))
		if err != nil {
			return nil, err
		}
		// The folder names the manifest digest and the layer selection: the content.
		root, revision, digest = a.Dir, a.Revision, "oci:"+filepath.Base(a.Dir)
		if a.Signature != nil {
			sigs = []signature.Signature{*a.Signature}
		}
	case src.Chart.Repository != "":
		var err error
		if root, revision, digest, err = l.fetchChart(ctx, src, opts); err != nil {
			return nil, err
		}
		src.Path = ChartPath
	default:
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
	if src.Helm != nil {
		opts.Render.Helm = src.Helm
	}
	if src.Overlay != nil {
		opts.Render.Overlay = src.Overlay
	}
	// The render cache is read only after the fetch succeeded with the caller's own
	// credentials: a commit the caller could not fetch never reaches it.
	key := cacheKey(digest, src.Path, opts.Render)
	// Before rendering: the owner's previous render, if nobody else uses it, is dropped
	// now rather than held next to the new one while it is built.
	l.cache.own(opts.Owner, key)
	e, ok := l.cache.get(key)
	if ok && e.err == nil && opts.Unneeded != nil && opts.Unneeded(renderKey(key)) {
		return &Bundle{Revision: revision, Key: renderKey(key), Unloaded: true, Origins: e.origins, Ordered: e.ordered,
			CommitTime: commitTime, Signatures: sigs}, nil
	}
	b := &Bundle{Revision: revision, Key: renderKey(key), Origins: e.origins, Ordered: e.ordered, CommitTime: commitTime, Signatures: sigs}
	var objs []*unstructured.Unstructured
	if ok && opts.Encoded {
		var err error
		if b.Docs, err = e.documents(); err == nil { // JSON it wrote: cannot fail; if it did, render again
			return b, e.err
		}
		ok = false
	}
	if ok {
		var err error
		if objs, err = e.objects(); err != nil { // JSON it encoded: cannot fail; if it did, render again
			ok = false
		}
	}
	if !ok {
		e = cacheEntry{}
		objs, e.origins, e.ordered, e.err = render(ctx, root, src.Path, opts.Render)
		if e.err == nil || IsTerminal(e.err) {
			// A kept render is loaded from its JSON now too, so that every load of it gives
			// the same objects: JSON's 3.0 decodes as a float and is written back as 3,
			// which decodes as an integer, and the engine's memo tells the two apart.
			// Each object is replaced by its copy one at a time: the render is never in
			// memory twice (at 10,000 objects, 25 MB of decoded maps).
			kept, ok := l.cache.put(key, objs, e)
			switch {
			case opts.Encoded && ok:
				b.Docs, ok = nil, false
				if docs, err := kept.documents(); err == nil {
					b.Docs, ok = docs, true
				}
			case ok:
				kept.reload(objs)
			}
			if opts.Encoded && !ok { // not kept (larger than the cache): written as the cache would
				docs, err := encodeObjects(objs)
				if err != nil {
					return nil, err
				}
				b.Docs = docs
			}
		}
		b.Origins, b.Ordered = e.origins, e.ordered
	}
	if opts.Encoded && b.Docs != nil {
		return b, e.err
	}
	b.Objects = objs
	b.Own = slices.Repeat([]bool{true}, len(objs)) // each load decodes its own objects
	return b, e.err
}

// exportLimits returns opts.Fetch with its export limits raised to the render's where
// these are higher (a zero, no limit, stays): the render limits are what the flags set, and
// an operator who raises --max-files or --max-total-size expects a repository of that size
// to load, not to be refused by the export's defaults. The fetch's owner is the load's,
// so that Forget also drops the git cache entry only that owner used. Indexing a received
// pack takes one of the render slots.
func exportLimits(opts LoadOptions) git.FetchOptions {
	f, l := opts.Fetch, opts.Render.Limits.withDefaults()
	if f.Owner == "" {
		f.Owner = opts.Owner
	}
	if f.Tenant == "" {
		f.Tenant = opts.Tenant
	}
	if f.IndexSlot == nil {
		// A pack's index may take as much memory as a render child: it takes a render slot.
		slots, tenant := renderSlots(l.RenderSlots), opts.Tenant
		f.IndexSlot = func(ctx context.Context) (func(), error) { return slots.acquire(ctx, tenant) }
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

// ociLimits returns opts.OCI with its extraction limits raised to the render's, as
// exportLimits does for git.
func ociLimits(opts LoadOptions) oci.FetchOptions {
	f, l := opts.OCI, opts.Render.Limits.withDefaults()
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
