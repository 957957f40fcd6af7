package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// kustomizeLock serializes kustomize builds: kyaml keeps global state (the OpenAPI schema)
// and is not safe for concurrent use. A channel, unlike a mutex, lets a waiter give up.
var kustomizeLock = make(chan struct{}, 1)

// build runs kustomize on the folder u.rel. Without remote bases it first refuses any
// remote reference, then builds from an in-memory copy of the source root, so no
// kustomization can read outside the source.
func build(ctx context.Context, root string, u unit, opts RenderOptions) (objs []decoded, err error) {
	file := path.Join(u.rel, u.kustomization)
	fail := func(err error) error { return &InputError{File: file, Err: err} }
	fsys, dir := filesys.MakeFsOnDisk(), filepath.Join(root, filepath.FromSlash(u.rel))
	if !opts.AllowRemoteBases {
		if err := refuseRemote(root, u.rel, map[string]bool{}); err != nil {
			return nil, err
		}
		if fsys, err = memoryCopy(ctx, root); err != nil {
			return nil, fmt.Errorf("%s: copy source: %w", file, err)
		}
		dir = path.Join("/", u.rel)
	}
	select {
	case kustomizeLock <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-kustomizeLock }()
	defer func() {
		if r := recover(); r != nil {
			objs, err = nil, fail(fmt.Errorf("kustomize build panicked: %v", r))
		}
	}()
	ko := krusty.MakeDefaultOptions() // no plugins, no Helm, input order kept
	ko.LoadRestrictions = types.LoadRestrictionsRootOnly
	m, err := krusty.MakeKustomizer(ko).Run(fsys, dir)
	if err != nil {
		return nil, fail(fmt.Errorf("kustomize build: %w", err))
	}
	loc := location{file: file}
	var errs []error
	for _, r := range m.Resources() {
		js, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fail(fmt.Errorf("kustomize output: %w", err)))
			continue
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			errs = append(errs, fail(fmt.Errorf("kustomize output: %w", err)))
			continue
		}
		d, err := flatten(obj, loc)
		errs = append(errs, err)
		objs = append(objs, d...)
	}
	return objs, errors.Join(errs...)
}

// memoryCopy copies the source root, without hidden folders, into an in-memory file
// system rooted at "/". Symlinks that stay inside the root are copied as what they point
// to; others are left out, so kustomize reports them as missing.
func memoryCopy(ctx context.Context, root string) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel := relSlash(root, p)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && p != root {
				return filepath.SkipDir
			}
			return mem.MkdirAll(path.Join("/", rel))
		}
		if d.Type()&fs.ModeSymlink != 0 {
			real, err := filepath.EvalSymlinks(p)
			if err != nil || !within(root, real) {
				return nil
			}
			if info, err := os.Stat(real); err != nil || !info.Mode().IsRegular() {
				return nil
			}
		} else if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return mem.WriteFile(path.Join("/", rel), data)
	})
	return mem, err
}

// kustomizationRefs are the fields of a kustomization that load other folders or files.
type kustomizationRefs struct {
	Resources  []string `json:"resources"`
	Bases      []string `json:"bases"`
	Components []string `json:"components"`
}

// refuseRemote walks the kustomizations reachable from dir (slash path relative to root)
// and refuses references that kustomize would fetch from the network.
func refuseRemote(root, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	abs := filepath.Join(root, filepath.FromSlash(dir))
	name := kustomizationIn(abs)
	if name == "" {
		return nil
	}
	file := path.Join(dir, name)
	data, err := os.ReadFile(filepath.Join(abs, name))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	var refs kustomizationRefs
	if err := yaml.Unmarshal(data, &refs); err != nil {
		return &InputError{File: file, Err: fmt.Errorf("invalid kustomization: %w", err)}
	}
	for _, ref := range append(append(refs.Resources, refs.Bases...), refs.Components...) {
		local := path.Clean(path.Join(dir, ref))
		info, err := os.Stat(filepath.Join(root, filepath.FromSlash(local)))
		switch {
		case err == nil && info.IsDir() && filepath.IsLocal(filepath.FromSlash(local)):
			if err := refuseRemote(root, local, seen); err != nil {
				return err
			}
		case err != nil && isRemote(ref):
			return &InputError{File: file, Err: fmt.Errorf("%w: refusing %q (set AllowRemoteBases to load it)", ErrRemoteBase, ref)}
		}
	}
	return nil
}

// isRemote mirrors what kustomize would fetch: URLs, scp-like git addresses, and
// "host.tld/org/repo" paths.
func isRemote(ref string) bool {
	if strings.Contains(ref, "://") || strings.HasPrefix(ref, "git@") || strings.HasPrefix(ref, "git::") {
		return true
	}
	first, _, _ := strings.Cut(ref, "/")
	return strings.Contains(first, ".") && first != "." && first != ".." && strings.Contains(ref, "/")
}
