package sources

import (
	"encoding/json"
	"strconv"

	"sigs.k8s.io/kustomize/api/provider"
	"sigs.k8s.io/kustomize/kyaml/resid"
)

// A post-render is a kustomize build, quadratic in the number of objects (see chunked.go):
// one build over a chart of 10,000 objects takes minutes (BenchmarkRenderHelmChartPostRender10000).
// Patches and image overrides change each object from its own content, so the objects can go
// through them in chunks, each chunk a build of its own, as long as nothing makes one object's
// result depend on another:
//   - no two objects share an id (the whole build refuses that);
//   - every patch without a target is a single strategic merge patch naming exactly one
//     object (it goes to that object's chunk only; kustomize applies it to the one object
//     it names, and refuses a patch naming none or several);
//   - no object comes out with another id than it went in (kustomize rewrites the
//     references of other objects to a renamed one), and each still carries its mark.
//
// Anything else runs the whole build, so chunking never gives an output one build would not
// (TestHelmPostRenderChunksMatchOneBuild).

// postRenderChunk is about how many objects one chunk of a post-render holds.
const postRenderChunk = chunkObjects

// kustomizeBuild runs patches and images over marked (markIndexes' output): in chunks of
// chunk objects when that is sure to give what one build gives, else in one build.
func kustomizeBuild(marked [][]byte, patches []Patch, images []Image, chunk int) ([]built, error) {
	if plan := planPostRender(marked, patches, chunk); plan != nil {
		out, ok, err := plan.run(images)
		if err != nil || ok {
			return out, err
		}
	}
	m, err := kustomizeResources(marked, patches, images)
	if err != nil {
		return nil, err
	}
	return finishAll(m.Resources(), make([]built, 0, m.Size()))
}

// postRenderPlan is a chunked post-render: consecutive slices of the objects, each with the
// patches that may apply to it.
type postRenderPlan struct {
	marked  [][]byte
	ids     []resid.ResId
	bounds  []int     // chunk c is marked[bounds[c]:bounds[c+1]]
	patches [][]Patch // by chunk
}

// planPostRender returns the plan of a chunked post-render, or nil when one build is to run.
func planPostRender(marked [][]byte, patches []Patch, chunk int) *postRenderPlan {
	if chunk <= 0 || len(marked) <= chunk {
		return nil
	}
	p := &postRenderPlan{marked: marked, ids: make([]resid.ResId, len(marked))}
	seen := make(map[resid.ResId]bool, len(marked))
	for n, js := range marked {
		id, ok := objectID(js)
		key := resid.NewResIdWithNamespace(id.Gvk, id.Name, id.EffectiveNamespace())
		if !ok || seen[key] {
			return nil
		}
		seen[key], p.ids[n] = true, id
	}
	owners := make([]int, len(patches)) // the object an untargeted patch names; -1: any
	for j, pt := range patches {
		owners[j] = -1
		if pt.Target == nil {
			if owners[j] = p.owner(pt.Patch); owners[j] < 0 {
				return nil
			}
		}
	}
	for lo := 0; lo < len(marked); lo += chunk {
		hi := min(lo+chunk, len(marked))
		var ps []Patch
		for j, pt := range patches {
			if owners[j] < 0 || owners[j] >= lo && owners[j] < hi {
				ps = append(ps, pt)
			}
		}
		p.bounds, p.patches = append(p.bounds, lo), append(p.patches, ps)
	}
	p.bounds = append(p.bounds, len(marked))
	return p
}

// owner returns the index of the one object the untargeted strategic merge patch names,
// or -1 (not one strategic merge patch, or naming no object or several).
func (p *postRenderPlan) owner(patch string) int {
	rs, err := provider.NewDefaultDepProvider().GetResourceFactory().SliceFromBytes([]byte(patch))
	if err != nil || len(rs) != 1 || rs[0].GetKind() == "" || rs[0].GetName() == "" {
		return -1
	}
	id, found := rs[0].OrgId(), -1
	for n := range p.ids {
		if p.ids[n].Equals(id) {
			if found >= 0 {
				return -1
			}
			found = n
		}
	}
	return found
}

// run builds each chunk and concatenates their objects (each chunk's turned into JSON
// before the next is built: kustomize's form of an object is many times its JSON); ok is
// false when an object came out renamed or without its mark, and the whole build must run
// instead.
func (p *postRenderPlan) run(images []Image) (out []built, ok bool, err error) {
	out = make([]built, 0, len(p.marked))
	for c := range p.patches {
		m, err := kustomizeResources(p.marked[p.bounds[c]:p.bounds[c+1]], p.patches[c], images)
		if err != nil {
			return nil, false, err
		}
		for _, r := range m.Resources() {
			n, err := strconv.Atoi(r.GetAnnotations()[renderIndex])
			if err != nil || n < 0 || n >= len(p.ids) || !sameID(r.CurId(), p.ids[n]) {
				return nil, false, nil
			}
		}
		if out, err = finishAll(m.Resources(), out); err != nil {
			return nil, false, err
		}
	}
	return out, true, nil
}

// sameID reports whether a and b are the same id, namespace as written.
func sameID(a, b resid.ResId) bool {
	return a.Gvk.Equals(b.Gvk) && a.Name == b.Name && a.Namespace == b.Namespace
}

// objectID reads the id of a rendered object (JSON).
func objectID(js []byte) (resid.ResId, bool) {
	var o struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(js, &o); err != nil || o.Kind == "" || o.Metadata.Name == "" {
		return resid.ResId{}, false
	}
	g, v := resid.ParseGroupVersion(o.APIVersion)
	return resid.NewResIdWithNamespace(resid.NewGvk(g, v, o.Kind), o.Metadata.Name, o.Metadata.Namespace), true
}
