package engine

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// DriftOptions tell a run whether what it would change is drift: an out-of-band change of
// objects that still hold the desired set last applied, rather than a new desired set. Only
// the owner knows which it is (a Sync at the revision and generation it last applied
// successfully): the engine cannot tell a new commit from an edit of the live object.
type DriftOptions struct {
	// Detect says the set is the one last applied: every object the run finds it would
	// change, or finds missing although the stored inventory holds it, is listed in
	// Result.Drift. A run without it (a new revision, a new spec) applies as usual and
	// reports nothing.
	Detect bool
	// Report, with Detect, selects the drifted objects that are only reported: judged (a
	// server-side dry-run) but never sent, created or recreated (DriftedObject.Corrected
	// false), so the edit stays. Nil corrects every drifted object (Corrected true once its
	// apply succeeded).
	Report func(object.ObjMetadata) bool
}

// reports reports whether the run only reports drift of it, never corrects it.
func (d DriftOptions) reports(it *item) bool {
	return d.Detect && d.Report != nil && d.Report(it.id)
}

// DriftedObject is one object of the set that differs from what the run last applied, by an
// out-of-band change (ApplyOptions.Drift).
type DriftedObject struct {
	// Object identifies the object.
	Object object.ObjMetadata
	// Origin is where the object was rendered from (Set.Origins), "" when unknown.
	Origin string
	// Missing says the object was deleted: the stored inventory holds it, the API server
	// has none.
	Missing bool
	// Fields are where an apply would change the live object, at most MaxDriftFields.
	Fields []DriftedField
	// MoreFields counts the differing fields left out of Fields.
	MoreFields int
	// Corrected says the run applied the object again (created it, or took the fields
	// back); false when it only reported it (DriftOptions.Report) or the apply failed.
	Corrected bool
}

// DriftedField is one field of a drifted object.
type DriftedField struct {
	// Path names the field: "spec.replicas", "metadata.labels.team",
	// "spec.template.spec.containers[name=web].image"; a list whose elements cannot be
	// matched by name is named as a whole, or by index when only elements changed.
	Path string
	// Manager is the field manager that owns the field in the live object now, from its
	// managedFields (the newest entry other than the run's own manager); "" when none does
	// (the field was removed, or its owner is unknown).
	Manager string
}

// MaxDriftFields bounds DriftedObject.Fields.
const MaxDriftFields = 10

// driftOf describes how dry, the server's answer to applying the desired object over live,
// differs from live: the fields that differ (labels, annotations and everything outside
// metadata and status, as drifted compares them) and that desired sets, each with the
// manager that owns it in managed (live before the hand-over of its fields, which renames
// their managers); a field live does not have (removed) has none. manager is the run's own
// field manager, never named as an owner. more counts the differing fields after the first
// MaxDriftFields, exactly.
//
// The cost is one walk of the three objects, linear in their size (driftWalk): a named list
// of 16,000 differing elements or a nesting 4,000 deep is one pass, not one per field.
func driftOf(desired, live, dry, managed *unstructured.Unstructured, manager string) (fields []DriftedField, more int) {
	w := walkDriftOf(desired, live, dry)
	if len(w.paths) == 0 {
		return nil, w.more
	}
	owners := managersOf(managed, manager)
	for i, p := range w.paths {
		f := DriftedField{Path: p.String()}
		if w.present[i] {
			f.Manager = owners.owner(p)
		}
		fields = append(fields, f)
	}
	return fields, w.more
}

// walkDriftOf walks live and dry, with desired alongside, once.
func walkDriftOf(desired, live, dry *unstructured.Unstructured) *driftWalk {
	w := &driftWalk{}
	w.walk(driftBody(live), driftBody(dry), true, declared{v: declaredBody(desired)}, nil)
	return w
}

// declaredBody is the driftBody of desired as the server stores it: a Secret's
// stringData.<k> is written to data.<k> (stringData is never read back), so data.<k> counts
// as set, and is reported as data.<k>, the field that changes and whose manager is known.
func declaredBody(desired *unstructured.Unstructured) map[string]any {
	body := driftBody(desired)
	gvk := desired.GroupVersionKind()
	sd, ok := body["stringData"].(map[string]any)
	data, isMap := body["data"].(map[string]any)
	if gvk.Group != "" || gvk.Kind != "Secret" || !ok || len(sd) == 0 || !isMap && body["data"] != nil {
		return body
	}
	data = maps.Clone(data)
	if data == nil {
		data = make(map[string]any, len(sd))
	}
	maps.Copy(data, sd) // stringData wins over data, as the API server does
	out := maps.Clone(body)
	out["data"] = data
	return out
}

// declared is where the desired object stands at a step of a walk: v, its value there, or
// all when it sets a map or list above as a whole (an atomic value), so everything below.
// An apply changes only what desired sets: a difference elsewhere is the server's own
// change between the read and the dry-run (a controller's annotation), not drift.
type declared struct {
	v   any
	all bool
}

// container is d's value as a container of type T; set says whether d, not being one,
// still declares everything below (a non-nil value set as a whole).
func container[T any](d declared) (c T, ok, set bool) {
	if d.all {
		return c, false, true
	}
	c, ok = d.v.(T)
	return c, ok, !ok && d.v != nil
}

