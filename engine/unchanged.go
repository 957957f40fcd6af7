package engine

import (
	"encoding/json"
	"math"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// appliedAsDesired reports whether a server-side apply of desired by manager would leave
// live exactly as it is, judged from live alone: no dry-run. It is how an engine that has no
// memo of an object (a new process after a restart, a new owner after a handover, the CLI)
// trusts an unchanged object after reading it with a LIST, instead of dry-running it.
//
// What was applied is remembered across processes by the API server itself, in live's
// managedFields: the entry of manager's server-side apply lists exactly the fields its last
// apply sent (fieldsV1; a scalar, or an atomic list or map as a whole, is a leaf), and the
// API server keeps that list true. An apply of desired leaves live as it is when:
//
//  1. manager's apply entry owns no field that desired lacks: otherwise the apply removes it
//     (a field a former revision set);
//  2. every field of desired that manager owns has, in live, exactly the desired value: a
//     scalar is equal, an atomic list or map (a leaf of fieldsV1) is equal as a whole (an
//     apply replaces it, so a subset is not enough), a granular map or list is compared
//     field by field and element by element (an associative list's elements matched by
//     their keys, in the same order, with as many live elements as desired ones);
//  3. every field of desired that manager does not own is a scalar with the desired value
//     in live: the apply only takes its ownership back (a value that someone else's apply
//     set equal, or the owner annotation a migration rewrote). A map or list that manager
//     does not own may hide more than desired shows (another manager's atomic value), so it
//     is not trusted.
//
// Fields outside desired that others own (a controller's annotation, status, a label someone
// added) are not touched by the apply, so they do not matter; fields nobody owns are
// defaults, kept too. An out-of-band edit is therefore always found: a plain update (kubectl
// edit, scale, patch) of a field manager owns moves the field to the updater (3 then compares
// its value, or refuses a map or list), another manager's forced apply likewise, an update
// that removes a field leaves desired's value missing (2), and even a write that keeps
// manager's name (an apply as "converge", forged managedFields) must leave every value of
// desired in place and add nothing to manager's fields to pass. What an apply would still
// change is only what the server adds by itself (defaults, mutating webhooks), and the
// in-process memo trusts that just as much: the same desired object applied again gives the
// same object.
//
// Whenever the judgment is unsure it answers false and the caller dry-runs, as before: no
// single apply entry of manager at desired's apiVersion, an object being deleted, fieldsV1
// it cannot read, positional list keys (i:), an element key it cannot match, a list in
// another order, a Secret's stringData (not stored as such), a value the server normalizes
// ("0.5" CPU stored as "500m"), a field a mutating webhook added under our apply. The one
// default it knows is the protocol of a port ("TCP"), which the API server writes into the
// key of the port's element.
//
// Why not remember more ourselves. A hash of the applied object in an annotation would
// change every object (a write each when this version first runs, a line in every diff) and
// could still not tell whether the object was edited after the apply. The resourceVersion
// after each apply, kept per entry in the inventory, would cost an inventory write per run
// that changes anything, grow the inventory ConfigMap (1 MiB at most) by every entry, and be
// voided by every status update a controller makes. managedFields already hold what our
// apply owns, kept true by the API server on every write, by anyone, at no cost; and the
// LIST that reads them is the one the survey takes anyway (one per kind and namespace).
//
// A listed object is judged as of its LIST, as a dry-run judges it as of the dry-run: an
// edit made later is found by the next run (in watch mode, the edit's watch event makes the
// memo miss). Ownership is decided before, on the same API server answer (mayTakeOver).
func appliedAsDesired(desired, live *unstructured.Unstructured, manager string) bool {
	return (&elements{}).appliedAsDesired(desired, live, manager)
}

// appliedAsDesired is appliedAsDesired finding list elements through x: each list is indexed
// once, so the judgment is linear in the objects, not in the square of their longest list.
func (x *elements) appliedAsDesired(desired, live *unstructured.Unstructured, manager string) bool {
	if live.GetDeletionTimestamp() != nil || desired.GetAPIVersion() != live.GetAPIVersion() ||
		desired.GetKind() != live.GetKind() || desired.GetName() != live.GetName() ||
		desired.GetNamespace() != live.GetNamespace() {
		return false
	}
	var owned map[string]any
	n := 0
	for _, mf := range live.GetManagedFields() {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.Subresource != "" {
			continue
		}
		n++
		if mf.APIVersion != desired.GetAPIVersion() || mf.FieldsType != "FieldsV1" || mf.FieldsV1 == nil ||
			json.Unmarshal(mf.FieldsV1.Raw, &owned) != nil {
			return false
		}
	}
	if n != 1 || owned == nil {
		return false
	}
	return x.sameMap(desired.Object, live.Object, owned, levelTop)
}

// Levels of sameMap: the fields that identify an object (apiVersion and kind at the top,
// name and namespace in metadata) are compared by appliedAsDesired and are not fields of
// fieldsV1.
const (
	levelTop = iota
	levelMetadata
	levelBody
)

func skipped(level int, k string) bool {
	switch level {
	case levelTop:
		return k == "apiVersion" || k == "kind"
	case levelMetadata:
		return k == "name" || k == "namespace"
	}
	return false
}

// sameMap checks a granular map: d desired, l live, t its node of fieldsV1.
func (x *elements) sameMap(d, l, t map[string]any, level int) bool {
	for k := range t { // 1: nothing owned that desired lacks
		if k == "." {
			continue
		}
		name, ok := strings.CutPrefix(k, "f:")
		if !ok {
			return false
		}
		if _, ok := d[name]; !ok {
			return false
		}
	}
	for k, dv := range d {
		if skipped(level, k) {
			continue
		}
		lv, ok := l[k]
		if !ok {
			return false
		}
		sub, owned := t["f:"+k]
		if !owned && level == levelTop && k == "metadata" {
			sub, owned = map[string]any{".": map[string]any{}}, true // a granular struct, never atomic
		}
		if !owned { // 3
			if !isScalar(dv) || !equalValue(dv, lv) {
				return false
			}
			continue
		}
		child := levelBody
		if level == levelTop && k == "metadata" {
			child = levelMetadata
		}
		if !x.sameValue(dv, lv, sub, child) { // 2
			return false
		}
	}
	return true
}

// sameValue checks one owned field: t is its node of fieldsV1, a leaf ({}: a scalar or an
// atomic value, compared whole) or a granular map or list.
func (x *elements) sameValue(d, l, t any, level int) bool {
	node, ok := t.(map[string]any)
	if !ok {
		return false
	}
	if len(node) == 0 {
		return equalValue(d, l)
	}
	switch d := d.(type) {
	case map[string]any:
		lm, ok := l.(map[string]any)
		return ok && x.sameMap(d, lm, node, level)
	case []any:
		ll, ok := l.([]any)
		return ok && x.sameList(d, ll, node)
	}
	return false
}

// sameList checks a granular list (associative by keys, k:, or a set of scalars, v:): every
// element of d is owned and matched, one for one, with the element of l of the same key at
// the same position. The order is not a field of fieldsV1 (an update that only reorders the
// list leaves managedFields as they were), and an apply may put it back, so a list in
// another order is not trusted.
func (x *elements) sameList(d, l []any, t map[string]any) bool {
	if len(d) != len(l) {
		return false
	}
	usedD, usedL := make([]bool, len(d)), make([]bool, len(l))
	freeD, freeL := func(i int) bool { return !usedD[i] }, func(i int) bool { return !usedL[i] }
	for k, sub := range t {
		if k == "." {
			continue
		}
		var di, li int
		switch {
		case strings.HasPrefix(k, "k:"):
			key, ok := decodeKey(k[2:]).(map[string]any)
			if !ok || len(key) == 0 {
				return false
			}
			di, li = x.keyed(d, key, true, freeD), x.keyed(l, key, false, freeL)
		case strings.HasPrefix(k, "v:"):
			v := decodeKey(k[2:])
			if v == nil {
				return false
			}
			di, li = x.value(d, v, freeD), x.value(l, v, freeL)
		default: // i: (by position) or unknown: not judged
			return false
		}
		if di < 0 || li != di {
			return false
		}
		usedD[di], usedL[li] = true, true
		if !x.sameValue(d[di], l[li], sub, levelBody) {
			return false
		}
	}
	for _, u := range usedD {
		if !u {
			return false
		}
	}
	return true
}

// decodeKey decodes the JSON of a k: or v: key of fieldsV1; nil when it is not JSON.
func decodeKey(s string) any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || dec.More() {
		return nil
	}
	return fromJSONNumbers(v)
}

