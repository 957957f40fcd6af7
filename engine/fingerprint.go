package engine

import (
	"bytes"
	"hash/fnv"
	"slices"
	"strconv"
	"sync"

	"github.com/fluxcd/pkg/ssa/jsondiff"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// The watch cache keeps objects without their managedFields, which are most of an object's
// metadata. What it keeps of them is a fingerprint of the field sets the apply managers own
// (Converge's among them), and only on the metadata objects the change handler reads. It is
// what tells drift from the changes of other controllers: a field Converge's apply owns can
// only change value by being taken from it (an update, or a forced apply, moves it to whoever
// wrote it; a removal drops it), which changes Converge's set. An autoscaler writing
// spec.replicas that the source does not set, or a controller adding a field the apply never
// owned, leaves every apply manager's set as it was, and wakes nobody.
//
// That holds while Converge owns every field its source sets: a field taken and set back
// before the reconcile stays the other manager's, so the run that finds it so applies once to
// own it again (regains, apply_one.go). What the fingerprint cannot see, and the Sync's
// interval finds: a mutating webhook rewriting a field during someone else's update (the
// change is not recorded in managedFields), and a writer that rewrites managedFields itself.
//
// The fingerprint is blind to what the ignore rules of the object's owner leave alone
// (IgnoredFields: the rules of the last run of the inventory the owner annotation names that
// this engine applied, for the objects a rule's target selects). Each apply entry's field
// set is hashed without the rules' paths and everything under them, and an entry left with
// no field is not hashed: another manager taking an ignored field from Converge's apply (its
// first update of it), or applying nothing but ignored fields, changes no hashed set. The
// apply entries of the managers a rule names are not hashed at all. A path is matched by
// field names only (a numeric token is a map key, as in /data/0): one through a list index
// names no element of a key-based field set, so it leaves nothing out, and a change under it
// wakes a reconcile as one of any field does.
// Any other field an apply owns still counts, so its change wakes as before. What may still
// wake once: the first time a manager a rule names takes a field from Converge's apply (an
// HPA's update of spec.replicas through the scale subresource), since whose fields a manager
// will take is known only once it has; the run it wakes leaves that field out of the apply,
// and later changes wake nothing. So may the first change of an object after its owner's
// rules changed or were first registered (the first run of the inventory since the engine
// started), or after its labels or annotations a target selects by changed: its old
// fingerprint was taken under other rules. An object is fingerprinted whole when its owner has no
// rules, when no rule selects it, and when its kind is not known.
//
// The fingerprint lives in metadata.selfLink, which the API server has not filled since
// Kubernetes 1.20 and which nothing reads from the cache: 13 bytes per object, against
// about 140 for a managedFields entry kept for the purpose (1.4 MB at 10,000 objects).

// stripManagedFields is the watch cache's transform: managedFields dropped from every
// object, and their apply managers' fingerprint kept on metadata objects (appliedSets),
// blind to what the ignore rules f holds for the object's owner leave alone (IgnoredFields;
// a nil f holds none).
func (f *IgnoredFields) stripManagedFields(in any) (any, error) {
	if pm, ok := in.(*metav1.PartialObjectMetadata); ok {
		// An object seen again (the transform may run twice on one) is left as it is: its
		// fingerprint is already kept, and writing it again would race with its readers.
		if pm.ManagedFields != nil {
			paths, managers := f.leftAlone(pm)
			pm.SelfLink = fingerprintApplied(pm.ManagedFields, paths, managers)
			pm.ManagedFields = nil
		}
		return in, nil
	}
	if obj, err := meta.Accessor(in); err == nil && obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return in, nil
}

// appliedSets is the fingerprint stripManagedFields kept of o's apply managers' field sets.
func appliedSets(o metav1.Object) string {
	return o.GetSelfLink()
}

// fingerprintApplied hashes the managers, subresources and field sets of the Apply entries
// of entries, in any order; "" when there is none. With ignored paths or managers (from
// IgnoredFields.leftAlone), each entry's field set is hashed without the ignored paths and
// everything under them, an entry left with no field is not hashed, and the entries of the
// managers named are not hashed at all; an entry whose fields cannot be read is hashed as it
// is.
func fingerprintApplied(entries []metav1.ManagedFieldsEntry, ignored *fieldpath.Set, managers []string) string {
	var sums []uint64
	for _, mf := range entries {
		if mf.Operation != metav1.ManagedFieldsOperationApply || len(managers) > 0 && namedIn(mf.Manager, managers) {
			continue
		}
		var fields []byte
		if mf.FieldsV1 != nil {
			fields = mf.FieldsV1.Raw
		}
		if ignored != nil && fields != nil {
			set := &fieldpath.Set{}
			if err := set.FromJSON(bytes.NewReader(fields)); err == nil {
				set = set.RecursiveDifference(ignored)
				if set.Empty() {
					continue
				}
				if b, err := set.ToJSON(); err == nil {
					fields = b
				}
			}
		}
		h := fnv.New64a()
		h.Write([]byte(mf.Manager))
		h.Write([]byte{0})
		h.Write([]byte(mf.Subresource))
		h.Write([]byte{0})
		h.Write(fields)
		sums = append(sums, h.Sum64())
	}
	if len(sums) == 0 {
		return ""
	}
	slices.Sort(sums)
	h := fnv.New64a()
	for _, s := range sums {
		h.Write(strconv.AppendUint(nil, s, 16))
		h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

// IgnoredFields holds, per inventory ID (the owner annotation's value), the ignore rules of
// the last run of it applied with some: what the fingerprint of its objects is blind to.
// Only engine runs register an inventory, and Delete and Abandon drop it with the
// inventory, as quietRuns does: an owner annotation anybody writes on an object in the
// cache's scope adds nothing. A rule whose target selects by labels, annotations or API
// version is left out: the run selects the desired object, the fingerprint would the live
// one, and the two may differ (a label added by hand, the version the cache watches), so
// the fingerprint could be blind to a field the run applies. A nil IgnoredFields holds
// nothing.
type IgnoredFields struct {
	mu    sync.RWMutex
	rules map[string]*ownerRules // an entry is replaced, never modified, but for its memo
}

// maxFingerprintRules is how many of an inventory's rules the fingerprint is blind to, the
// Sync API's bound on spec.ignore: a rule past them leaves nothing out, so a change of its
// fields wakes a reconcile as one of any field does.
const maxFingerprintRules = 64

// ownerRules are one inventory's rules, and the paths and managers each combination of
// them that selects an object leaves alone, made once (a union of up to 64 rules' paths
// would otherwise be made at every event).
type ownerRules struct {
	rules []fingerprintRule
	mu    sync.Mutex
	made  map[uint64]leftAloneSet // by the bits (1<<index) of the rules that select an object
}

// leftAloneSet is what some rules leave alone together.
type leftAloneSet struct {
	paths    *fieldpath.Set // nil: none
	managers []string
}

// fingerprintRule is an ignore rule as the fingerprint uses it: its target, its paths as a
// set of fieldpath paths, and the managers it names.
type fingerprintRule struct {
	sel      *jsondiff.SelectorRegex
	paths    *fieldpath.Set // nil: none
	managers []string
}

// NewIgnoredFields returns an empty registry, for Options.IgnoredFields.
func NewIgnoredFields() *IgnoredFields {
	return &IgnoredFields{rules: map[string]*ownerRules{}}
}

// set keeps the rules of ig, a run of inventory id, for the fingerprint of id's objects, or
// forgets id's when ig has none the fingerprint can use.
func (f *IgnoredFields) set(id string, ig *ignorer) {
	if f == nil || id == "" {
		return
	}
	var rules []fingerprintRule
	if ig != nil {
		for _, r := range ig.rules {
			if r.byMetadata {
				continue
			}
			if len(rules) == maxFingerprintRules {
				break // one bit each (ownerRules.made); the fields of the rest count as any
			}
			fr := fingerprintRule{sel: r.sel, managers: r.managers}
			if len(r.paths) > 0 {
				fr.paths = &fieldpath.Set{}
				for _, p := range r.paths {
					fr.paths.Insert(pointerFieldPath(p))
				}
			}
			rules = append(rules, fr)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(rules) == 0 {
		delete(f.rules, id)
		return
	}
	f.rules[id] = &ownerRules{rules: rules, made: map[uint64]leftAloneSet{}}
}

// drop forgets the inventory id (Delete, Abandon).
func (f *IgnoredFields) drop(id string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.rules, id)
}

// ignoredFields is the registry of ignore rules the engine's runs set (fingerprint.go):
// Options.IgnoredFields, else its watch cache's; nil with neither.
func (e *Engine) ignoredFields() *IgnoredFields {
	switch {
	case e.opts.IgnoredFields != nil:
		return e.opts.IgnoredFields
	case e.cache != nil:
		return e.cache.ignored
	}
	return nil
}

// leftAlone is what the rules of pm's owner that select pm leave alone: the ignored paths
// (nil: none) and the managers named. Nothing when its owner has no rules, or pm does not
// say its kind (the metadata informers fill it in: controller-runtime sets it on every
// object it lists and watches), which fingerprints it whole.
func (f *IgnoredFields) leftAlone(pm *metav1.PartialObjectMetadata) (paths *fieldpath.Set, managers []string) {
	if f == nil {
		return nil, nil
	}
	owner := pm.Annotations[OwnerAnnotation]
	if owner == "" {
		return nil, nil
	}
	f.mu.RLock()
	or := f.rules[owner]
	f.mu.RUnlock()
	if or == nil || pm.Kind == "" {
		return nil, nil
	}
	gvk := pm.GroupVersionKind()
	var bits uint64
	for i, r := range or.rules {
		if selectsMeta(r.sel, gvk, pm) {
			bits |= 1 << i
		}
	}
	if bits == 0 {
		return nil, nil
	}
	or.mu.Lock()
	defer or.mu.Unlock()
	if got, ok := or.made[bits]; ok {
		return got.paths, got.managers
	}
	var s leftAloneSet
	for i, r := range or.rules {
		if bits&(1<<i) == 0 {
			continue
		}
		s.managers = append(s.managers, r.managers...)
		switch {
		case r.paths == nil:
		case s.paths == nil:
			s.paths = r.paths
		default:
			s.paths = s.paths.Union(r.paths)
		}
	}
	or.made[bits] = s
	return s.paths, s.managers
}

// pointerFieldPath is the fieldpath path of the JSON pointer p, each token a field name. A
// token that is a list index names no element of a list in a field set (its elements are
// keys, values or positions, never field names): removing such a path from a set removes
// nothing, so a rule's path through a list is not left out of the fingerprint, and a change
// under it wakes a reconcile as if it were not ignored.
func pointerFieldPath(p string) fieldpath.Path {
	toks := pointerTokens(p)
	out := make(fieldpath.Path, len(toks))
	for i := range toks {
		out[i] = fieldpath.PathElement{FieldName: &toks[i]}
	}
	return out
}
