package engine

import (
	"crypto/sha256"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHashObject checks the memo's hash: equal objects hash equally whatever the map order,
// and any change of a value, a type, a key, nesting or the field manager changes it.
func TestHashObject(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "ns", "labels": map[string]any{"a": "1", "b": "2"}},
			"spec": map[string]any{"replicas": int64(2), "paused": false, "ratio": 0.5,
				"list": []any{"x", int64(1), nil, map[string]any{"k": "v"}}},
		}}
	}
	h0 := hashObject("converge", base())
	if h0 != hashObject("converge", base()) {
		t.Fatal("equal objects hash differently")
	}
	changes := map[string]func(u *unstructured.Unstructured){
		"value":   func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["replicas"] = int64(3) },
		"type":    func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["replicas"] = "2" },
		"float":   func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["ratio"] = 0.25 },
		"bool":    func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["paused"] = true },
		"new key": func(u *unstructured.Unstructured) { u.Object["spec"].(map[string]any)["x"] = nil },
		"list order": func(u *unstructured.Unstructured) {
			l := u.Object["spec"].(map[string]any)["list"].([]any)
			l[0], l[1] = l[1], l[0]
		},
		"label": func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "1", "b": "3"}) },
		"key to value": func(u *unstructured.Unstructured) {
			u.Object["spec"].(map[string]any)["list"] = []any{"x", int64(1), nil, "k", "v"}
		},
	}
	for name, change := range changes {
		u := base()
		change(u)
		if hashObject("converge", u) == h0 {
			t.Errorf("%s: hash unchanged", name)
		}
	}
	if hashObject("other", base()) == h0 {
		t.Error("another field manager: hash unchanged")
	}
}

// BenchmarkHashObject compares the memo's hash with hashing the object's JSON encoding (what
// it replaced). Figures only.
func BenchmarkHashObject(b *testing.B) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "ns", "labels": map[string]any{"app": "web"},
			"annotations": map[string]any{OwnerAnnotation: "ns_app"}},
		"spec": map[string]any{"replicas": int64(2), "selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
				"spec": map[string]any{"containers": []any{map[string]any{"name": "web", "image": "nginx:1.27",
					"ports": []any{map[string]any{"containerPort": int64(80)}}}}}}},
	}}
	b.Run("walk", func(b *testing.B) {
		for b.Loop() {
			hashObject("converge", u)
		}
	})
	b.Run("json", func(b *testing.B) {
		for b.Loop() {
			j, _ := json.Marshal(u.Object)
			sha256.Sum256(j)
		}
	})
}
