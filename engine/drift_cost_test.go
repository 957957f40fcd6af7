package engine

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// driftWork is the work of driftOf's walk on the objects build(n) makes, counted in steps
// (nodes visited, list elements indexed: a count that does not depend on the machine), with
// the fields and count driftOf reports.
func driftWork(t *testing.T, n int, build func(n int) (desired, live, dry map[string]any)) (steps int, fields []DriftedField, more int) {
	t.Helper()
	d, l, y := build(n)
	desired, live, dry := &unstructured.Unstructured{Object: d}, &unstructured.Unstructured{Object: l}, &unstructured.Unstructured{Object: y}
	start := time.Now()
	fields, more = driftOf(desired, live, dry, live, "converge")
	took := time.Since(start)
	steps = walkDriftOf(desired, live, dry).steps
	t.Logf("n=%d: %d steps, %v, %d fields and %d more", n, steps, took, len(fields), more)
	return steps, fields, more
}

// assertLinear fails when doubling n more than doubles driftOf's work (plus a little).
func assertLinear(t *testing.T, n int, build func(n int) (desired, live, dry map[string]any), wantMore func(n int) int) {
	t.Helper()
	small, _, more := driftWork(t, n, build)
	if more != wantMore(n) {
		t.Errorf("n=%d: %d more fields, want %d", n, more, wantMore(n))
	}
	large, fields, more := driftWork(t, 2*n, build)
	if len(fields) != MaxDriftFields || more != wantMore(2*n) {
		t.Errorf("n=%d: %d fields and %d more, want %d and %d", 2*n, len(fields), more, MaxDriftFields, wantMore(2*n))
	}
	if float64(large) > 2.2*float64(small) {
		t.Errorf("doubling n from %d multiplied the work by %.1f (%d to %d steps): not linear", n, float64(large)/float64(small), small, large)
	}
}

// TestDriftCostLinearInListLength checks that a named list whose every element differs
// costs driftOf work linear in its length: the desired list is indexed once, not once per
// differing element.
func TestDriftCostLinearInListLength(t *testing.T) {
	build := func(n int) (desired, live, dry map[string]any) {
		items := func(off int) []any {
			l := make([]any, n)
			for i := range l {
				l[i] = map[string]any{"name": fmt.Sprintf("e%d", i), "v": int64(i + off)}
			}
			return l
		}
		mk := func(off int) map[string]any {
			return map[string]any{"apiVersion": "example.com/v1", "kind": "Big", "spec": map[string]any{"items": items(off)}}
		}
		return mk(1), mk(0), mk(1)
	}
	assertLinear(t, 1000, build, func(n int) int { return n - MaxDriftFields })
}

// TestDriftCostLinearInDepth checks that deep nesting, with a differing field at every
// level, costs driftOf work linear in its depth: no deep comparison of the whole subtree at
// every level on the way down, no walk of the desired object from its root for every field.
func TestDriftCostLinearInDepth(t *testing.T) {
	build := func(n int) (desired, live, dry map[string]any) {
		mk := func(off int) map[string]any {
			var node map[string]any
			for i := range n {
				node = map[string]any{"a": node, "s": int64(i + off)}
			}
			return map[string]any{"apiVersion": "example.com/v1", "kind": "Deep", "spec": node}
		}
		return mk(1), mk(0), mk(1)
	}
	assertLinear(t, 300, build, func(n int) int { return n - MaxDriftFields })
}
