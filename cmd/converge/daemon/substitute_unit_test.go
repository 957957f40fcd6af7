package daemon

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// sameMap reports whether a and b are the same map, not just equal ones.
func sameMap(a, b any) bool {
	ma, ok1 := a.(map[string]any)
	mb, ok2 := b.(map[string]any)
	return ok1 && ok2 && reflect.ValueOf(ma).UnsafePointer() == reflect.ValueOf(mb).UnsafePointer()
}

// TestSubstituteKeepsOnlyWhatChanged: the kept result shares with the rendered object every
// part the substitution left as it was, so that keeping it costs the substituted paths, not a
// second copy of the render. Before, the result was Expand's own full copy (spec not shared).
func TestSubstituteKeepsOnlyWhatChanged(t *testing.T) {
	r := &reconciler{}
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"tier": "gold"}}}}
	spec := map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "app", "image": "app:1", "ports": []any{map[string]any{"containerPort": int64(80)}}}}}}}
	labels := map[string]any{"app": "web"}
	in := &sources.Bundle{Revision: "main@sha1:1", Origins: []string{"d.yaml:1"}, Objects: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": labels, "annotations": map[string]any{"placement": "${tier}"}},
		"spec":     spec}}}}
	want := in.Objects[0].DeepCopy()
	want.SetAnnotations(map[string]string{"placement": "gold"})
	out, err := r.substitute(context.Background(), s, in, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := out.Objects[0]
	if !equality.Semantic.DeepEqual(want.Object, got.Object) {
		t.Fatalf("substituted object:\n%v\nwant\n%v", got.Object, want.Object)
	}
	md := got.Object["metadata"].(map[string]any)
	if !sameMap(got.Object["spec"], spec) || !sameMap(md["labels"], labels) {
		t.Error("the spec and labels, which no variable touched, are copies instead of the rendered object's own")
	}
	if sameMap(got.Object["metadata"], in.Objects[0].Object["metadata"]) {
		t.Fatal("the substituted metadata is the rendered object's: the render cache's object was written to")
	}
	if in.Objects[0].GetAnnotations()["placement"] != "${tier}" {
		t.Error("the rendered object was modified")
	}
}

// TestSubstituteFailureDropsTheKeptResult: once the variables change, the result computed
// from the old ones (which may hold a rotated Secret's value) is not kept: not while the new
// substitution fails, not while it runs. Before, it stayed until a substitution succeeded.
func TestSubstituteFailureDropsTheKeptResult(t *testing.T) {
	r := &reconciler{}
	ctx := context.Background()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"v": "one"}, Strict: true}}}
	in := refBundle("main@sha1:1")
	if _, err := r.substitute(ctx, s, in, nil); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(s)
	if st := r.substitutions.by[key]; st == nil || st.out == nil {
		t.Fatal("the first result was not kept: nothing to test")
	}
	s.Spec.PostBuild.Substitute = map[string]string{"other": "x"} // strict: ${v} has no value now
	if _, err := r.substitute(ctx, s, in, []string{"decrypted"}); err == nil {
		t.Fatal("strict with a missing variable succeeded")
	}
	if st := r.substitutions.by[key]; st == nil || st.out != nil || st.in != nil {
		t.Error("the result of the old variables is still kept after the new substitution failed")
	}
	if got := r.substitutions.redactor(key).String("x decrypted"); got != "x ***" {
		t.Errorf("the redactor was dropped with the result: %q", got)
	}
}

// TestSubstituteBoundedByTheDaemonLimits: what substitution inserts is bounded by the
// daemon's --max-file-size (per object), as the error says. Before, the bound was the
// default 8 MiB whatever the flag: a 10,000-byte value substituted under a 1,000-byte
// --max-file-size.
func TestSubstituteBoundedByTheDaemonLimits(t *testing.T) {
	r := &reconciler{render: renderSettings{limits: sources.Limits{MaxFileSize: 1000}}}
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: v1alpha1.SyncSpec{PostBuild: &v1alpha1.PostBuild{Substitute: map[string]string{"v": strings.Repeat("x", 10000)}}}}
	_, err := r.substitute(context.Background(), s, refBundle("main@sha1:1"), nil)
	if want := "larger than 1000 bytes (raise the limit with --max-file-size)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one saying %q", err, want)
	}
}
