package sources

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Kustomize's build is quadratic in the number of resources: every resource appended to
// the build's map is compared with every resource already there, and each comparison
// re-reads both objects' ids from their YAML nodes (resmap.Append, resource.CurId); the
// name-reference pass does the same per referrer. A kustomization of 10,000 resources takes
// minutes. A chunked build runs krusty on consecutive slices of the kustomization's resource
// files, each through the same kustomization file with only its resources list replaced,
// and concatenates the outputs: the same bytes, in the same order, whenever every
// transformer the kustomization uses is local to one object and no object of the build can
// change another.
//
// That is provable for a narrow, common shape, and the chunked build is only tried there:
//   - the kustomization sets no field but apiVersion, kind (Kustomization), resources,
//     namespace, labels, commonLabels, commonAnnotations and images: each of those rewrites
//     one object from its own content (namePrefix, generators, patches, replacements,
//     components, sortOptions... fall back);
//   - every resource is a file in the kustomization's folder or below it, or a folder whose
//     kustomization is itself of this shape (a base, anywhere in the source; the chunk's
//     files are cut from every kustomization of the tree, so each object still passes
//     through the transformers of its base and of every overlay above it);
//   - no output object is of a kind whose name references kustomize resolves to a name AND
//     a namespace taken from another object (chunkUnsafeKinds): without name changes every
//     other reference kustomize fixes is rewritten to the name it already has;
//   - no resource file names a local-config object (kustomize drops those last, after they
//     took part in the duplicate-id check) or kustomize's internal annotations (a hash
//     suffix or a rename that references elsewhere follow): crossObjectMarkers;
//   - no two output objects share an id, which the whole build refuses;
//   - there are at least two chunks.
//
// Anything else, and any of these checks failing after the chunks were built, runs the
// whole build instead, so the chunked path never decides an output the whole build would
// not produce (TestChunkedBuildMatchesKrusty).

// chunkObjects is about how many objects one chunk holds: large enough that krusty's fixed
// cost per build (loading the kustomization, the OpenAPI schema) stays small, small enough
// that its quadratic part does.
const chunkObjects = 100

// chunkFields are the kustomization fields a chunked build supports.
var chunkFields = map[string]bool{
	"apiVersion": true, "kind": true, "resources": true, "namespace": true,
	"labels": true, "commonLabels": true, "commonAnnotations": true, "images": true,
}

// chunkUnsafeKinds are the referrers of kustomize's name-reference configuration
// (api/internal/konfig/builtinpluginconsts/namereference.go, kustomize api v0.21.2) whose
// reference is a map of name and namespace (subjects, webhooks' clientConfig.service, a
// StorageClass's parameters.secretRef, a Node's configSource.configMap): kustomize writes the
// referenced object's namespace into them even when no name changed, so they depend on
// objects that may sit in another chunk.
var chunkUnsafeKinds = map[string]bool{
	"RoleBinding": true, "ClusterRoleBinding": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
	"StorageClass": true, "Node": true,
}

// chunkPlan is a chunked build of a tree of kustomizations: the one built and the bases it
// lists, each of the supported shape.
type chunkPlan struct {
	kusts  []*chunkKust
	leaves int      // resource files, in the order the whole build reads them
	cuts   [][2]int // the chunks: ranges of leaves
}

// chunkKust is one kustomization of the tree.
type chunkKust struct {
	file     string         // its path in the file system
	fields   map[string]any // its content
	original []byte
	entries  []chunkEntry // its resources, in order
}

// chunkEntry is one resources entry: a file (one leaf) or a base (its leaves).
type chunkEntry struct {
	name   any // as written
	lo, hi int // the leaves it covers
}

// maxChunkDepth bounds how deep bases may nest for a chunked build.
const maxChunkDepth = 16

// plan reads the kustomization of in and the bases it lists, and splits their resource files
// into chunks; nil when the tree is not of the shape a chunked build supports.
func (in *buildInput) plan() *chunkPlan {
	if in.chunkObjects <= 0 || in.disk {
		return nil
	}
	p := &chunkPlan{}
	var weights []int
	if !p.add(in.fsys, path.Join(in.dir, path.Base(in.file)), map[string]bool{}, &weights, 0) {
		return nil
	}
	p.leaves = len(weights)
	lo, objects := 0, 0
	for i, w := range weights {
		if objects += w; objects >= in.chunkObjects {
			p.cuts, lo, objects = append(p.cuts, [2]int{lo, i + 1}), i+1, 0
		}
	}
	if lo < len(weights) {
		p.cuts = append(p.cuts, [2]int{lo, len(weights)})
	}
	if len(p.cuts) < 2 || len(p.cuts) > maxChunks {
		return nil
	}
	return p
}

