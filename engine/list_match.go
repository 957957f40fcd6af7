package engine

import (
	"math"
	"slices"
	"strconv"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Finding list elements by key or value, for ignore rules (locate) and for trusting an
// object unchanged (appliedAsDesired). Scanning a list for every path that names one of its
// elements made both cost the square of an object's longest list (8,000 env entries: 15 s
// an object); instead each list is indexed once per call, on first use, by the encoded
// values of the key fields a path names (or by its elements' values for v: paths), and a
// lookup reads one bucket. A candidate is checked against the list as it is now, since
// adjust edits the object between lookups; the edits never touch what an element is found
// by (key fields are never left out, and a field given the live value gets one equal to the
// key it was found by).

// maxKeyShapes bounds the sets of key field names one list is indexed by in one call: the
// API server keys each list by one set, so more come only from managedFields written by
// hand, and a path keyed by a further set finds no element rather than costing another pass
// over the list (an ignore rule then applies that field as rendered; appliedAsDesired is
// unsure, and the object is dry-run).
const maxKeyShapes = 8

// elements indexes the lists of the objects of one call (adjust, appliedAsDesired).
type elements struct {
	lists map[listID]*listIndex
	// steps counts the list elements examined, indexing and checking candidates: the work
	// that grows with the lists.
	steps int64
}

// listID is a list by identity: neither caller adds or removes list elements, and a list
// adjust replaces by another value is a new list.
type listID struct {
	first *any
	n     int
}

// listIndex indexes one list.
type listIndex struct {
	keyed  map[string]*keyIndex // by the key's field names (encoded)
	values map[string][]int     // element value (encoded) → indices, ascending; nil until used
}

// keyIndex finds the map elements of a list by the values of a set of key fields: exact,
// and, for a key with a protocol, the elements without one (defaulted to "TCP").
type keyIndex struct {
	exact, defaulted map[string][]int
}

// list returns l's index, empty until a lookup needs it.
func (x *elements) list(l []any) *listIndex {
	if x.lists == nil {
		x.lists = map[listID]*listIndex{}
	}
	id := listID{first: &l[0], n: len(l)}
	li := x.lists[id]
	if li == nil {
		li = &listIndex{keyed: map[string]*keyIndex{}}
		x.lists[id] = li
	}
	return li
}

// match is the index of the one element of l that pe (a k: or v: element) selects; -1 when
// none or several do.
func (x *elements) match(l []any, pe fieldpath.PathElement) int {
	if pe.Value != nil {
		return x.value(l, (*pe.Value).Unstructured(), nil)
	}
	key := make(map[string]any, len(*pe.Key))
	for _, f := range *pe.Key {
		key[f.Name] = f.Value.Unstructured()
	}
	return x.keyed(l, key, true, nil)
}

// keyed is the index of the one map element of l that free accepts (nil: every element)
// whose key fields equal key, or, with defaulted and no exact one, whose missing protocol
// taken as "TCP" (the default the API server writes into a port's key) makes them equal; -1
// when none or several.
// An element free refuses once is never offered again.
func (x *elements) keyed(l []any, key map[string]any, defaulted bool, free func(int) bool) int {
	if len(l) == 0 {
		return -1
	}
	li := x.list(l)
	names := make([]string, 0, len(key))
	for f := range key {
		names = append(names, f)
	}
	slices.Sort(names)
	shape, _ := encodeValue(nil, names)
	ki := li.keyed[string(shape)]
	if ki == nil {
		if len(li.keyed) >= maxKeyShapes {
			return -1
		}
		ki = x.indexKeys(l, names)
		li.keyed[string(shape)] = ki
	}
	enc, ok := encodeKey(nil, names, key)
	if !ok {
		return -1 // a value equal to nothing
	}
	if i, n := x.unique(ki.exact, string(enc), l, key, false, free); n > 0 {
		if n > 1 {
			return -1
		}
		return i
	}
	if !defaulted || key["protocol"] != "TCP" {
		return -1
	}
	if i, n := x.unique(ki.defaulted, string(enc), l, key, true, free); n == 1 {
		return i
	}
	return -1
}

// unique checks the candidates of buckets[enc] against l as it is now and free, up to two,
// dropping those that fail; it returns the first that passes and how many do (0, 1 or 2).
func (x *elements) unique(buckets map[string][]int, enc string, l []any, key map[string]any, assumeDefault bool, free func(int) bool) (int, int) {
	b := buckets[enc]
	found, n := -1, 0
	for j := 0; j < len(b) && n < 2; {
		x.steps++
		if m, ok := l[b[j]].(map[string]any); ok && keyMatches(m, key, assumeDefault) && (free == nil || free(b[j])) {
			if n == 0 {
				found = b[j]
			}
			n++
			j++
			continue
		}
		b[j] = b[len(b)-1] // order does not matter here: only a unique match counts
		b = b[:len(b)-1]
	}
	buckets[enc] = b
	return found, n
}

// indexKeys indexes the map elements of l by the values of the fields names.
func (x *elements) indexKeys(l []any, names []string) *keyIndex {
	ki := &keyIndex{exact: map[string][]int{}, defaulted: map[string][]int{}}
	withProtocol := slices.Contains(names, "protocol")
	for i, e := range l {
		x.steps++
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if enc, ok := encodeKey(nil, names, m); ok {
			ki.exact[string(enc)] = append(ki.exact[string(enc)], i)
			continue
		}
		if _, has := m["protocol"]; withProtocol && !has && allPresent(m, names, "protocol") {
			with := make(map[string]any, len(names))
			for _, f := range names {
				with[f] = m[f]
			}
			with["protocol"] = "TCP"
			if enc, ok := encodeKey(nil, names, with); ok {
				ki.defaulted[string(enc)] = append(ki.defaulted[string(enc)], i)
			}
		}
	}
	return ki
}

// allPresent reports whether m has every field of names but except.
func allPresent(m map[string]any, names []string, except string) bool {
	for _, f := range names {
		if _, ok := m[f]; !ok && f != except {
			return false
		}
	}
	return true
}

// value is the index of the first element of l that free accepts (nil: every element) and
// that is equal to v, or -1. An element free refuses
// once is never offered again.
func (x *elements) value(l []any, v any, free func(int) bool) int {
	if len(l) == 0 {
		return -1
	}
	li := x.list(l)
	if li.values == nil {
		li.values = map[string][]int{}
		for i, e := range l {
			x.steps++
			if enc, ok := encodeValue(nil, e); ok {
				li.values[string(enc)] = append(li.values[string(enc)], i)
			}
		}
	}
	enc, ok := encodeValue(nil, v)
	if !ok {
		return -1
	}
	b := li.values[string(enc)]
	for len(b) > 0 { // the first that passes: those before it are dropped, keeping the order
		x.steps++
		if equalValue(l[b[0]], v) && (free == nil || free(b[0])) {
			break
		}
		b = b[1:]
	}
	li.values[string(enc)] = b
	if len(b) == 0 {
		return -1
	}
	return b[0]
}

// encodeKey appends the values in m of the fields names, encoded; false when one is missing
// or equal to nothing.
func encodeKey(b []byte, names []string, m map[string]any) ([]byte, bool) {
	for _, f := range names {
		v, ok := m[f]
		if !ok {
			return nil, false
		}
		if b, ok = encodeValue(b, v); !ok {
			return nil, false
		}
	}
	return b, true
}

// encodeValue appends to b an encoding of the JSON value v that two values share exactly
// when equalValue holds for them: an integer and an integral float below 2^53 encode alike.
// False when v equals nothing (a NaN, a Go type JSON has not).
func encodeValue(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case nil:
		return append(b, 'n'), true
	case string:
		return appendString(b, v), true
	case bool:
		if v {
			return append(b, 't'), true
		}
		return append(b, 'f'), true
	case int, int32, int64:
		i, _ := asInt(v)
		return appendInt(b, i), true
	case float64:
		switch {
		case v == math.Trunc(v) && math.Abs(v) < 1<<53:
			return appendInt(b, int64(v)), true
		case math.IsNaN(v):
			return nil, false
		}
		b = strconv.AppendFloat(append(b, 'd'), v, 'g', -1, 64)
		return append(b, ';'), true
	case []string: // a list of field names
		b = append(b, '[')
		for _, s := range v {
			b = appendString(b, s)
		}
		return append(b, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for _, k := range keys {
			var ok bool
			if b, ok = encodeValue(appendString(b, k), v[k]); !ok {
				return nil, false
			}
		}
		return append(b, '}'), true
	case []any:
		b = append(b, '[')
		for _, e := range v {
			var ok bool
			if b, ok = encodeValue(b, e); !ok {
				return nil, false
			}
		}
		return append(b, ']'), true
	}
	return nil, false
}

// appendString appends s with its length, so that no encoding is a prefix of another.
func appendString(b []byte, s string) []byte {
	b = strconv.AppendInt(append(b, 's'), int64(len(s)), 10)
	return append(append(b, ':'), s...)
}

// appendInt appends an integer.
func appendInt(b []byte, i int64) []byte {
	return append(strconv.AppendInt(append(b, 'i'), i, 10), ';')
}
