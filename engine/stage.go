package engine

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// Apply stages, in order. Objects of one stage are applied in parallel; a stage starts
// when the previous one is done (and, after the first, when its CRDs are Established).
const (
	stageDefinitions = iota // CRDs, Namespaces, ClusterRoles: what other objects need
	stageClasses            // StorageClass, IngressClass, ... (may be served by a CRD of stage 0)
	stageResources          // everything else
	numStages
)

var (
	crdGK         = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
	namespaceGK   = schema.GroupKind{Kind: "Namespace"}
	clusterRoleGK = schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}
)

// stageOf returns the apply stage of a kind.
func stageOf(gk schema.GroupKind) int {
	switch {
	case gk == crdGK, gk == namespaceGK, gk == clusterRoleGK:
		return stageDefinitions
	case strings.HasSuffix(gk.Kind, "Class"):
		return stageClasses
	default:
		return stageResources
	}
}

// pruneRank orders deletes, the reverse of the apply order: custom resources and other
// objects first, then classes, cluster roles, CRDs, and Namespaces last.
func pruneRank(gk schema.GroupKind) int {
	switch {
	case gk == namespaceGK:
		return 4
	case gk == crdGK:
		return 3
	case gk == clusterRoleGK:
		return 2
	case strings.HasSuffix(gk.Kind, "Class"):
		return 1
	default:
		return 0
	}
}

// item is one validated desired object.
type item struct {
	obj   *unstructured.Unstructured // ownMetadata copy, normalized, owner annotation set
	id    object.ObjMetadata
	key   string // id.String()
	stage int
	// origin is where the object was rendered from (Set.Origins), or "".
	origin string
	// pending marks a kind the API server does not serve yet but a CRD of the same set
	// defines: it resolves once that CRD is applied and Established.
	pending bool
	// pendingErr is set when a pending kind did not resolve after its CRD was applied.
	pendingErr error
}

