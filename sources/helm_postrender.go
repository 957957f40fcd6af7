package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/resid"
	"sigs.k8s.io/yaml"
)

// PostRenderer changes a chart's rendered objects, as one of Flux's HelmRelease
// spec.postRenderers; kustomize is the only kind.
type PostRenderer struct {
	// Kustomize patches the objects and overrides their images.
	Kustomize *KustomizePostRenderer `json:"kustomize,omitempty"`
}

// KustomizePostRenderer does to a chart's objects what a kustomization listing them as its
// resources, with these patches and images, does.
type KustomizePostRenderer struct {
	// Patches are applied in order.
	Patches []Patch `json:"patches,omitempty"`
	// Images override the images of the objects' containers, as kustomize's images field.
	Images []Image `json:"images,omitempty"`
}

// Patch is a strategic merge patch or a JSON6902 patch (YAML or JSON), as an entry of a
// kustomization's patches: applied to the objects Target selects or, for a strategic
// merge patch without Target, to the object the patch names.
type Patch struct {
	Patch  string       `json:"patch"`
	Target *PatchTarget `json:"target,omitempty"`
}

// PatchTarget selects objects by group, version, kind, name and namespace (regular
// expressions, as kustomize reads them) and by label and annotation selectors.
type PatchTarget struct {
	Group              string `json:"group,omitempty"`
	Version            string `json:"version,omitempty"`
	Kind               string `json:"kind,omitempty"`
	Name               string `json:"name,omitempty"`
	Namespace          string `json:"namespace,omitempty"`
	LabelSelector      string `json:"labelSelector,omitempty"`
	AnnotationSelector string `json:"annotationSelector,omitempty"`
}

