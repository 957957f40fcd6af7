package engine

import (
	"bytes"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/converge-dev/converge/inventory"
)

// Who owns an ignored field. An ignored field is left out of the apply when another field
// manager owns it in the live object and the run's apply does not: the apply then neither
// sets nor takes it, so the other manager keeps it alone, and a change it makes later (an
// HPA scaling through the scale subresource) leaves Converge's managedFields entry as it
// was. Applying it with the live value instead, as for a field nobody else owns, would make
// Converge a co-owner whose entry changes each time the other manager moves the field. A
// field the run's apply owns keeps the live value: leaving it out would delete it when
// nobody else owns it, and otherwise only drop the run's share, a change a dry-run does not
// show, so the object would be dry-run again on every run. (The other manager's next change
// of the field takes it from the run's apply; the run leaves it out from then on.)
//
// Ownership is read from the live object's managedFields, each entry a fieldpath.Set of
// structured-merge-diff, and a path of those sets is found in an unstructured object by its
// elements (locate): a field name is a map key, a key (k:{"name":"web"}) the list element
// whose fields match, found in each object on its own since positions differ, a value (v:)
// the list element equal to it. A positional element (i:) is never followed.

// ownership is who owns what in one live object.
type ownership struct {
	entries []ownedBy
	// ours is what the run's apply owns (its manager's apply entries of the main resource),
	// with what the hand-over is about to give it (the main-resource entries of the managers
	// it takes over): what an apply that leaves a field out removes from the object.
	ours *fieldpath.Set
	// others is what any other manager owns, in any entry (any operation, any subresource).
	others *fieldpath.Set
}

// ownedBy is one managedFields entry of another manager.
type ownedBy struct {
	manager string
	fields  *fieldpath.Set
}

// readOwnership reads live's managedFields for a run whose field manager is manager;
// takesOver says which main-resource entries the run's hand-over gives it. An entry whose
// fields cannot be read owns nothing here: its fields then keep the live value, as before.
func readOwnership(live *unstructured.Unstructured, manager string, takesOver func(string) bool) *ownership {
	o := &ownership{ours: &fieldpath.Set{}, others: &fieldpath.Set{}}
	for _, mf := range live.GetManagedFields() {
		if mf.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(mf.FieldsV1.Raw)); err != nil {
			continue
		}
		switch {
		case mf.Manager == manager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "",
			mf.Subresource == "" && takesOver(mf.Manager) && !ownManager(mf.Manager, manager):
			o.ours = o.ours.Union(set)
		case ownManager(mf.Manager, manager):
			// Converge's own updates (the hand-over's patch) are not another manager's.
		default:
			o.others = o.others.Union(set)
			o.entries = append(o.entries, ownedBy{manager: mf.Manager, fields: set})
		}
	}
	return o
}

// of is what the managers a rule names own (names, or prefixes ending in "*").
func (o *ownership) of(managers []string) *fieldpath.Set {
	out := &fieldpath.Set{}
	for _, e := range o.entries {
		if namedIn(e.manager, managers) {
			out = out.Union(e.fields)
		}
	}
	return out
}

// namedIn reports whether manager is one of names: by name, or by a prefix ending in "*".
func namedIn(manager string, names []string) bool {
	for _, n := range names {
		if prefix, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(manager, prefix) || n == manager {
			return true
		}
	}
	return false
}

// spot is where a fieldpath.Path lies in an unstructured object.
type spot struct {
	tokens []string // its JSON pointer's tokens (unescaped)
	parent any      // the map or list that holds it
	key    string   // its key in parent, a map
	index  int      // its index in parent, a list
	value  any
	// item says it is a list element (a k: or v: path); keyField that it is one of the
	// key fields of the list element that holds it. Neither is ever left out: removing an
	// element would shift the positions ignore paths name, and an element without its key
	// cannot be applied.
	item, keyField bool
}

// locate finds p in obj; false when obj does not set it, or p has a positional element.
func (x *elements) locate(obj map[string]any, p fieldpath.Path) (spot, bool) {
	var s spot
	var cur any = obj
	for i, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return spot{}, false
			}
			v, ok := m[*pe.FieldName]
			if !ok {
				return spot{}, false
			}
			s = spot{tokens: append(s.tokens, *pe.FieldName), parent: m, key: *pe.FieldName, value: v}
			s.keyField = i > 0 && p[i-1].Key != nil && hasKeyField(*p[i-1].Key, *pe.FieldName)
		case pe.Key != nil || pe.Value != nil:
			l, ok := cur.([]any)
			if !ok {
				return spot{}, false
			}
			idx := x.match(l, pe)
			if idx < 0 {
				return spot{}, false
			}
			s = spot{tokens: append(s.tokens, strconv.Itoa(idx)), parent: l, index: idx, value: l[idx], item: true}
		default:
			return spot{}, false
		}
		cur = s.value
	}
	return s, len(p) > 0
}

// hasKeyField reports whether key names the field name.
func hasKeyField(key value.FieldList, name string) bool {
	for _, f := range key {
		if f.Name == name {
			return true
		}
	}
	return false
}

// pointer is the JSON pointer of s.
func (s spot) pointer() string {
	var b strings.Builder
	for _, t := range s.tokens {
		b.WriteByte('/')
		b.WriteString(inventory.PointerToken(t))
	}
	return b.String()
}

// leaveOut removes s from obj, the object that holds it, unless it is a list element or a
// key field (see spot), and then each map above it that this left empty, up to the nearest
// list element: an empty map an apply sends is a field it owns (data: {} of a ConfigMap
// whose one key another manager keeps), which would keep the run's judgement from trusting
// the object unchanged.
func (s spot) leaveOut(obj map[string]any) {
	m, ok := s.parent.(map[string]any)
	if !ok || s.item || s.keyField {
		return
	}
	delete(m, s.key)
	for n := len(s.tokens) - 1; n > 0 && len(m) == 0; n-- {
		var up any = obj
		for _, t := range s.tokens[:n-1] {
			if up, ok = child(up, t); !ok {
				return
			}
		}
		if m, ok = up.(map[string]any); !ok {
			return
		}
		delete(m, s.tokens[n-1])
	}
}

// set replaces the value at s.
func (s spot) set(v any) {
	switch c := s.parent.(type) {
	case map[string]any:
		c[s.key] = v
	case []any:
		c[s.index] = v
	}
}

// under reports whether the JSON pointer p is one of paths or lies under one.
func under(p string, paths []string) bool {
	for _, q := range paths {
		if p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}