// serverFields are metadata fields the server owns; they are never sent with an apply
// (a resourceVersion would turn the apply into an optimistic-lock write).
var serverFields = []string{"resourceVersion", "uid", "creationTimestamp", "generation",
	"managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// prepare copies (ownMetadata) and validates the desired objects: every kind resolves (or is
// defined by a CRD of the set), namespaced objects get a namespace, cluster-scoped ones
// lose theirs, server-owned metadata is stripped, the owner annotation is set, and no
// object appears twice. It returns the items in apply order, or every validation error.
func (e *Engine) prepare(set Set, opts ApplyOptions) ([]*item, error) {
	var crds []*unstructured.Unstructured
	for _, o := range set.Objects {
		if o != nil && o.GroupVersionKind().GroupKind() == crdGK {
			crds = append(crds, o)
		}
	}
	scopes := map[schema.GroupVersionKind]scope{}
	seen := make(map[object.ObjMetadata]bool, len(set.Objects))
	items := make([]*item, 0, len(set.Objects))
	var errs []error
	for i, in := range set.Objects {
		origin := ""
		if i < len(set.Origins) {
			origin = set.Origins[i]
		}
		if in == nil || in.GetAPIVersion() == "" || in.GetKind() == "" || in.GetName() == "" {
			errs = append(errs, terminal(fmt.Errorf("object %d: apiVersion, kind and metadata.name are required", i)))
			continue
		}
		u := ownMetadata(in)
		gvk := u.GroupVersionKind()
		sc, ok := scopes[gvk]
		if !ok {
			sc = e.scope(gvk, crds)
			scopes[gvk] = sc
		}
		if sc.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", describeAt(origin, idOf(u)), sc.err))
			continue
		}
		if !sc.namespaced {
			u.SetNamespace("")
		} else if opts.TargetNamespace != "" {
			u.SetNamespace(opts.TargetNamespace)
		} else if u.GetNamespace() == "" {
			if opts.DefaultNamespace == "" {
				errs = append(errs, terminal(fmt.Errorf("%s: namespaced kind %s has no namespace and no default namespace is set",
					describeAt(origin, idOf(u)), gvk.Kind)))
				continue
			}
			u.SetNamespace(opts.DefaultNamespace)
		}
		for _, f := range serverFields {
			unstructured.RemoveNestedField(u.Object, "metadata", f)
		}
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		if set.Inventory.ID != "" { // none: a dry-run without inventory keeps the live owner
			ann[OwnerAnnotation] = set.Inventory.ID
		}
		u.SetAnnotations(ann)
		id := idOf(u)
		if seen[id] {
			errs = append(errs, terminal(fmt.Errorf("%s: duplicate object in the set", describeAt(origin, idOf(u)))))
			continue
		}
		seen[id] = true
		items = append(items, &item{obj: u, id: id, key: id.String(), stage: stageOf(id.GroupKind), pending: sc.pending, origin: origin})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.SliceStable(items, func(i, j int) bool {
		if items[i].stage != items[j].stage {
			return items[i].stage < items[j].stage
		}
		return items[i].key < items[j].key
	})
	return items, nil
}

// ownMetadata returns a copy of in with its own metadata that shares everything else (spec,
// data, ...) with in. The engine changes only the metadata of a desired object (namespace,
// server fields, the owner annotation) and never writes into the rest (a dry-run or a diff
// works on its own deep copy), so a full deep copy of every desired object would only cost
// memory: at 10,000 objects, one more copy of the whole set while Apply runs.
func ownMetadata(in *unstructured.Unstructured) *unstructured.Unstructured {
	obj := make(map[string]any, len(in.Object))
	for k, v := range in.Object {
		obj[k] = v
	}
	if m, ok := in.Object["metadata"].(map[string]any); ok {
		obj["metadata"] = runtime.DeepCopyJSONValue(m)
	}
	return &unstructured.Unstructured{Object: obj}
}

// scope is the resolution of one GroupVersionKind.
type scope struct {
	namespaced bool
	pending    bool // served by a CRD of the set that is not served yet
	err        error
}

// scope resolves gvk through the RESTMapper (which re-discovers on a miss), then through
// the CRDs of the set. A discovery failure is transient; an unknown kind is terminal.
func (e *Engine) scope(gvk schema.GroupVersionKind, crds []*unstructured.Unstructured) scope {
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return scope{namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	}
	if !meta.IsNoMatchError(err) {
		return scope{err: fmt.Errorf("resolve kind %s: %w", gvk, err)}
	}
	for _, crd := range crds {
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		if group != gvk.Group || kind != gvk.Kind || !crdServesVersion(crd, gvk.Version) {
			continue
		}
		s, _, _ := unstructured.NestedString(crd.Object, "spec", "scope")
		return scope{namespaced: s != "Cluster", pending: true}
	}
	return scope{err: terminal(&unknownKindError{gvk: gvk, err: err})}
}

// crdServesVersion reports whether crd declares version as served.
func crdServesVersion(crd *unstructured.Unstructured, version string) bool {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, ok := v.(map[string]any)
		if !ok {
			continue
		}
		if name, _ := m["name"].(string); name == version {
			served, _ := m["served"].(bool)
			return served
		}
	}
	return false
}

// byStage splits items (already in apply order) into stages.
func byStage(items []*item) [numStages][]*item {
	var out [numStages][]*item
	for _, it := range items {
		out[it.stage] = append(out[it.stage], it)
	}
	return out
}

// unknownKindError reports a kind the cluster does not serve and no CRD of the set defines.
// Its message names the kind as written (apiVersion and kind), not the mapper's words.
type unknownKindError struct {
	gvk schema.GroupVersionKind
	err error // the RESTMapper's no-match error
}

func (e *unknownKindError) Error() string {
	return fmt.Sprintf("unknown kind %s of apiVersion %s: no CRD in the cluster or in the set defines it (install the CRD first, or add it to the source)",
		e.gvk.Kind, e.gvk.GroupVersion())
}

func (e *unknownKindError) Unwrap() error { return e.err }
