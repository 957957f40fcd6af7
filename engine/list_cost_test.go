package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// coOwnedEnv is a Deployment whose one container has n env entries, and the managedFields
// of a live copy where kubectl-edit and the run's apply both own every entry and
// kube-controller-manager's scale entry owns spec.replicas.
func coOwnedEnv(n int) (desired func() *unstructured.Unstructured, live *unstructured.Unstructured) {
	env, entries := envOf(n)
	mf := `{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{"f:env":{` + entries + `}}}}}}}`
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
		owned("kubectl-edit", metav1.ManagedFieldsOperationUpdate, "", mf),
		owned(FieldManager, metav1.ManagedFieldsOperationApply, "", mf),
		owned("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "scale", scaleReplicas),
	})
	return desired, live
}

// envOf is n env entries and their fields in fieldsV1 (the inside of f:env).
func envOf(n int) ([]any, string) {
	env := make([]any, n)
	var mf strings.Builder
	for i := range n {
		name := fmt.Sprintf("E%06d", i)
		env[i] = map[string]any{"name": name, "value": "v"}
		if i > 0 {
			mf.WriteString(",")
		}
		fmt.Fprintf(&mf, `"k:{\"name\":\"%s\"}":{".":{},"f:name":{},"f:value":{}}`, name)
	}
	return env, mf.String()
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
				ig.mark(it)
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

// TestAppliedAsDesiredLinearInListLength: trusting an unchanged object on its managedFields
// examines a few list elements per env entry, not every entry for each: with 1,000 and 8,000
// entries the Deployment the run applied is trusted, and one whose last entry another
// manager changed is not.
func TestAppliedAsDesiredLinearInListLength(t *testing.T) {
	for _, n := range []int{1000, 8000} {
		env, entries := envOf(n)
		desired := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "ns"},
			"spec": map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "app", "image": "x", "env": env}}}}},
		}}
		live := desired.DeepCopy()
		live.SetManagedFields([]metav1.ManagedFieldsEntry{owned(FieldManager, metav1.ManagedFieldsOperationApply, "",
			`{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:name":{},"f:image":{},"f:env":{`+entries+`}}}}}}}`)})
		x := &elements{}
		start := time.Now()
		same := x.appliedAsDesired(desired, live, FieldManager)
		t.Logf("n=%d env entries: appliedAsDesired took %v, examined %d list elements", n, time.Since(start), x.steps)
		if !same {
			t.Errorf("n=%d: the object as applied is not trusted unchanged", n)
		}
		if limit := 6*int64(n) + 16; x.steps > limit {
			t.Errorf("n=%d: appliedAsDesired examined %d list elements, want at most %d (linear in the list)", n, x.steps, limit)
		}
		edited := live.DeepCopy()
		last, _, _ := unstructured.NestedSlice(edited.Object, "spec", "template", "spec", "containers")
		last[0].(map[string]any)["env"].([]any)[n-1].(map[string]any)["value"] = "edited"
		_ = unstructured.SetNestedSlice(edited.Object, last, "spec", "template", "spec", "containers")
		if appliedAsDesired(desired, edited, FieldManager) {
			t.Errorf("n=%d: an object whose last env entry was changed is trusted unchanged", n)
		}
	}
}
