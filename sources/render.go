package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

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
	root, target, err := resolvePath(dir, path)
	if err != nil {
		return nil, nil, nil, err
	}
	opts.Limits = opts.Limits.withDefaults()
	rel := relSlash(root, target)
	var objs []*unstructured.Unstructured
	var origins []string
	var ordered [][]byte
	info, err := os.Stat(target)
	switch {
	case err != nil:
		return nil, nil, nil, err
	case !info.IsDir():
		objs, origins, ordered, err = renderUnits(ctx, root, rel, []unit{{rel: rel}}, opts)
	case kustomizationIn(target) != "":
		objs, origins, ordered, err = renderUnits(ctx, root, rel, []unit{{rel: rel, kustomization: kustomizationIn(target)}}, opts)
	default:
		var units []unit
		units, err = walk(ctx, root, target, opts.Limits)
		if err == nil {
			objs, origins, ordered, err = renderUnits(ctx, root, rel, units, opts)
		}
	}
	if err != nil {
		return nil, nil, nil, err
	}
	if len(objs) == 0 {
		return nil, nil, nil, fmt.Errorf("%s: %w", rel, ErrEmptyRender)
	}
	return objs, origins, ordered, nil
}

// resolvePath returns the real source root and the real target, refusing a path that is
// absolute, climbs with "..", or resolves through a symlink to outside the root.
func resolvePath(dir, path string) (root, target string, err error) {
	root, err = filepath.Abs(dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return "", "", fmt.Errorf("source root %s: %w", dir, err)
	}
	clean := filepath.Clean(filepath.FromSlash(path))
	if filepath.IsAbs(clean) || !filepath.IsLocal(clean) {
		return "", "", &InputError{File: path, Err: ErrPathEscape}
	}
	target, err = filepath.EvalSymlinks(filepath.Join(root, clean))
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", &InputError{File: path, Err: ErrPathNotFound}
	}
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", path, err)
	}
	if !within(root, target) {
		return "", "", &InputError{File: path, Err: fmt.Errorf("%w: a symlink resolves to %s", ErrPathEscape, target)}
	}
	return root, target, nil
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

// kustomizationIn returns the name of the kustomization file in dir, or "".
func kustomizationIn(dir string) string {
	for _, name := range kustomizationFiles {
		if info, err := os.Stat(filepath.Join(dir, name)); err == nil && info.Mode().IsRegular() {
			return name
		}
	}
	return ""
}

// unit is one thing to render: a manifest file, or a folder built with kustomize.
type unit struct {
	// rel is the slash path of the file or folder relative to the source root.
	rel string
	// kustomization is the kustomization file name when rel is a kustomize folder.
	kustomization string
}

// walk lists the units of a plain folder in lexical order, at most limits.MaxFiles.
func walk(ctx context.Context, root, dir string, limits Limits) ([]unit, error) {
	var units []unit
	var errs []error
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(units) >= limits.MaxFiles {
			return tooManyFiles(relSlash(root, dir), limits.MaxFiles)
		}
		rel := relSlash(root, path)
		hidden := strings.HasPrefix(d.Name(), ".") && path != dir
		switch {
		case d.IsDir() && hidden:
			return filepath.SkipDir
		case d.IsDir() && path != dir:
			if k := kustomizationIn(path); k != "" {
				units = append(units, unit{rel: rel, kustomization: k})
				return filepath.SkipDir
			}
			return nil
		case d.IsDir() || hidden || !isManifest(d.Name()):
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			// Symlinked files are read when they stay inside the source; symlinked
			// folders are not followed.
			real, err := filepath.EvalSymlinks(path)
			if err != nil {
				errs = append(errs, &InputError{File: rel, Err: fmt.Errorf("broken symlink: %w", err)})
				return nil
			}
			if !within(root, real) {
				errs = append(errs, &InputError{File: rel, Err: fmt.Errorf("%w: a symlink resolves to %s", ErrPathEscape, real)})
				return nil
			}
			if info, err := os.Stat(real); err != nil || !info.Mode().IsRegular() {
				return nil
			}
		case !d.Type().IsRegular():
			return nil
		}
		units = append(units, unit{rel: rel})
		return nil
	})
	if IsTerminal(err) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", relSlash(root, dir), err)
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
func renderUnits(ctx context.Context, root, rel string, units []unit, opts RenderOptions) ([]*unstructured.Unstructured, []string, [][]byte, error) {
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("source root: %w", err)
	}
	defer func() { _ = r.Close() }()
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
