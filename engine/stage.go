package engine

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
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
	// obj is the desired object: an ownMetadata copy (or, handed over, the object itself),
	// normalized, the owner annotation set. nil while an object of a set given as JSON
	// (Set.Docs) is not in use: object decodes and prepares it again from doc.
	obj *unstructured.Unstructured
	doc []byte
	// prep is the preparer that made the item, which prepares its object again from doc.
	prep *preparer
	// namespaced says the kind is namespaced (id.Namespace is set on the object).
	namespaced bool
	// byMeta says the object is ready once it exists (readyOnExistence of the object as
	// applied: with the ignore rules' fields taken from the live object, set by applyOne).
	byMeta bool
	gvk    schema.GroupVersionKind
	id     object.ObjMetadata
	key    string // id.String()
	// pos is where the item is applied: its stage, then its wave and step (order.go).
	pos position
	// deps are the objects of the set this one depends on (DependsOnAnnotation), and
	// external those it depends on that are not in the set: they must exist in the cluster.
	deps, external []object.ObjMetadata
	// origin is where the object was rendered from (Set.Origins), or "".
	origin string
	// pending marks a kind the API server does not serve yet but a CRD of the same set
	// defines: it resolves once that CRD is applied and Established.
	pending bool
	// pendingErr is set when a pending kind did not resolve after its CRD was applied.
	pendingErr error
	// skip names the annotation that disables the object's reconcile (ReconcileAnnotation or
	// Flux's); "" when none does.
	skip string
	// stored says the run's stored inventory (applyRun.old) holds the object.
	stored bool
	// memo is what the watched view's memo recorded of the object when the run first asked
	// (watchedView.memoOf): memoKnown says it had an entry, memoRead that it was asked.
	memo                memoEntry
	memoKnown, memoRead bool
	// hash is the desired object's hash (hashObject), for the memo: set by the watched view.
	hash [sha256.Size]byte
	// ignored says an ApplyOptions.Ignore rule selects the object (ignore.go); kept are the
	// field managers those rules name, whose fields the hand-over leaves to them.
	ignored bool
	kept    []string
}

