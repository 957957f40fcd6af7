package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// A kustomize build reads an in-memory copy of what its kustomization reaches, never the
// rest of the source: the kustomization file, every file and folder its loading fields
// name, and, recursively, the kustomizations of the folders among them. Copying the whole
// source would cost a repository of 200 apps 200 copies of all 200 apps per render (1.48 GB),
// and one large file anywhere in it would fail every build: an unreferenced file is neither
// read nor counted.
//
// The copy keeps the source's layout (a file at "/"+its slash path), so kustomize resolves
// references and reports errors exactly as on disk. Kustomize never lists a folder: a
// referenced folder without a kustomization is created empty, and kustomize reports it.
// What kustomize would fetch (URLs) or find missing is not copied: refuseRemote and
// kustomize report those.

// maxReachDepth bounds how deep kustomizations may nest through their references: a
// symlinked folder that points to its own parent would otherwise nest without end.
const maxReachDepth = 64

// reacher copies what one kustomize build reaches into mem, within b's limits.
type reacher struct {
	ctx  context.Context
	root *os.Root
	mem  filesys.FileSystem
	b    *budget
	file string // the kustomization built, for messages
	// seen holds the slash paths copied: files, and folders (with a trailing "/") whose
	// kustomization was followed.
	seen  map[string]bool
	files int
	// ign holds the paths that are not part of the source (RenderOptions.Ignored).
	ign ignoredSet
	// edit, when set, rewrites the kustomization built (nil data: the folder has none) before
	// it is copied and followed: RenderOptions.Overlay.
	edit func([]byte) ([]byte, error)
}

// reach returns an in-memory file system, rooted at "/", holding what the kustomization of
// the folder rel (a slash path in the source root) reaches. file names that kustomization in
// messages. A reference to a path that ign holds is refused (ErrIgnored). edit, when set,
// rewrites that kustomization first (reacher.edit).
func reach(ctx context.Context, root, rel, file string, b *budget, ign ignoredSet, edit func([]byte) ([]byte, error)) (filesys.FileSystem, error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%s: open source: %w", file, err)
	}
	defer func() { _ = r.Close() }()
	w := &reacher{ctx: ctx, root: r, mem: filesys.MakeFsInMemory(), b: b, file: file, seen: map[string]bool{}, ign: ign, edit: edit}
	if err := w.kustomization(rel, 0, ""); err != nil {
		return nil, err
	}
	return w.mem, nil
}

// kustomization copies the kustomization file of the folder dir and what it references.
// pluginDir is set when dir was listed under generators, transformers or validators of the
// kustomization in pluginDir: its resources are plugin configs, whose paths kustomize
// loads from pluginDir.
func (w *reacher) kustomization(dir string, depth int, pluginDir string) error {
	if w.seen[dir+"/"] {
		return nil
	}
	w.seen[dir+"/"] = true
	if depth > maxReachDepth {
		return &InputError{File: w.file, Err: fmt.Errorf("kustomizations nest more than %d deep", maxReachDepth)}
	}
	if err := w.mem.MkdirAll(path.Join("/", dir)); err != nil {
		return err
	}
	var data []byte
	name, found := "", 0
	for _, n := range kustomizationFiles {
		p := path.Join(dir, n)
		if ok, err := w.isFile(p); err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		d, err := w.copy(p)
		if err != nil {
			return err
		}
		data, name, found = d, p, found+1
	}
	if depth == 0 && w.edit != nil && found <= 1 {
		if found == 0 {
			name = path.Join(dir, kustomizationFiles[0])
		}
		d, err := w.edit(data)
		if err != nil {
			return &InputError{File: w.file, Err: err}
		}
		if err := w.mem.WriteFile(path.Join("/", name), d); err != nil {
			return err
		}
		data, found = d, 1
	}
	if found != 1 {
		return nil // kustomize reports a missing kustomization, or several
	}
	var k types.Kustomization
	if k.Unmarshal(data) != nil {
		return nil // kustomize, or refuseRemote first, reports it
	}
	for _, ref := range references(&k) {
		if err := w.ref(dir, name, ref, depth, pluginDir); err != nil {
			return err
		}
	}
	return nil
}