// fromJSONNumbers turns the json.Numbers of v into int64 or float64, as unstructured holds them.
func fromJSONNumbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case map[string]any:
		for k, x := range v {
			v[k] = fromJSONNumbers(x)
		}
	case []any:
		for i, x := range v {
			v[i] = fromJSONNumbers(x)
		}
	}
	return v
}

// keyMatches reports whether m has the key fields of key; with assumeDefault, a missing
// protocol counts as "TCP".
func keyMatches(m, key map[string]any, assumeDefault bool) bool {
	for f, kv := range key {
		v, ok := m[f]
		if !ok && assumeDefault && f == "protocol" && kv == "TCP" {
			continue
		}
		if !ok || !equalValue(v, kv) {
			return false
		}
	}
	return true
}

// isScalar reports whether v is a JSON scalar (or null).
func isScalar(v any) bool {
	switch v.(type) {
	case nil, string, bool, int, int32, int64, float64:
		return true
	}
	return false
}

// equalValue compares JSON-shaped values exactly; integers of any Go type are equal when
// their values are, and a float equals an integer only when it holds that integer exactly.
// Values of other Go types are never equal (unsure).
func equalValue(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		s, ok := b.(string)
		return ok && a == s
	case bool:
		x, ok := b.(bool)
		return ok && a == x
	case int, int32, int64, float64:
		return equalNumber(a, b)
	case map[string]any:
		m, ok := b.(map[string]any)
		if !ok || len(m) != len(a) {
			return false
		}
		for k, v := range a {
			w, ok := m[k]
			if !ok || !equalValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		l, ok := b.([]any)
		if !ok || len(l) != len(a) {
			return false
		}
		for i := range a {
			if !equalValue(a[i], l[i]) {
				return false
			}
		}
		return true
	}
	return false
}

// equalNumber compares two numbers; false when either is not one.
func equalNumber(a, b any) bool {
	ai, aInt := asInt(a)
	bi, bInt := asInt(b)
	switch {
	case aInt && bInt:
		return ai == bi
	case aInt:
		f, ok := b.(float64)
		return ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 && float64(ai) == f
	case bInt:
		f, ok := a.(float64)
		return ok && f == math.Trunc(f) && math.Abs(f) < 1<<53 && float64(bi) == f
	}
	fa, ok1 := a.(float64)
	fb, ok2 := b.(float64)
	return ok1 && ok2 && fa == fb
}

func asInt(v any) (int64, bool) {
	switch v := v.(type) {
	case int:
		return int64(v), true
	case int32:
		return int64(v), true
	case int64:
		return v, true
	}
	return 0, false
}