// field is desired at the map key k below d; ok is false when it does not set it.
func (d declared) field(k string) (_ declared, ok bool) {
	m, isMap, set := container[map[string]any](d)
	if !isMap {
		return declared{all: true}, set
	}
	v, ok := m[k]
	return declared{v: v}, ok
}

// index is desired at the list position i below d.
func (d declared) index(i int) (_ declared, ok bool) {
	l, isList, set := container[[]any](d)
	if !isList {
		return declared{all: true}, set
	}
	if i >= len(l) {
		return declared{}, false
	}
	return declared{v: l[i]}, true
}

// driftBody is what drifted compares of u, in one tree: labels, annotations, and u's body.
func driftBody(u *unstructured.Unstructured) map[string]any {
	body := bodyOf(u).Object
	md := map[string]any{}
	if l, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "labels"); ok {
		md["labels"] = l
	}
	if a, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "metadata", "annotations"); ok {
		md["annotations"] = a
	}
	out := make(map[string]any, len(body)+1)
	maps.Copy(out, body)
	if len(md) > 0 {
		out["metadata"] = md
	}
	return out
}

// driftStep is one step of a driftPath: a field name, a list element (item, matched by its
// name), or a list index.
type driftStep struct {
	field string
	item  map[string]any // a list element matched by its "name"
	index int            // a list element by position, when item and field are unset
	isIdx bool
}

// driftPath is the path of a differing field.
type driftPath []driftStep

// String is the path as users read it: spec.template.spec.containers[name=web].image.
func (p driftPath) String() string {
	var b strings.Builder
	for i, s := range p {
		switch {
		case s.item != nil:
			fmt.Fprintf(&b, "[name=%v]", s.item["name"])
		case s.isIdx:
			fmt.Fprintf(&b, "[%d]", s.index)
		default:
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.field)
		}
	}
	return b.String()
}

// driftWalk is one walk of live and dry with the desired object alongside. It visits each
// node of live and dry once, compares only scalars (and values of different types), indexes
// each named list once (live, dry and desired), and skips every subtree desired does not
// set: its work, steps, is linear in the size of the objects.
type driftWalk struct {
	paths   []driftPath // the first MaxDriftFields differing fields desired sets, in a stable order
	present []bool      // whether live has each of paths (false: the field was removed)
	more    int         // the differing fields desired sets after paths
	steps   int         // nodes visited and list elements indexed
}