// Image overrides the containers' images named Name, as an entry of kustomize's images.
type Image struct {
	Name    string `json:"name"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// renderIndex marks each object given to a post-renderer with its index among them, so
// that what comes out still names the chart file it came from: a patch may drop an
// object ($patch: delete). It is removed from the output.
const renderIndex = "render.converge.dev/index"

// postRender runs the post-renderers prs on a chart's objects (JSON, with the chart file
// each came from), in order. An object whose mark a patch removed is said to come from
// chartYAML. Errors are terminal and name the Sync field at fault.
func postRender(resources [][]byte, origins []string, prs []PostRenderer, chartYAML string) ([][]byte, []string, error) {
	for i, pr := range prs {
		if pr.Kustomize == nil {
			continue
		}
		var err error
		if resources, origins, err = kustomizeObjects(resources, origins, i, *pr.Kustomize, chartYAML); err != nil {
			return nil, nil, err
		}
	}
	return resources, origins, nil
}

// kustomizeObjects runs the i-th post-renderer, k, on resources (which it clears: a
// chart of thousands of objects must fit the render child's memory limit).
func kustomizeObjects(resources [][]byte, origins []string, i int, k KustomizePostRenderer, chartYAML string) ([][]byte, []string, error) {
	field := fmt.Sprintf("spec.source.helm.postRenderers[%d].kustomize", i)
	marked, err := markIndexes(resources)
	if err != nil {
		return nil, nil, &InputError{File: chartYAML, Err: fmt.Errorf("%s: %w", field, err)}
	}
	clear(resources)
	objs, err := kustomizeBuild(marked, k.Patches, k.Images, postRenderChunk)
	if err != nil {
		return nil, nil, blamePostRender(marked, field, k, err)
	}
	out, from := make([][]byte, len(objs)), make([]string, len(objs))
	for j, o := range objs {
		out[j], from[j] = o.js, chartYAML
		if o.index >= 0 && o.index < len(origins) {
			from[j] = origins[o.index]
		}
	}
	return out, from, nil
}

// built is an object out of a post-render: its JSON without the mark, and the index the
// mark gave (-1 when a patch removed it).
type built struct {
	js    []byte
	index int
}

// finish turns a resource out of a post-render into a built object.
func finish(r *resource.Resource) (built, error) {
	b := built{index: -1}
	ann := r.GetAnnotations()
	if v, ok := ann[renderIndex]; ok {
		if n, err := strconv.Atoi(v); err == nil {
			b.index = n
		}
		delete(ann, renderIndex)
		if err := r.SetAnnotations(ann); err != nil {
			return b, err
		}
	}
	var err error
	b.js, err = r.MarshalJSON()
	return b, err
}

// finishAll is finish for each of rs.
func finishAll(rs []*resource.Resource, out []built) ([]built, error) {
	for _, r := range rs {
		b, err := finish(r)
		if err != nil {
			return nil, fmt.Errorf("%s: output: %w", r.CurId(), err)
		}
		out = append(out, b)
	}
	return out, nil
}

// blamePostRender names the part of post-renderer k (field) that made its build fail
// with err: the chart's objects themselves (kustomize refuses, say, two objects of the
// same name), the first patch that fails when the patches are added in order (found by
// bisection: patches apply in order, so once a prefix fails every longer one does), or
// else the images. Only a failed post-render pays these builds: 2 + log2(patches).
func blamePostRender(marked [][]byte, field string, k KustomizePostRenderer, err error) error {
	if _, e := kustomizeBuild(marked, nil, nil, postRenderChunk); e != nil {
		return &InputError{File: field, Err: fmt.Errorf("the chart's objects: %w", e)}
	}
	n := len(k.Patches)
	_, failed := kustomizeBuild(marked, k.Patches, nil, postRenderChunk)
	if failed == nil {
		return &InputError{File: field + ".images", Err: err}
	}
	good, bad := 0, n // patches[:good] build, patches[:bad] fail with failed
	for bad-good > 1 {
		mid := (good + bad) / 2
		if _, e := kustomizeBuild(marked, k.Patches[:mid], nil, postRenderChunk); e != nil {
			bad, failed = mid, e
		} else {
			good = mid
		}
	}
	return &InputError{File: fmt.Sprintf("%s.patches[%d]", field, bad-1), Err: failed}
}

// markIndexes returns each resource with its index in the renderIndex annotation.
func markIndexes(resources [][]byte) ([][]byte, error) {
	out := make([][]byte, len(resources))
	for n, js := range resources {
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			return nil, fmt.Errorf("rendered object %d is not an object: %w", n+1, err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
			obj["metadata"] = meta
		}
		ann, _ := meta["annotations"].(map[string]any)
		if ann == nil {
			ann = map[string]any{}
			meta["annotations"] = ann
		}
		ann[renderIndex] = strconv.Itoa(n)
		var err error
		if out[n], err = json.Marshal(obj); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// kustomizeResources builds, with krusty on an in-memory file system (nothing else is
// reachable: no file, no network, no plugin), a kustomization whose resources are
// resources, with patches and images.
func kustomizeResources(resources [][]byte, patches []Patch, images []Image) (m resmap.ResMap, err error) {
	fsys := filesys.MakeFsInMemory()
	var buf bytes.Buffer
	for _, r := range resources {
		buf.Write(r)
		buf.WriteString("\n---\n")
	}
	kust := types.Kustomization{TypeMeta: types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{"resources.yaml"}}
	for _, p := range patches {
		kust.Patches = append(kust.Patches, types.Patch{Patch: p.Patch, Target: p.Target.selector()})
	}
	for _, im := range images {
		kust.Images = append(kust.Images, types.Image{Name: im.Name, NewName: im.NewName, NewTag: im.NewTag, Digest: im.Digest})
	}
	y, err := yaml.Marshal(kust)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(fsys.WriteFile("/resources.yaml", buf.Bytes()), fsys.WriteFile("/kustomization.yaml", y)); err != nil {
		return nil, err
	}
	kustomizeLock <- struct{}{} // a render child runs one build at a time: never waits there
	defer func() { <-kustomizeLock }()
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("kustomize build panicked: %v", r)
		}
	}()
	return krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, "/")
}

// selector is t as kustomize's patch target; nil for nil.
func (t *PatchTarget) selector() *types.Selector {
	if t == nil {
		return nil
	}
	return &types.Selector{ResId: resid.ResId{Gvk: resid.Gvk{Group: t.Group, Version: t.Version, Kind: t.Kind},
		Name: t.Name, Namespace: t.Namespace}, LabelSelector: t.LabelSelector, AnnotationSelector: t.AnnotationSelector}
}
