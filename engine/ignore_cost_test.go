package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// coOwnedEnv is a Deployment whose one container has n env entries, and the managedFields
// of a live copy where kubectl-edit and the run's apply both own every entry and
// kube-controller-manager's scale entry owns spec.replicas.
func coOwnedEnv(n int) (desired func() *unstructured.Unstructured, live *unstructured.Unstructured) {
	env := make([]any, n)
	var mf strings.Builder
	mf.WriteString(`{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{"f:env":{`)
	for i := range n {
		name := fmt.Sprintf("E%06d", i)
		env[i] = map[string]any{"name": name, "value": "v"}
		if i > 0 {
			mf.WriteString(",")
		}
		fmt.Fprintf(&mf, `"k:{\"name\":\"%s\"}":{".":{},"f:name":{},"f:value":{}}`, name)
	}
	mf.WriteString(`}}}}}}}`)
	desired = func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "ns"},
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "app", "image": "x", "env": deepCopyValue(env)}}}}},
		}}
	}
	live = desired()
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		owned("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", mf.String()),
		owned(FieldManager, metav1.ManagedFieldsOperationApply, "", mf.String()),
		owned("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "scale", scaleReplicas),
	})
	return desired, live
}

// TestIgnoreAdjustLinearInListLength: the work of fitting one object to its ignore rules
// grows with its lists, not with their square. With 1,000 and 8,000 env entries co-owned by
// another manager, a path rule on spec.replicas examines no env entry at all, and a path
// rule over the env list or a rule naming the co-owner examines a few per entry (each list
// indexed once); the result is what the rules say (replicas left to the scale entry's owner,
// the env entries the run's apply co-owns kept with their live values).
func TestIgnoreAdjustLinearInListLength(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rule     IgnoreRule
		perEntry int64 // list elements examined per env entry, at most
	}{
		{"path another manager owns", IgnoreRule{Paths: []string{"/spec/replicas"}}, 0},
		{"path over the co-owned list", IgnoreRule{Paths: []string{"/spec/replicas", "/spec/template/spec/containers/0/env"}}, 8},
		{"manager co-owning the list", IgnoreRule{Managers: []string{"kubectl-edit"}}, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{1000, 8000} {
				desired, live := coOwnedEnv(n)
				ig, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{tc.rule}}, "", true)
				if err != nil {
					t.Fatal(err)
				}
				it := &item{obj: desired()}
				ig.mark([]*item{it})
				start := time.Now()
				ig.adjust(it, live)
				t.Logf("n=%d env entries: adjust took %v, examined %d list elements", n, time.Since(start), ig.steps)
				if limit := tc.perEntry*int64(n) + 16; ig.steps > limit {
					t.Errorf("n=%d: adjust examined %d list elements, want at most %d (linear in the list)", n, ig.steps, limit)
				}
				want := desired()
				if len(tc.rule.Paths) > 0 {
					unstructured.RemoveNestedField(want.Object, "spec", "replicas")
				}
				if !equalValue(want.Object, it.obj.Object) {
					t.Errorf("n=%d: adjusted object is not the desired one with spec.replicas left to its owner", n)
				}
			}
		})
	}
}

// TestElementsMatchAsScan: the indexed lookup finds the element the linear scan finds
// (matchKeyed with a missing protocol taken as "TCP", matchValue), duplicates, numbers of
// other Go types, non-map elements and elements missing a key field included.
func TestElementsMatchAsScan(t *testing.T) {
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
		want := matchKeyed(keyed, make([]bool, len(keyed)), key, true)
		x := &elements{}
		for range 2 { // the second lookup reads the index the first built
			if got := x.match(keyed, fieldpath.PathElement{Key: &fl}); got != want {
				t.Errorf("key %v: index %d, want %d", key, got, want)
			}
		}
	}
	for _, v := range append(values, int64(4), map[string]any{"k": 1.0}, false) {
		want := matchValue(values, make([]bool, len(values)), v)
		x := &elements{}
		val := value.NewValueInterface(v)
		for range 2 {
			if got := x.match(values, fieldpath.PathElement{Value: &val}); got != want {
				t.Errorf("value %v: index %d, want %d", v, got, want)
			}
		}
	}
}
