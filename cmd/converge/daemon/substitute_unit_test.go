package daemon

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

func refBundle(rev string) *sources.Bundle {
	return &sources.Bundle{Revision: rev, Origins: []string{"cm.yaml:1"}, Objects: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "${v}"}}}}}
}

// TestSubstituteReusesTheLastResult: the same rendered objects with the same variables give
// the kept result (under the new revision string), a change of either recomputes it, and a
// Sync without postBuild forgets it.
func TestSubstituteReusesTheLastResult(t *testing.T) {
	r := &reconciler{}
	ctx := context.Background()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"v": "one"}}}}
	value := func(b *sources.Bundle) string { return b.Objects[0].Object["data"].(map[string]any)["k"].(string) }
	in := refBundle("main@sha1:1")
	first, err := r.substitute(ctx, s, in, nil)
	if err != nil || value(first) != "one" {
		t.Fatalf("first: %v, %v", first, err)
	}
	again := *in
	again.Revision = "main@sha1:2" // a new commit with the same content: the same cached objects
	second, err := r.substitute(ctx, s, &again, nil)
	if err != nil || second.Objects[0] != first.Objects[0] || second.Revision != "main@sha1:2" {
		t.Errorf("same objects and variables: want the kept result at the new revision; got %v (%s), %v", second.Objects[0] == first.Objects[0], second.Revision, err)
	}
	s.Spec.PostBuild.Substitute["v"] = "two"
	if third, err := r.substitute(ctx, s, in, nil); err != nil || value(third) != "two" {
		t.Errorf("a changed value was not substituted: %v, %v", third, err)
	}
	s.Spec.PostBuild.Strict = true
	s.Spec.PostBuild.Substitute = map[string]string{"other": "x"}
	if _, err := r.substitute(ctx, s, in, nil); err == nil {
		t.Error("strict with a missing variable: the kept result came back instead of the error")
	}
	s.Spec.PostBuild = &v1alpha1.PostBuild{Substitute: map[string]string{"v": "three"}}
	if fresh, err := r.substitute(ctx, s, refBundle("main@sha1:3"), nil); err != nil || value(fresh) != "three" {
		t.Errorf("new objects: %v, %v", fresh, err)
	}
	s.Spec.PostBuild = nil
	if out, err := r.substitute(ctx, s, in, nil); err != nil || out != in || len(r.substitutions.by) != 0 {
		t.Errorf("without postBuild: want the bundle as it is and nothing kept; got %v, %v, %d kept", out == in, err, len(r.substitutions.by))
	}
}