// walk records each leaf below path where live and dry differ and desired (d) sets, in a
// stable order (map keys sorted). has says whether live has the field at path.
func (w *driftWalk) walk(live, dry any, has bool, d declared, path driftPath) {
	w.steps++
	lm, lok := live.(map[string]any)
	dm, dok := dry.(map[string]any)
	if lok && dok {
		keys := make([]string, 0, len(lm)+len(dm))
		for k := range lm {
			keys = append(keys, k)
		}
		for k := range dm {
			if _, ok := lm[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			dk, ok := d.field(k)
			if !ok {
				continue // desired does not set it
			}
			l, lhas := lm[k]
			w.walk(l, dm[k], lhas, dk, append(path, driftStep{field: k}))
		}
		return
	}
	ll, lok := live.([]any)
	dl, dok := dry.([]any)
	switch {
	case lok && dok && w.list(ll, dl, d, path):
		return
	case lok && dok: // lists that cannot be matched have different lengths: they differ
	case equality.Semantic.DeepEqual(live, dry): // scalars, or values of different types
		return
	}
	w.found(path, has)
}

// found records the differing field path.
func (w *driftWalk) found(path driftPath, has bool) {
	if len(w.paths) < MaxDriftFields {
		w.paths = append(w.paths, slices.Clone(path))
		w.present = append(w.present, has)
		return
	}
	w.more++
}

// list walks two lists element by element when their elements can be matched: by name
// when every element is an object with a distinct name, else by index when both have the
// same length. It reports false when they cannot be matched (the list differs as a whole).
func (w *driftWalk) list(live, dry []any, d declared, path driftPath) bool {
	ln, lok := w.namedItems(live)
	dn, dok := w.namedItems(dry)
	if lok && dok {
		// desired's elements by name, indexed once for the whole list
		want, isList, set := container[[]any](d)
		var wn map[string]map[string]any
		if isList {
			wn, _ = w.namedItems(want)
		}
		names := make([]string, 0, len(ln)+len(dn))
		for _, e := range live {
			names = append(names, fmt.Sprint(e.(map[string]any)["name"]))
		}
		for _, e := range dry {
			if n := fmt.Sprint(e.(map[string]any)["name"]); ln[n] == nil {
				names = append(names, n)
			}
		}
		for _, n := range names {
			de := declared{all: set}
			if isList {
				e, ok := wn[n]
				if !ok {
					continue // desired does not set the element
				}
				de = declared{v: e}
			} else if !set {
				continue
			}
			li, di := ln[n], dn[n]
			item := li
			if item == nil {
				item = di
			}
			var lv, dv any // a missing element is nil, not a nil map
			if li != nil {
				lv = li
			}
			if di != nil {
				dv = di
			}
			w.walk(lv, dv, li != nil, de, append(path, driftStep{item: item}))
		}
		return true
	}
	if len(live) != len(dry) {
		return false
	}
	for i := range live {
		di, ok := d.index(i)
		if ok {
			w.walk(live[i], dry[i], true, di, append(path, driftStep{index: i, isIdx: true}))
		}
	}
	return true
}

// namedItems indexes l by the "name" of its elements; ok is false when an element is not an
// object with a string name, or two share one.
func (w *driftWalk) namedItems(l []any) (map[string]map[string]any, bool) {
	out := make(map[string]map[string]any, len(l))
	for _, e := range l {
		w.steps++
		m, ok := e.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := m["name"].(string)
		if !ok || out[n] != nil {
			return nil, false
		}
		out[n] = m
	}
	return out, len(l) > 0
}

// fieldOwners are the managedFields entries of a live object other than the run's own, each
// with the paths it owns, newest first.
type fieldOwners []fieldOwner

type fieldOwner struct {
	manager string
	set     *fieldpath.Set
}

// managersOf reads the managedFields of live, leaving out manager's entries. Entries of a
// subresource stay: `kubectl scale` owns spec.replicas through the scale subresource, and a
// status entry owns only status, which drift never names.
func managersOf(live *unstructured.Unstructured, manager string) fieldOwners {
	type entry struct {
		fieldOwner
		at metav1.Time
		i  int
	}
	var entries []entry
	for i, mf := range live.GetManagedFields() {
		if mf.Manager == manager || mf.FieldsV1 == nil {
			continue
		}
		e := entry{fieldOwner: fieldOwner{manager: mf.Manager, set: fieldSet(mf.FieldsV1.Raw)}, i: i}
		if mf.Time != nil {
			e.at = *mf.Time
		}
		entries = append(entries, e)
	}
	sort.SliceStable(entries, func(a, b int) bool {
		if !entries[a].at.Equal(&entries[b].at) {
			return entries[b].at.Before(&entries[a].at)
		}
		return entries[a].i > entries[b].i
	})
	out := make(fieldOwners, len(entries))
	for i, e := range entries {
		out[i] = e.fieldOwner
	}
	return out
}

// owner is the newest manager that owns p or a field below it; failing that, the newest
// that owns a field above it (an atomic map or list, or the list element, as a whole). Each
// set is searched along p only, never listed whole.
func (o fieldOwners) owner(p driftPath) string {
	for _, above := range []bool{false, true} {
		for _, m := range o {
			if len(p) > 0 && holds(m.set, p, above) {
				return m.manager
			}
		}
	}
	return ""
}

// holds reports whether s holds p or a path below it, or with above a proper prefix of p.
func holds(s *fieldpath.Set, p driftPath, above bool) bool {
	last := len(p) == 1
	if above != last { // a member at p's last step is p itself; one above it, a prefix
		for pe := range s.Members.All() {
			if p[0].matches(pe) {
				return true
			}
		}
	}
	for pe := range s.Children.All() {
		if !p[0].matches(pe) {
			continue
		}
		child, _ := s.Children.Get(pe)
		if last && !above && !child.Empty() || !last && holds(child, p[1:], above) {
			return true
		}
	}
	return false
}

// matches reports whether the path element e (managedFields) names the step s.
func (s driftStep) matches(e fieldpath.PathElement) bool {
	switch {
	case s.item != nil:
		if e.Key == nil {
			return false
		}
		for _, k := range *e.Key {
			v, ok := s.item[k.Name]
			if !ok || !value.Equals(value.NewValueInterface(v), k.Value) {
				return false
			}
		}
		return true
	case s.isIdx:
		return e.Index != nil && *e.Index == s.index
	default:
		return e.FieldName != nil && *e.FieldName == s.field
	}
}

// Messages of drift that is only reported.
const (
	msgDriftReported = "drifted; reported, not corrected (drift policy Report)"
	msgMissingReport = "deleted out of band; reported, not recreated (drift policy Report)"
)

// reported is out for an object whose drift is only reported: skipped (not applied), tracked
// and waited for at live, and not remembered (no resourceVersion for the memo), so that every
// run judges it again until the drift ends or is corrected. why overrides the message.
func reported(out outcome, live metav1.Object, why string) outcome {
	out = unchanged(out, live)
	out.rv = ""
	out.change.Action, out.change.Message = ActionSkipped, msgDriftReported
	if why != "" {
		out.change.Message = msgDriftReported + ": " + why
	}
	return out
}

// missing decides an object the stored inventory holds and the API server says is gone,
// under a run that detects drift (done), out already holding its drift: reported, not
// recreated, when the run only reports its drift; otherwise it is created as usual (not
// done), and reported as corrected.
func (r *applyRun) missing(it *item, out outcome) (_ outcome, done bool) {
	if !r.opts.Drift.reports(it) {
		return out, false
	}
	out.change.Action, out.change.Message = ActionSkipped, msgMissingReport
	out.uid = r.old.UID(it.id)
	return out, true
}