// add reads the kustomization file and, depth first, the bases it lists, appending the
// weight (estimated objects) of each resource file to weights; false when anything is not
// of the supported shape. seen holds the folders on the way, so a cycle falls back.
func (p *chunkPlan) add(fsys filesys.FileSystem, file string, seen map[string]bool, weights *[]int, depth int) bool {
	dir := path.Dir(file)
	if depth > maxChunkDepth || seen[dir] {
		return false
	}
	seen[dir] = true
	defer delete(seen, dir)
	data, err := fsys.ReadFile(file)
	var fields map[string]any
	if err != nil || yaml.Unmarshal(data, &fields) != nil || fields == nil {
		return false
	}
	for field := range fields {
		if !chunkFields[field] {
			return false
		}
	}
	if k, ok := fields["kind"]; ok && k != "Kustomization" {
		return false
	}
	resources, ok := fields["resources"].([]any)
	if !ok {
		return false
	}
	for _, other := range p.kusts {
		if other.file == file {
			return false // a base listed twice: the whole build refuses the duplicates
		}
	}
	k := &chunkKust{file: file, fields: fields, original: data}
	p.kusts = append(p.kusts, k)
	for _, r := range resources {
		name, ok := r.(string)
		if !ok || name == "" || strings.Contains(name, "://") || path.IsAbs(name) {
			return false
		}
		target := path.Join(dir, name)
		e := chunkEntry{name: r, lo: len(*weights)}
		if fsys.IsDir(target) {
			base := kustomizationOf(fsys, target)
			if base == "" || !p.add(fsys, base, seen, weights, depth+1) {
				return false
			}
		} else {
			// Root-only loading: a file outside the kustomization's folder is refused
			// by the whole build; let it say so.
			content, err := fsys.ReadFile(target)
			if err != nil || !localFile(name) || crossObject(content) {
				return false
			}
			*weights = append(*weights, documents(content))
		}
		e.hi = len(*weights)
		k.entries = append(k.entries, e)
	}
	return true
}

// crossObjectMarkers are annotations by which a resource takes part in the whole build
// beyond its own content: a local-config object is dropped only at the end, after the
// duplicate-id check it still takes part in; kustomize's internal annotations ask for a
// hash suffix or a rename that references in other objects follow.
var crossObjectMarkers = [][]byte{[]byte("config.kubernetes.io/local-config"), []byte("internal.config.kubernetes.io/")}

// crossObject reports whether a resource file carries one of crossObjectMarkers.
func crossObject(content []byte) bool {
	for _, m := range crossObjectMarkers {
		if bytes.Contains(content, m) {
			return true
		}
	}
	return false
}

// maxChunks bounds the chunks of one build: chunks are sized by an estimate of the
// documents in each file, and a tree of many kustomizations is rewritten for every chunk;
// past this many the whole build is not slower.
const maxChunks = 1000

// kustomizationOf returns the kustomization file of dir, or "" unless there is exactly one.
func kustomizationOf(fsys filesys.FileSystem, dir string) string {
	found := ""
	for _, name := range kustomizationFiles {
		if p := path.Join(dir, name); fsys.Exists(p) {
			if found != "" {
				return ""
			}
			found = p
		}
	}
	return found
}

// localFile reports whether a resources entry names a path inside the kustomization's
// folder.
func localFile(name string) bool {
	clean := path.Clean(name)
	return clean != ".." && !strings.HasPrefix(clean, "../")
}

// documents estimates the YAML documents of a file, for sizing chunks only.
func documents(content []byte) int {
	return 1 + bytes.Count(content, []byte("\n---"))
}

// runChunked builds the chunks one after the other, each through the tree's kustomizations
// with their resources cut to the entries that hold the chunk's files, restores the files,
// and returns the concatenated resources; ok is false when the whole build must run
// instead.
func (in *buildInput) runChunked(p *chunkPlan) (out []*resource.Resource, ok bool, err error) {
	defer func() {
		for _, k := range p.kusts {
			if werr := in.fsys.WriteFile(k.file, k.original); werr != nil && err == nil {
				err = fmt.Errorf("%s: restore after a chunked build: %w", in.file, werr)
			}
		}
	}()
	seen := map[string]bool{}
	for _, cut := range p.cuts {
		for _, k := range p.kusts {
			var resources []any
			for _, e := range k.entries {
				if e.lo < cut[1] && e.hi > cut[0] {
					resources = append(resources, e.name)
				}
			}
			fields := make(map[string]any, len(k.fields))
			for f, v := range k.fields {
				fields[f] = v
			}
			fields["resources"] = resources
			data, err := yaml.Marshal(fields)
			if err != nil {
				return nil, false, nil
			}
			if err := in.fsys.WriteFile(k.file, data); err != nil {
				return nil, false, nil
			}
		}
		m, err := in.krusty()
		if err != nil {
			// The same files fail the whole build the same way, but its message may
			// differ: let it speak.
			return nil, false, nil
		}
		for _, r := range m.Resources() {
			if chunkUnsafeKinds[r.GetKind()] {
				return nil, false, nil
			}
			id := r.CurId()
			key := id.Gvk.String() + "|" + id.EffectiveNamespace() + "|" + id.Name
			if seen[key] {
				return nil, false, nil
			}
			seen[key] = true
			out = append(out, r)
		}
	}
	return out, true, nil
}
