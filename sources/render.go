package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	pathpkg "path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// RenderOptions are per-call settings of Render.
type RenderOptions struct {
	// AllowRemoteBases lets kustomizations load remote bases and resources (git or HTTP).
	// They are refused by default: a render must depend on the fetched revision only. When
	// allowed, kustomize reads the disk directly instead of an in-memory copy of the source.
	AllowRemoteBases bool
	// Workers bounds how many files are decoded in parallel; 0 means GOMAXPROCS.
	Workers int
	// Isolate runs each kustomize build in a child process (the binary itself, which must
	// call ServeChild first in main): without remote bases it can make no network request
	// and start no program whatever field of a kustomization names a URL, it stops when
	// the context ends, and builds run in parallel. Without it builds run in this
	// process, one at a time, cannot be stopped once started, and only the fields that
	// refuseRemote knows are checked for URLs: for trusted content only.
	Isolate bool
	// Limits bound the files read and the objects rendered; zero fields mean defaults.
	Limits Limits
	// WholeKustomize builds every kustomization in one krusty run, never in chunks (see
	// chunked.go): the output is the same, only slower; for comparisons.
	WholeKustomize bool
	// Helm, when set, renders the path as a Helm chart folder (see HelmOptions), in a
	// render child whether or not Isolate is set.
	Helm *HelmOptions
	// Ignored holds slash paths, relative to the source root, that are not part of the
	// source (folders end with "/"): the files a checkout would not have, as the CLI's
	// git-ignored build outputs. A plain folder's walk and a local folder's revision
	// skip them, and a kustomization that references one is refused (ErrIgnored).
	Ignored []string
	// Overlay, when set, extends the kustomization of the rendered folder (or one generated
	// there) with inline build fields before it is built (see Overlay).
	Overlay *Overlay
}

// DefaultRenderOptions returns remote bases refused, in-process builds, one decoder per
// CPU and the default limits.
func DefaultRenderOptions() RenderOptions {
	return RenderOptions{Limits: DefaultLimits()}
}

// kustomizationFiles are the names kustomize recognizes, in its order of preference.
var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// Render renders path, a folder (or one file) inside the source root dir, into validated
// objects. A folder with a kustomization file is built with kustomize. Any other folder is
// decoded directly: its .yaml, .yml and .json files, recursively, in lexical order, skipping
// hidden files and folders; a sub-folder holding a kustomization is built with kustomize
// instead of being decoded. Errors caused by the content are *InputError values (see
// IsTerminal); several are joined. A render with no object returns ErrEmptyRender.
func Render(ctx context.Context, dir, path string, opts RenderOptions) ([]*unstructured.Unstructured, error) {
	objs, _, _, err := render(ctx, dir, path, opts)
	return objs, err
}