// reference is one value of a loading field of a kustomization.
type reference struct {
	field, value string
	// plugin: a generators, transformers or validators entry (a config file, a folder, or
	// an inline config).
	plugin bool
}

// references lists the values of k's fields that kustomize loads from the disk, with their
// field paths for messages. helmCharts are not among them: Helm is off.
func references(k *types.Kustomization) []reference {
	var refs []reference
	list := func(field string, values []string, plugin bool) {
		for i, v := range values {
			refs = append(refs, reference{field: field + "[" + strconv.Itoa(i) + "]", value: v, plugin: plugin})
		}
	}
	list("resources", k.Resources, false)
	list("bases", k.Bases, false)
	list("components", k.Components, false)
	list("crds", k.Crds, false)
	list("configurations", k.Configurations, false)
	for i, p := range k.PatchesStrategicMerge {
		refs = append(refs, reference{field: "patchesStrategicMerge[" + strconv.Itoa(i) + "]", value: string(p)})
	}
	for i, p := range k.Patches {
		refs = append(refs, reference{field: "patches[" + strconv.Itoa(i) + "].path", value: p.Path})
	}
	for i, p := range k.PatchesJson6902 {
		refs = append(refs, reference{field: "patchesJson6902[" + strconv.Itoa(i) + "].path", value: p.Path})
	}
	for i, r := range k.Replacements {
		refs = append(refs, reference{field: "replacements[" + strconv.Itoa(i) + "].path", value: r.Path})
	}
	refs = append(refs, reference{field: "openapi.path", value: k.OpenAPI["path"]})
	generators := func(name string, args []types.GeneratorArgs) {
		for i, g := range args {
			at := name + "[" + strconv.Itoa(i) + "]"
			for j, f := range g.FileSources {
				refs = append(refs, reference{field: at + ".files[" + strconv.Itoa(j) + "]", value: fileSourcePath(f)})
			}
			list(at+".envs", g.EnvSources, false)
			refs = append(refs, reference{field: at + ".env", value: g.EnvSource})
		}
	}
	generators("configMapGenerator", generatorArgs(k.ConfigMapGenerator))
	generators("secretGenerator", secretArgs(k.SecretGenerator))
	list("generators", k.Generators, true)
	list("transformers", k.Transformers, true)
	list("validators", k.Validators, true)
	return refs
}

func generatorArgs(in []types.ConfigMapArgs) []types.GeneratorArgs {
	out := make([]types.GeneratorArgs, len(in))
	for i, a := range in {
		out[i] = a.GeneratorArgs
	}
	return out
}

func secretArgs(in []types.SecretArgs) []types.GeneratorArgs {
	out := make([]types.GeneratorArgs, len(in))
	for i, a := range in {
		out[i] = a.GeneratorArgs
	}
	return out
}

// fileSourcePath is the path of a generator's files entry, "path" or "key=path".
func fileSourcePath(source string) string {
	if _, p, ok := strings.Cut(source, "="); ok {
		return p
	}
	return source
}

// ref copies what one reference of the kustomization file (in the folder dir) reaches.
func (w *reacher) ref(dir, file string, ref reference, depth int, pluginDir string) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if ref.value == "" || isRemote(ref.value) || isRemoteFile(ref.value) {
		return nil // refuseRemote refuses it, or kustomize fetches it
	}
	if inline(ref.value) {
		if ref.plugin {
			return w.pluginPaths(dir, file, []byte(ref.value), depth)
		}
		return nil // an inline patch
	}
	target, ok := resolve(dir, ref.value)
	if !ok {
		return &InputError{File: file, Err: fmt.Errorf("%s: %w: %q", ref.field, ErrPathEscape, ref.value)}
	}
	if hiddenFolder(target) {
		return nil // never copied, as .git: kustomize reports it missing
	}
	if w.ign.has(target) {
		return &InputError{File: file, Err: fmt.Errorf("%s: %q: %w", ref.field, ref.value, ErrIgnored)}
	}
	info, err := w.stat(target)
	switch {
	case err != nil:
		return err
	case info == nil:
		return nil // missing: kustomize reports it (or reads an inline patch)
	case info.IsDir():
		sub := pluginDir
		if ref.plugin {
			sub = dir
		}
		return w.kustomization(target, depth+1, sub)
	case !info.Mode().IsRegular():
		return nil
	}
	data, err := w.copy(target)
	if err != nil {
		return err
	}
	switch {
	case ref.plugin:
		return w.pluginPaths(dir, target, data, depth)
	case pluginDir != "" && strings.HasPrefix(ref.field, "resources["):
		return w.pluginPaths(pluginDir, target, data, depth)
	}
	return nil
}

