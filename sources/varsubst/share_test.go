package varsubst

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// TestExpandSharesUnchangedParts: a substituted object shares with the rendered one every
// value no variable touched, and only those; the rendered object is not modified. Without it,
// it was a full copy (spec, containers and labels copied).
func TestExpandSharesUnchangedParts(t *testing.T) {
	containers := []any{map[string]any{"name": "app", "image": "app:${tag}", "ports": []any{map[string]any{"containerPort": int64(80)}}}}
	spec := map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{"containers": containers}}}
	labels := map[string]any{"app": "web"}
	in := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": labels}, "spec": spec}}
	before := in.DeepCopy()
	b := &sources.Bundle{Revision: "r", Objects: []*unstructured.Unstructured{in}, Origins: []string{"d.yaml:1"}}
	vars, err := Merge(Source{Name: "test", Values: map[string]string{"tag": "1.2"}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := Expand(b, vars, DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	got := out.Objects[0].Object
	want := before.DeepCopy()
	_ = unstructured.SetNestedSlice(want.Object, []any{map[string]any{"name": "app", "image": "app:1.2",
		"ports": []any{map[string]any{"containerPort": int64(80)}}}}, "spec", "template", "spec", "containers")
	if diff := cmp.Diff(want.Object, got); diff != "" {
		t.Fatalf("substituted object (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before.Object, in.Object); diff != "" {
		t.Errorf("the rendered object was modified (-before +after):\n%s", diff)
	}
	same := func(a, b any) bool { return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() }
	gotSpec := got["spec"].(map[string]any)
	gotContainer := gotSpec["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	switch {
	case !same(got["metadata"], in.Object["metadata"]):
		t.Error("metadata, which no variable touched, is a copy")
	case !same(gotContainer["ports"], containers[0].(map[string]any)["ports"]):
		t.Error("the container's ports, which no variable touched, are a copy")
	case same(gotSpec, spec) || same(gotContainer, containers[0]):
		t.Error("a map on the path to the substituted image is the rendered object's own")
	}
}