// render is Render that also returns where each object came from (Bundle.Origins).
func render(ctx context.Context, dir, path string, opts RenderOptions) ([]*unstructured.Unstructured, []string, [][]byte, error) {
	root, err := sourceRoot(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("source root %s: %w", dir, err)
	}
	defer func() { _ = r.Close() }()
	rel, info, err := resolvePath(r, path)
	if err != nil {
		return nil, nil, nil, err
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.Overlay, err = checkOverlay(r, rel, info, opts); err != nil {
		return nil, nil, nil, err
	}
	var units []unit
	switch {
	case opts.Helm != nil:
		units, err = chartUnit(r, rel, opts.Helm)
	case info.IsDir():
		var k string
		if k, err = kustomizationIn(r, rel); k != "" {
			units = []unit{{rel: rel, kustomization: k}}
		} else if err == nil {
			units, err = walk(ctx, r, rel, opts.Limits, newIgnoredSet(opts.Ignored))
			if err == nil && len(units) > 0 && opts.Overlay != nil {
				// As Flux: the fields need a kustomization, generated over what a plain
				// render reads.
				units = []unit{{rel: rel, kustomization: kustomizationFiles[0], generate: true}}
			}
		}
	default:
		units = []unit{{rel: rel}}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	objs, origins, ordered, err := renderUnits(ctx, r, rel, units, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(objs) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: %w", rel, ErrEmptyRender)
	}
	return objs, origins, ordered, nil
}

// sourceRoot returns the absolute path of the source root dir, its symlinks resolved.
func sourceRoot(dir string) (string, error) {
	root, err := filepath.Abs(dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return "", fmt.Errorf("source root %s: %w", dir, err)
	}
	return root, nil
}

// resolvePath returns the slash path, relative to the root r, of the file or folder that
// path names there, its symlinks resolved, and what it is. It refuses a path that is
// absolute, climbs with "..", or leads out of the root through a symlink: that is decided
// through r, before any look at where the symlink points, so whether its target exists
// is not observable, and the message names neither the target nor any path of this
// machine.
func resolvePath(r *os.Root, path string) (string, fs.FileInfo, error) {
	clean := filepath.Clean(filepath.FromSlash(path))
	if filepath.IsAbs(clean) || !filepath.IsLocal(clean) {
		return "", nil, &InputError{File: path, Err: ErrPathEscape}
	}
	info, err := r.Stat(clean)
	switch {
	case escapes(err):
		return "", nil, symlinkEscape(path)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return "", nil, &InputError{File: path, Err: ErrPathNotFound}
	case err != nil:
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	// Every symlink on the way stays inside the root (r.Stat followed them): resolving
	// them on the disk cannot lead out, and names the object's origins by real paths.
	target, err := filepath.EvalSymlinks(filepath.Join(r.Name(), clean))
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	if !within(r.Name(), target) {
		return "", nil, symlinkEscape(path) // swapped since r.Stat
	}
	return relSlash(r.Name(), target), info, nil
}

// within reports whether path is root or below it; both must be clean and absolute.
func within(root, path string) bool {
	rel, err := filepath.Rel(root, path)
	return err == nil && filepath.IsLocal(rel)
}

// relSlash returns path relative to root with forward slashes, for messages.
func relSlash(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(rel)
}

// kustomizationIn returns the name of the kustomization file in the folder dir (a slash
// path in r), or "". It looks through r: a kustomization file that is a symlink out of the
// source is refused, whether or not its target exists.
func kustomizationIn(r *os.Root, dir string) (string, error) {
	for _, name := range kustomizationFiles {
		p := pathpkg.Join(dir, name)
		info, err := r.Stat(p)
		if escapes(err) {
			return "", symlinkEscape(p)
		}
		if err == nil && info.Mode().IsRegular() {
			return name, nil
		}
	}
	return "", nil
}

// unit is one thing to render: a manifest file, or a folder built with kustomize.
type unit struct {
	// rel is the slash path of the file or folder relative to the source root.
	rel string
	// kustomization is the kustomization file name when rel is a kustomize folder.
	kustomization string
	// chart is set when rel is a Helm chart folder, rendered with these options.
	chart *HelmOptions
	// generate: rel has no kustomization; the one built is generated (Overlay), named
	// kustomization.
	generate bool
}

// walk lists the units of the plain folder dir (a slash path in r) in lexical order, at
// most limits.MaxFiles, skipping what ign holds. It reads through r: symlinked folders are
// not followed, symlinked files are read when they stay inside the source.
func walk(ctx context.Context, r *os.Root, dir string, limits Limits, ign ignoredSet) ([]unit, error) {
	var units []unit
	var errs []error
	err := fs.WalkDir(r.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(units) >= limits.MaxFiles {
			return tooManyFiles(dir, limits.MaxFiles)
		}
		hidden := strings.HasPrefix(d.Name(), ".") && p != dir || p != dir && ign.has(p)
		switch {
		case d.IsDir() && hidden:
			return fs.SkipDir
		case d.IsDir() && p != dir:
			k, err := kustomizationIn(r, p)
			if err != nil {
				errs = append(errs, err)
				return fs.SkipDir
			}
			if k != "" {
				units = append(units, unit{rel: p, kustomization: k})
				return fs.SkipDir
			}
			return nil
		case d.IsDir() || hidden || !isManifest(d.Name()):
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			info, err := r.Stat(p)
			switch {
			case escapes(err):
				errs = append(errs, symlinkEscape(p))
				return nil
			case err != nil:
				errs = append(errs, &InputError{File: p, Err: errors.New("broken symlink")})
				return nil
			case !info.Mode().IsRegular():
				return nil
			}
		case !d.Type().IsRegular():
			return nil
		}
		units = append(units, unit{rel: p})
		return nil
	})
	if IsTerminal(err) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return units, joinErrors(errs)
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// renderUnits renders units in parallel, keeping their order, then validates the whole
// set (duplicates span files) of the rendered path rel. The units share one budget: the
// first to pass a limit stops the others.
func renderUnits(ctx context.Context, r *os.Root, rel string, units []unit, opts RenderOptions) ([]*unstructured.Unstructured, []string, [][]byte, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	b := newBudget(rel, opts.Limits)
	defer b.release()
	results := make([][]decoded, len(units))
	errs := make([]error, len(units))
	next := make(chan int)
	done := make(chan struct{})
	for range min(workers, len(units)) {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				results[i], errs[i] = renderUnit(ctx, r, units[i], opts, b)
			}
		}()
	}
feed:
	for i := range units {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	for range min(workers, len(units)) {
		<-done
	}
	if err := b.failed(); err != nil {
		return nil, nil, nil, err // the other units' errors are mostly this one again
	}
	if err := joinErrors(nonNil(errs)); err != nil {
		return nil, nil, nil, err // when ctx ended, the error of the unit it stopped names the file
	}
	if ctx.Err() != nil {
		return nil, nil, nil, context.Cause(ctx)
	}
	return validateSet(results)
}

func renderUnit(ctx context.Context, root *os.Root, u unit, opts RenderOptions, b *budget) ([]decoded, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := b.failed(); err != nil {
		return nil, err
	}
	if u.chart != nil {
		return buildChart(ctx, root.Name(), u, opts, b)
	}
	if u.kustomization != "" {
		return build(ctx, root.Name(), u, opts, b)
	}
	return decodeFile(root, u.rel, b)
}

func nonNil(errs []error) []error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
