package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// defaultMix is the kind mix of kindPattern, in -mix's syntax.
const defaultMix = "ConfigMap=3,Secret=2,Service=2,Deployment=2,Widget=1"

// leafKinds are the kinds a leaf can have (leafOf).
var leafKinds = []string{"ConfigMap", "Secret", "Service", "Deployment", "Widget"}

// kindMix is the repeating pattern of leaf kinds: leaf i has kind kindMix[i%len(kindMix)].
// A contiguous block of leaves carries the mix of the whole once it is as long as the
// pattern.
type kindMix []string

// parseMix reads -mix: comma-separated Kind=weight pairs, weights whole numbers ≥ 0 (a
// kind left out weighs 0). Kinds follow each other in blocks of their weight, in the order
// given: "ConfigMap=3,Secret=2" is the pattern ConfigMap ×3, Secret ×2, repeated.
func parseMix(s string) (kindMix, error) {
	var m kindMix
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		kind, w, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("-mix %q: %q is not Kind=weight", s, part)
		}
		if !slices.Contains(leafKinds, kind) {
			return nil, fmt.Errorf("-mix %q: kind %q: want one of %s", s, kind, strings.Join(leafKinds, ", "))
		}
		if seen[kind] {
			return nil, fmt.Errorf("-mix %q: kind %s given twice", s, kind)
		}
		seen[kind] = true
		n, err := strconv.Atoi(w)
		if err != nil || n < 0 || n > 100 {
			return nil, fmt.Errorf("-mix %q: weight of %s: want a whole number from 0 to 100", s, kind)
		}
		for range n {
			m = append(m, kind)
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("-mix %q: every weight is 0", s)
	}
	return m, nil
}

// kindOf is the kind of the i-th leaf.
func (m kindMix) kindOf(i int) string { return m[i%len(m)] }

// String is the mix as -mix reads it, kinds in order of first appearance.
func (m kindMix) String() string {
	var parts []string
	for i := 0; i < len(m); {
		j := i
		for j < len(m) && m[j] == m[i] {
			j++
		}
		parts = append(parts, fmt.Sprintf("%s=%d", m[i], j-i))
		i = j
	}
	return strings.Join(parts, ",")
}
