package engine

import (
	"testing"

	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// scanKeyed is the linear scan keyed lookups must agree with: the index of the one unused
// map element of list whose key fields equal key, or -1 when there is none or more than one.
// With defaulted, a port's missing protocol matches "TCP"; exact matches are preferred.
func scanKeyed(list []any, used []bool, key map[string]any, defaulted bool) int {
	found := -1
	for pass := 0; pass < 2 && found < 0; pass++ {
		if pass == 1 && !defaulted {
			break
		}
		n := 0
		for i, e := range list {
			m, ok := e.(map[string]any)
			if !ok || used[i] || !keyMatches(m, key, pass == 1) {
				continue
			}
			n++
			found = i
		}
		if n > 1 {
			return -1
		}
	}
	return found
}

// scanValue is the linear scan value lookups must agree with: the index of the first unused element of list equal to v, or -1.
func scanValue(list []any, used []bool, v any) int {
	for i, e := range list {
		if !used[i] && equalValue(e, v) {
			return i
		}
	}
	return -1
}

// TestListMatchAsScan: the indexed lookup finds the element the linear scan finds
// (scanKeyed with a missing protocol taken as "TCP", scanValue), duplicates, numbers of
// other Go types, non-map elements and elements missing a key field included.
func TestListMatchAsScan(t *testing.T) {
	keyed := []any{
		"scalar",
		map[string]any{"containerPort": int64(80), "protocol": "TCP", "name": "http"},
		map[string]any{"containerPort": int64(80), "protocol": "UDP"},
		map[string]any{"containerPort": 53},
		map[string]any{"containerPort": float64(8080)},
		map[string]any{"containerPort": int64(9090)},
		map[string]any{"containerPort": int64(9090)},
		map[string]any{"name": "dup"}, map[string]any{"name": "dup"},
		map[string]any{"name": "one", "value": map[string]any{"a": []any{int64(1), 2.5}}},
		map[string]any{"protocol": "TCP"},
	}
	values := []any{"a", int64(3), 3.0, "b", "a", map[string]any{"k": int64(1)}, nil, true}
	keys := []map[string]any{
		{"containerPort": int64(80), "protocol": "TCP"}, {"containerPort": int64(80), "protocol": "UDP"},
		{"containerPort": int64(53), "protocol": "TCP"}, {"containerPort": int64(53), "protocol": "UDP"},
		{"containerPort": int64(8080), "protocol": "TCP"}, {"containerPort": 8080.0}, {"containerPort": 8080.5},
		{"containerPort": int64(9090)}, {"containerPort": int64(9090), "protocol": "TCP"},
		{"name": "dup"}, {"name": "one"}, {"name": "http"}, {"name": "none"}, {},
	}
	for _, key := range keys {
		var fl value.FieldList
		for k, v := range key {
			fl = append(fl, value.Field{Name: k, Value: value.NewValueInterface(v)})
		}
		fl.Sort()
		want := scanKeyed(keyed, make([]bool, len(keyed)), key, true)
		x := &elements{}
		for range 2 { // the second lookup reads the index the first built
			if got := x.match(keyed, fieldpath.PathElement{Key: &fl}); got != want {
				t.Errorf("key %v: index %d, want %d", key, got, want)
			}
		}
	}
	for _, v := range append(values, int64(4), map[string]any{"k": 1.0}, false) {
		want := scanValue(values, make([]bool, len(values)), v)
		x := &elements{}
		val := value.NewValueInterface(v)
		for range 2 {
			if got := x.match(values, fieldpath.PathElement{Value: &val}); got != want {
				t.Errorf("value %v: index %d, want %d", v, got, want)
			}
		}
	}
	// With elements used one after another (appliedAsDesired's sameList), in both kinds of
	// list and with both defaulted and not.
	for _, defaulted := range []bool{true, false} {
		x, usedScan, usedIndex := &elements{}, make([]bool, len(keyed)), make([]bool, len(keyed))
		free := func(i int) bool { return !usedIndex[i] }
		for _, key := range append(keys, keys...) {
			want, got := scanKeyed(keyed, usedScan, key, defaulted), x.keyed(keyed, key, defaulted, free)
			if got != want {
				t.Errorf("defaulted %v, key %v after earlier matches: index %d, want %d", defaulted, key, got, want)
			}
			if want >= 0 {
				usedScan[want] = true
			}
			if got >= 0 {
				usedIndex[got] = true
			}
		}
	}
	x, usedScan, usedIndex := &elements{}, make([]bool, len(values)), make([]bool, len(values))
	free := func(i int) bool { return !usedIndex[i] }
	for _, v := range append(values, values...) {
		want, got := scanValue(values, usedScan, v), x.value(values, v, free)
		if got != want {
			t.Errorf("value %v after earlier matches: index %d, want %d", v, got, want)
		}
		if want >= 0 {
			usedScan[want] = true
		}
		if got >= 0 {
			usedIndex[got] = true
		}
	}
}
