package sources

import (
	"bytes"
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/kustomize/api/resource"
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
//   - every resource is a file in the kustomization's folder or below it (a folder is a
//     base, whose own kustomization may do anything);
//   - no output object is of a kind whose name references kustomize resolves to a name AND
//     a namespace taken from another object (chunkUnsafeKinds): without name changes every
//     other reference kustomize fixes is rewritten to the name it already has;
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

// chunkPlan reads the kustomization of in and returns its resource files split into
// chunks, or nil when the kustomization is not of the shape a chunked build supports.
func (in *buildInput) chunkPlan() (kust map[string]any, file string, chunks [][]any) {
	if in.chunkObjects <= 0 || in.disk {
		return nil, "", nil
	}
	file = path.Join(in.dir, path.Base(in.file))
	data, err := in.fsys.ReadFile(file)
	if err != nil || yaml.Unmarshal(data, &kust) != nil || kust == nil {
		return nil, "", nil
	}
	for field := range kust {
		if !chunkFields[field] {
			return nil, "", nil
		}
	}
	if k, ok := kust["kind"]; ok && k != "Kustomization" {
		return nil, "", nil
	}
	resources, ok := kust["resources"].([]any)
	if !ok {
		return nil, "", nil
	}
	var chunk []any
	objects := 0
	for _, r := range resources {
		name, ok := r.(string)
		if !ok || !localFile(name) {
			return nil, "", nil
		}
		p := path.Join(in.dir, name)
		if in.fsys.IsDir(p) {
			return nil, "", nil
		}
		content, err := in.fsys.ReadFile(p)
		if err != nil {
			return nil, "", nil // the whole build reports it
		}
		chunk = append(chunk, name)
		if objects += documents(content); objects >= in.chunkObjects {
			chunks, chunk, objects = append(chunks, chunk), nil, 0
		}
	}
	if len(chunk) > 0 {
		chunks = append(chunks, chunk)
	}
	if len(chunks) < 2 {
		return nil, "", nil
	}
	return kust, file, chunks
}

// localFile reports whether a resources entry names a path inside the kustomization's
// folder, not a URL.
func localFile(name string) bool {
	clean := path.Clean(name)
	return name != "" && !strings.Contains(name, "://") && !path.IsAbs(clean) &&
		clean != ".." && !strings.HasPrefix(clean, "../")
}

// documents estimates the YAML documents of a file, for sizing chunks only.
func documents(content []byte) int {
	return 1 + bytes.Count(content, []byte("\n---"))
}

// runChunked builds the chunks of plan one after the other through the kustomization file,
// restored afterwards, and returns the concatenated resources; ok is false when the whole
// build must run instead.
func (in *buildInput) runChunked(kust map[string]any, file string, chunks [][]any) (out []*resource.Resource, ok bool, err error) {
	original, err := in.fsys.ReadFile(file)
	if err != nil {
		return nil, false, nil
	}
	defer func() {
		if werr := in.fsys.WriteFile(file, original); werr != nil && err == nil {
			err = fmt.Errorf("%s: restore after a chunked build: %w", in.file, werr)
		}
	}()
	seen := map[string]bool{}
	chunk := make(map[string]any, len(kust))
	for k, v := range kust {
		chunk[k] = v
	}
	for _, resources := range chunks {
		chunk["resources"] = resources
		data, err := yaml.Marshal(chunk)
		if err != nil {
			return nil, false, nil
		}
		if err := in.fsys.WriteFile(file, data); err != nil {
			return nil, false, nil
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