// annotation returns the annotation key of the item's object, read in place (GetAnnotations
// copies the whole map): prepare gave the object an annotations map of its own, of strings.
func (it *item) annotations() objectAnnotations {
	md, _ := it.obj.Object["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	return stringAnnotations(ann)
}

// annotation is the value of the object's annotation key.
func (it *item) annotation(key string) string {
	md, _ := it.obj.Object["metadata"].(map[string]any)
	ann, _ := md["annotations"].(map[string]any)
	v, _ := ann[key].(string)
	return v
}

// serverFields are metadata fields the server owns; they are never sent with an apply
// (a resourceVersion would turn the apply into an optimistic-lock write).
var serverFields = []string{"resourceVersion", "uid", "creationTimestamp", "generation",
	"managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// stripServerFields removes serverFields from the metadata md.
func stripServerFields(md map[string]any) {
	for _, f := range serverFields {
		delete(md, f)
	}
}

// prepare copies (ownMetadata; in place for the objects handed over, Set.Own) and
// validates the desired objects: every kind resolves (or is
// defined by a CRD of the set), namespaced objects get a namespace, cluster-scoped ones
// lose theirs, server-owned metadata is stripped, the owner annotation is set, and no
// object appears twice. It returns the items in apply order and the desired inventory (their
// IDs, without UIDs), or every validation error.
//
// Items are ordered by position (order.go): stage, then wave and depends-on step, then key;
// ordered says some object carries an ordering annotation. A depends-on cycle is an error.
//
// It runs on every reconcile over the whole set, so each object's fields are read once and
// its metadata copied once (a no-op reconcile of 50,000 objects spent a seventh of its CPU
// here, reading the same fields several times).
func (e *Engine) prepare(set Set, opts ApplyOptions) ([]*item, *inventory.Inventory, error) {
	items, desired, _, err := e.prepareOrdered(set, opts, nil)
	return items, desired, err
}

// prepareOrdered is prepare, saying also whether the set carries ordering annotations; ig
// marks each item while its object is at hand (ignorer.mark). The objects of a set given as
// JSON (Set.Docs) are decoded one at a time and dropped once prepared (the CRDs once the
// items are ordered): the run decodes each again when it applies it (item.object).
func (e *Engine) prepareOrdered(set Set, opts ApplyOptions, ig *ignorer) ([]*item, *inventory.Inventory, bool, error) {
	p := &preparer{e: e, set: set, opts: opts, scopes: map[schema.GroupVersionKind]scope{},
		desired: inventory.NewSized(set.size())}
	// The set's CRDs are looked for only when a kind is unknown to the API server.
	p.crds = sync.OnceValue(func() []*unstructured.Unstructured {
		var crds []*unstructured.Unstructured
		for i := range set.size() {
			if set.Docs != nil && !bytes.Contains(set.Docs[i], []byte(crdGK.Kind)) {
				continue // not a CRD: not decoded
			}
			if o, _ := set.object(i); o != nil && o.GroupVersionKind().GroupKind() == crdGK {
				crds = append(crds, o)
			}
		}
		return crds
	})
	items := make([]*item, 0, set.size())
	var errs []error
	for i := range set.size() {
		in, err := set.object(i)
		if err != nil {
			if o := p.origin(i); o != "" {
				err = fmt.Errorf("%s: %w", o, err)
			}
			errs = append(errs, terminal(fmt.Errorf("object %d: %w", i, err)))
			continue
		}
		it, err := p.item(i, in)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ig.mark(it)
		if it.doc != nil && it.id.GroupKind != crdGK {
			it.obj = nil // decoded again when applied
		}
		items = append(items, it)
	}
	if len(errs) > 0 {
		return nil, nil, false, errors.Join(errs...)
	}
	ordered, err := orderItems(items, opts.TargetNamespace)
	if err != nil {
		return nil, nil, false, err
	}
	for _, it := range items {
		if it.doc != nil {
			it.obj = nil
		}
	}
	// Keys are unique (duplicates were refused above): an unstable sort gives one order.
	slices.SortFunc(items, func(a, b *item) int {
		if c := a.pos.compare(b.pos); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return items, p.desired, ordered, nil
}

// preparer is what prepare shares across the objects of one set.
type preparer struct {
	e       *Engine
	set     Set
	opts    ApplyOptions
	crds    func() []*unstructured.Unstructured // the set's CRDs
	scopes  map[schema.GroupVersionKind]scope   // per kind, resolved once
	desired *inventory.Inventory                // the IDs so far: a second one is a duplicate
}

// object is the i-th object of s: Objects[i], or the decode of Docs[i], the caller's own.
func (s Set) object(i int) (*unstructured.Unstructured, error) {
	if s.Docs == nil {
		return s.Objects[i], nil
	}
	return decodeDoc(s.Docs[i])
}

// decodeDoc decodes one object's JSON as the sources decode a render (utiljson: integers
// stay integers), into maps of its own.
func decodeDoc(doc []byte) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := utiljson.Unmarshal(doc, &obj); err != nil {
		return nil, fmt.Errorf("decode the object: %w", err)
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// origin is where the i-th object of the set was rendered from (Set.Origins), or "".
func (p *preparer) origin(i int) string {
	if i < len(p.set.Origins) {
		return p.set.Origins[i]
	}
	return ""
}

// object is it's desired object as prepare made it: for a set given as JSON, decoded again
// from its document and given the same metadata (namespace, server fields removed, owner
// annotation, cache label). It cannot fail for a document prepare decoded; if it did, the
// error says so.
func (it *item) object() (*unstructured.Unstructured, error) {
	if it.obj != nil {
		return it.obj, nil
	}
	if it.doc == nil {
		return nil, fmt.Errorf("%s: no object", it.key)
	}
	u, err := decodeDoc(it.doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", describeAt(it.origin, it.id), err)
	}
	md := metadataOf(u)
	if md == nil {
		return nil, fmt.Errorf("%s: no metadata", describeAt(it.origin, it.id))
	}
	if it.namespaced {
		md["namespace"] = it.id.Namespace
	} else {
		delete(md, "namespace")
	}
	stripServerFields(md)
	it.prep.ownLabels(md, true)
	it.obj = u
	return u, nil
}

// release ends applyOne's use of it: whether it is ready once it exists is judged on the
// object as applied, then the object of an item of a set given as JSON, and what the
// ignore rules kept of it, are dropped (item.object decodes it again if it is needed); the
// objects handed over as such stay.
func (r *applyRun) release(it *item) {
	if it.obj != nil {
		it.byMeta = readyOnExistence(it.obj) // judged on the live fields the rules left alone
	}
	if it.doc != nil {
		r.ignore.forget(it)
		it.obj = nil
	}
}

// item copies and validates the i-th object of the set, in (prepare).
func (p *preparer) item(i int, in *unstructured.Unstructured) (*item, error) {
	origin := p.origin(i)
	if in == nil {
		return nil, terminal(fmt.Errorf("object %d: apiVersion, kind and metadata.name are required", i))
	}
	apiVersion, kind, name := in.GetAPIVersion(), in.GetKind(), in.GetName()
	if apiVersion == "" || kind == "" || name == "" {
		return nil, terminal(fmt.Errorf("object %d: apiVersion, kind and metadata.name are required", i))
	}
	own := p.set.Docs != nil || i < len(p.set.Own) && p.set.Own[i]
	u, md := in, metadataOf(in)
	if !own {
		u, md = ownMetadata(in)
	}
	gvk := schema.FromAPIVersionAndKind(apiVersion, kind)
	sc, ok := p.scopes[gvk]
	if !ok {
		sc = p.e.scope(gvk, p.crds)
		p.scopes[gvk] = sc
	}
	if sc.err != nil {
		return nil, fmt.Errorf("%s: %w", describeAt(origin, idOf(u)), sc.err)
	}
	ns, err := p.namespace(md, sc.namespaced)
	if err != nil {
		return nil, terminal(fmt.Errorf("%s: namespaced kind %s %w", describeAt(origin, idOf(u)), gvk.Kind, err))
	}
	stripServerFields(md)
	if err := checkStringMaps(md); err != nil {
		return nil, terminal(fmt.Errorf("%s: %w", describeAt(origin, idOf(u)), err))
	}
	skip := p.ownLabels(md, own)
	id := object.ObjMetadata{Namespace: ns, Name: name, GroupKind: gvk.GroupKind()}
	ann, _ := md["annotations"].(map[string]any)
	wave, deps, err := orderOf(ann)
	if err != nil {
		return nil, terminal(fmt.Errorf("%s: %w", describeAt(origin, id), err))
	}
	if !p.desired.AddNew(inventory.Entry{Object: id}) {
		return nil, terminal(fmt.Errorf("%s: duplicate object in the set", describeAt(origin, id)))
	}
	it := &item{obj: u, gvk: gvk, id: id, key: objectKey(id), pos: position{stage: stageOf(id.GroupKind), wave: wave},
		deps: deps, pending: sc.pending, origin: origin, skip: skip, namespaced: sc.namespaced, byMeta: readyOnExistence(u)}
	if p.set.Docs != nil {
		it.doc, it.prep = p.set.Docs[i], p
	}
	return it, nil
}

// errNoNamespace completes the error of a namespaced object without a namespace.
var errNoNamespace = errors.New("has no namespace and no default namespace is set")

// namespace sets the namespace of the object whose metadata is md (its own copy) and returns
// it: none for a cluster-scoped kind, TargetNamespace whatever the object says, else the
// object's own or DefaultNamespace.
func (p *preparer) namespace(md map[string]any, namespaced bool) (string, error) {
	ns, _ := md["namespace"].(string) // as GetNamespace reads it
	switch {
	case !namespaced:
		delete(md, "namespace")
		ns = ""
	case p.opts.TargetNamespace != "":
		ns = p.opts.TargetNamespace
		md["namespace"] = ns
	case ns == "":
		if p.opts.DefaultNamespace == "" {
			return "", errNoNamespace
		}
		ns = p.opts.DefaultNamespace
		md["namespace"] = ns
	}
	return ns, nil
}

// ownLabels gives the object whose metadata is md (its own copy, or, inPlace, the object
// handed over with its maps: Set.Own; labels and annotations checked) our owner annotation
// and the label of the engine's watch cache, and reports the annotation that disables the
// object's reconcile, if one does (objectAnnotations).
func (p *preparer) ownLabels(md map[string]any, inPlace bool) (skip string) {
	// The annotations (checked: strings or null) with our owner annotation, null values as
	// "" as GetAnnotations reads them, set directly (SetAnnotations would copy them twice
	// more): in a map of our own unless the object was handed over.
	ann, _ := md["annotations"].(map[string]any)
	skip = stringAnnotations(ann).reconcileDisabled()
	own := ann
	if !inPlace || own == nil {
		own = make(map[string]any, len(ann)+1)
	}
	for k, v := range ann {
		if v == nil {
			v = ""
		}
		own[k] = v
	}
	if p.set.Inventory.ID != "" { // none: a dry-run without inventory keeps the live owner
		own[OwnerAnnotation] = p.set.Inventory.ID
	}
	md["annotations"] = own
	if sc := p.e.opts.Scope; sc.Key != "" && p.e.cache != nil && p.set.Inventory.ID != "" {
		// The label of the engine's watch cache (Options.Scope), over the set's own, which
		// are kept as written (checkStringMaps refused a value that is not a string;
		// GetLabels would read such a map as none, dropping them all).
		switch lab := md["labels"].(type) {
		case nil:
			md["labels"] = map[string]any{sc.Key: sc.Value}
		case map[string]any:
			l := lab
			if !inPlace {
				l = make(map[string]any, len(lab)+1)
				maps.Copy(l, lab)
			}
			l[sc.Key] = sc.Value
			md["labels"] = l
		}
	}
	return skip
}

// stringAnnotations are the string values of ann (checkStringMaps refused any other).
func stringAnnotations(ann map[string]any) objectAnnotations {
	out := make(objectAnnotations, len(ann))
	for k, v := range ann {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// checkStringMaps refuses labels or annotations that are not a map of strings (YAML's
// unquoted 1, 1.5 or true as a value, a list instead of a map), naming the field and
// the key. Unstructured's GetLabels and GetAnnotations read such a field as empty, so an
// apply would drop every label or annotation the object had; sent as written, the API
// server refuses it with a 500, which reads as transient. A null value is kept: it reads as "".
func checkStringMaps(md map[string]any) error {
	var errs []error
	for _, field := range []string{"annotations", "labels"} {
		switch m := md[field].(type) {
		case nil:
		case map[string]any:
			var bad []string // rare: every reconcile checks every object, sorted only to report
			for k, v := range m {
				switch v.(type) {
				case nil, string:
				default:
					bad = append(bad, k)
				}
			}
			slices.Sort(bad)
			for _, k := range bad {
				errs = append(errs, fmt.Errorf("metadata.%s.%s: %v is not a string; quote it", field, k, m[k]))
			}
		default:
			errs = append(errs, fmt.Errorf("metadata.%s: not a map of strings", field))
		}
	}
	return errors.Join(errs...)
}

// objectKey is id.String() (ns_name_group_kind, as the inventory stores it), built without
// fmt for the kinds whose names need no escaping (all but RBAC's).
func objectKey(id object.ObjMetadata) string {
	if _, rbac := object.RBACGroupKind[id.GroupKind]; rbac {
		return id.String()
	}
	return id.Namespace + "_" + id.Name + "_" + id.GroupKind.Group + "_" + id.GroupKind.Kind
}

// ownMetadata returns a copy of in with its own metadata map, and that map; everything else
// (spec, data, ..., and the maps inside metadata such as labels) is shared with in. The engine
// changes only top-level fields of a desired object's metadata (namespace, server fields, the
// annotations, which prepare replaces with a map of its own) and never writes into the rest
// (a dry-run or a diff works on its own deep copy), so a full deep copy of every desired
// object would only cost memory: at 10,000 objects, one more copy of the whole set while
// Apply runs. in's metadata must be a map (prepare checked its name).
func ownMetadata(in *unstructured.Unstructured) (*unstructured.Unstructured, map[string]any) {
	obj := make(map[string]any, len(in.Object))
	for k, v := range in.Object {
		obj[k] = v
	}
	src, _ := in.Object["metadata"].(map[string]any)
	md := make(map[string]any, len(src)+1)
	for k, v := range src {
		md[k] = v
	}
	obj["metadata"] = md
	return &unstructured.Unstructured{Object: obj}, md
}

// metadataOf is in's metadata map (prepare checked its name, so it is one).
func metadataOf(in *unstructured.Unstructured) map[string]any {
	md, _ := in.Object["metadata"].(map[string]any)
	return md
}

// scope is the resolution of one GroupVersionKind.
type scope struct {
	namespaced bool
	pending    bool // served by a CRD of the set that is not served yet
	err        error
}

// scope resolves gvk through the RESTMapper (which re-discovers on a miss), then through
// the CRDs of the set. A discovery failure is transient; an unknown kind is terminal.
func (e *Engine) scope(gvk schema.GroupVersionKind, crds func() []*unstructured.Unstructured) scope {
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err == nil {
		return scope{namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	}
	if !meta.IsNoMatchError(err) {
		return scope{err: fmt.Errorf("resolve kind %s: %w", gvk, err)}
	}
	for _, crd := range crds() {
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