// pluginPaths copies the files that the generator or transformer configs in data (one or
// more YAML documents, written in file) load, relative to the kustomization folder dir that
// lists them.
func (w *reacher) pluginPaths(dir, file string, data []byte, depth int) error {
	return walkConfigs(data, func(field, value string) error {
		if pluginRef(field) == notRef {
			return nil
		}
		if strings.HasPrefix(field, "files[") {
			value = fileSourcePath(value)
		}
		return w.ref(dir, file, reference{field: field, value: value}, depth, "")
	})
}

// inline reports whether a value of a loading field is a YAML object rather than a path:
// an inline patch or plugin config.
func inline(value string) bool {
	if !strings.ContainsAny(value, "\n:{") {
		return false
	}
	var m map[string]any
	return yaml.Unmarshal([]byte(value), &m) == nil && len(m) > 0
}

// resolve returns the slash path, relative to the source root, that kustomize reads for
// value in the folder dir of the in-memory copy (rooted at "/": an absolute value names a
// path of the source); false when a relative value climbs out of the source.
func resolve(dir, value string) (string, bool) {
	if path.IsAbs(value) {
		return strings.TrimPrefix(path.Clean(value), "/"), true
	}
	p := path.Join(dir, value)
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	return p, true
}

// hiddenFolder reports whether the slash path p lies in a folder whose name starts with a
// dot (.git, .github...): the copy for a kustomize build never held those.
func hiddenFolder(p string) bool {
	parts := strings.Split(p, "/")
	for _, part := range parts[:len(parts)-1] {
		if strings.HasPrefix(part, ".") && part != "." {
			return true
		}
	}
	return false
}

// stat returns what the slash path p is in the source, following symlinks that stay
// inside it; nil without an error when p does not exist there. A symlink out of the source
// is refused whether or not its target exists.
func (w *reacher) stat(p string) (fs.FileInfo, error) {
	info, err := w.root.Stat(p)
	switch {
	case err == nil:
		return info, nil
	case escapes(err):
		return nil, symlinkEscape(p)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	}
	return nil, fmt.Errorf("%s: %w", w.file, err)
}

// isFile reports whether the slash path p is a regular file of the source.
func (w *reacher) isFile(p string) (bool, error) {
	info, err := w.stat(p)
	return info != nil && info.Mode().IsRegular(), err
}

// copy reads the file at the slash path p into the copy, once, counting it in the limits.
func (w *reacher) copy(p string) ([]byte, error) {
	if w.seen[p] {
		return w.mem.ReadFile(path.Join("/", p))
	}
	w.seen[p] = true
	if w.files++; w.files > w.b.limits.MaxFiles {
		return nil, &InputError{File: w.file, Err: fmt.Errorf("%w: the kustomization reaches more than %d files (raise the limit with --max-files)", ErrTooManyFiles, w.b.limits.MaxFiles)}
	}
	data, err := readFile(w.root, p, w.b)
	switch {
	case escapes(err):
		return nil, symlinkEscape(p)
	case err != nil && !IsTerminal(err):
		return nil, fmt.Errorf("%s: read %s: %w", w.file, p, err)
	case err != nil:
		return nil, err
	}
	return data, w.mem.WriteFile(path.Join("/", p), data)
}
