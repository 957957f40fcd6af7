package sources

import (
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Fields of a kustomization that kustomize loads. A field of folderFields may name a folder
// (a git repository when remote) or a file; a field of fileFields names a file, which
// kustomize fetches with HTTP when it is an http(s) URL. pluginFields are the same for the
// builtin generator and transformer configs listed under generators, transformers and
// validators. Paths are written as in messages: "patches[0].path".
var (
	folderFields = regexp.MustCompile(`^(resources|bases|components|generators|transformers|validators)\[\d+\]$`)
	fileFields   = regexp.MustCompile(`^((crds|configurations|patchesStrategicMerge)\[\d+\]|(patches|patchesJson6902|replacements)\[\d+\]\.path|openapi\.path|(configMapGenerator|secretGenerator)\[\d+\]\.((files|envs)\[\d+\]|env))$`)
	pluginFields = regexp.MustCompile(`^(path|paths\[\d+\]|(files|envs)\[\d+\]|env|replacements\[\d+\]\.path)$`)
	// pluginLists are the fields whose file entries are generator or transformer configs.
	pluginLists = regexp.MustCompile(`^(generators|transformers|validators)\[\d+\]$`)
)

// refuseRemote walks the kustomizations reachable from dir (an absolute slash path in fsys)
// and refuses every value of a loading field that kustomize would fetch from the network,
// naming the file and the field. It runs before the build, so that the error says where
// the reference is; an isolated build also refuses the request itself (see isolate.go), for
// whatever field this scan does not know.
func refuseRemote(fsys filesys.FileSystem, dir string, seen map[string]bool) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	name := kustomizationInFS(fsys, dir)
	if name == "" {
		return nil
	}
	file := path.Join(dir, name)
	data, err := fsys.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.TrimPrefix(file, "/"), err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return &InputError{File: strings.TrimPrefix(file, "/"), Err: fmt.Errorf("invalid kustomization: %w", err)}
	}
	var firstErr error
	walkScalars(doc, "", func(field, value string) bool {
		firstErr = checkRef(fsys, dir, file, field, value, kustomizationRef(field), seen)
		return firstErr == nil
	})
	return firstErr
}

// refKind says how kustomize loads a field's value.
type refKind int

const (
	notRef    refKind = iota
	fileRef           // a file; an http(s) URL is fetched
	folderRef         // a folder or a file; a remote one is fetched (git or HTTP)
)

func kustomizationRef(field string) refKind {
	switch {
	case fileFields.MatchString(field):
		return fileRef
	case folderFields.MatchString(field):
		return folderRef
	}
	return notRef
}

func pluginRef(field string) refKind {
	if pluginFields.MatchString(field) {
		return fileRef
	}
	return notRef
}

// checkRef checks one scalar of a kustomization (or plugin config) in the folder dir,
// found at field of file.
func checkRef(fsys filesys.FileSystem, dir, file, field, value string, kind refKind, seen map[string]bool) error {
	refused := func() error {
		return &InputError{File: strings.TrimPrefix(file, "/"),
			Err: fmt.Errorf("%s: %w: refusing %q (set AllowRemoteBases to load it)", field, ErrRemoteBase, value)}
	}
	switch kind {
	case fileRef:
		_, after, found := strings.Cut(value, "=")
		if isRemoteFile(value) || (found && isRemoteFile(after)) {
			return refused()
		}
	case folderRef:
		if strings.Contains(value, "\n") { // an inline generator or transformer config
			return checkPlugin(fsys, dir, file, field+": ", []byte(value))
		}
		local := path.Join(dir, value)
		switch {
		case fsys.IsDir(local):
			return refuseRemote(fsys, local, seen)
		case fsys.Exists(local) && pluginLists.MatchString(field):
			data, err := fsys.ReadFile(local)
			if err != nil {
				return nil // kustomize reports it
			}
			return checkPlugin(fsys, dir, local, "", data)
		case !fsys.Exists(local) && isRemote(value):
			return refused()
		}
	}
	return nil
}

// checkPlugin checks the documents of a generator or transformer config (a file, or an
// inline config at prefix). Its paths are relative to the kustomization's folder dir.
func checkPlugin(fsys filesys.FileSystem, dir, file, prefix string, data []byte) error {
	return walkConfigs(data, func(field, value string) error {
		return checkRef(fsys, dir, file, prefix+field, value, pluginRef(field), nil)
	})
}

// walkConfigs calls visit with the path and value of every string scalar of the YAML
// documents of data (generator or transformer configs), until visit returns an error.
// A document that does not parse is skipped: kustomize reports it.
func walkConfigs(data []byte, visit func(field, value string) error) error {
	for _, d := range splitDocuments(data) {
		var doc any
		if yaml.Unmarshal(d.data, &doc) != nil {
			continue
		}
		var err error
		walkScalars(doc, "", func(field, value string) bool {
			err = visit(field, value)
			return err == nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// walkScalars calls fn with the path and value of every string scalar of a decoded YAML
// tree, keys in sorted order, until fn returns false.
func walkScalars(node any, at string, fn func(field, value string) bool) bool {
	switch n := node.(type) {
	case map[string]any:
		keys := make([]string, 0, len(n))
		for k := range n {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if at != "" {
				p = at + "." + k
			}
			if !walkScalars(n[k], p, fn) {
				return false
			}
		}
	case []any:
		for i, v := range n {
			if !walkScalars(v, at+"["+strconv.Itoa(i)+"]", fn) {
				return false
			}
		}
	case string:
		return fn(at, n)
	}
	return true
}

// locateURL finds the file and field of the source copy that hold u, to name them when an
// isolated build tried to fetch u. Kustomization files are searched first.
func locateURL(fsys filesys.FileSystem, u string) (file, field string) {
	var kustomizations, others []string
	_ = fsys.Walk("/", func(p string, info fs.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return nil
		}
		base := path.Base(p)
		switch {
		case slices.Contains(kustomizationFiles, base):
			kustomizations = append(kustomizations, p)
		case isManifest(base):
			others = append(others, p)
		}
		return nil
	})
	for _, p := range append(kustomizations, others...) {
		data, err := fsys.ReadFile(p)
		if err != nil || !strings.Contains(string(data), u) {
			continue
		}
		for _, d := range splitDocuments(data) {
			var doc any
			if yaml.Unmarshal(d.data, &doc) != nil {
				continue
			}
			walkScalars(doc, "", func(f, v string) bool {
				if strings.Contains(v, u) {
					field = f
				}
				return field == ""
			})
			if field != "" {
				return strings.TrimPrefix(p, "/"), field
			}
		}
	}
	return "", ""
}

// kustomizationInFS is kustomizationIn for the in-memory copy.
func kustomizationInFS(fsys filesys.FileSystem, dir string) string {
	for _, name := range kustomizationFiles {
		if p := path.Join(dir, name); fsys.Exists(p) && !fsys.IsDir(p) {
			return name
		}
	}
	return ""
}

// isRemote mirrors what kustomize would fetch as a base: URLs, scp-like git addresses, and
// "host.tld/org/repo" paths.
func isRemote(ref string) bool {
	if strings.Contains(ref, "://") || strings.HasPrefix(ref, "git@") || strings.HasPrefix(ref, "git::") {
		return true
	}
	first, _, _ := strings.Cut(ref, "/")
	return strings.Contains(first, ".") && first != "." && first != ".." && strings.Contains(ref, "/")
}

// isRemoteFile mirrors kustomize's loader.IsRemoteFile: it fetches http and https URLs
// with HTTP wherever it loads a file.
func isRemoteFile(ref string) bool {
	u, err := url.Parse(ref)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https")
}
