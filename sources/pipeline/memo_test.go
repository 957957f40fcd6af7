package pipeline

import (
	"context"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/varsubst"
)

func refBundle(rev string) *sources.Bundle {
	return &sources.Bundle{Revision: rev, Origins: []string{"cm.yaml:1"}, Objects: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "${v}"}}}}}
}

// substitution substitutes vars, given as one source, keeping the result in m.
func substitution(m *Memo, vars map[string]string, strict bool) *Substitution {
	return &Substitution{
		Variables: func(context.Context) ([]varsubst.Source, error) {
			return []varsubst.Source{{Name: "spec.postBuild.substitute", Values: vars}}, nil
		},
		Strict: strict, Setting: "spec.postBuild", Memo: m,
	}
}

func substitute(m *Memo, b *sources.Bundle, vars map[string]string, strict bool, redact ...string) (Result, error) {
	return Prepare(context.Background(), b, Options{Substitution: substitution(m, vars, strict), Redact: redact})
}

// TestPrepareReusesTheLastSubstitution: the same rendered objects with the same variables
// give the kept result (under the new revision string), and a change of either recomputes
// it.
func TestPrepareReusesTheLastSubstitution(t *testing.T) {
	m := &Memo{}
	value := func(b *sources.Bundle) string { return b.Objects[0].Object["data"].(map[string]any)["k"].(string) }
	in := refBundle("main@sha1:1")
	first, err := substitute(m, in, map[string]string{"v": "one"}, false)
	if err != nil || value(first.Bundle) != "one" {
		t.Fatalf("first: %v, %v", first.Bundle, err)
	}
	again := *in
	again.Revision = "main@sha1:2" // a new commit with the same content: the same cached objects
	second, err := substitute(m, &again, map[string]string{"v": "one"}, false)
	if err != nil || second.Bundle.Objects[0] != first.Bundle.Objects[0] || second.Bundle.Revision != "main@sha1:2" {
		t.Errorf("same objects and variables: want the kept result at the new revision; got %v (%s), %v",
			second.Bundle.Objects[0] == first.Bundle.Objects[0], second.Bundle.Revision, err)
	}
	if third, err := substitute(m, in, map[string]string{"v": "two"}, false); err != nil || value(third.Bundle) != "two" {
		t.Errorf("a changed value was not substituted: %v, %v", third.Bundle, err)
	}
	if _, err := substitute(m, in, map[string]string{"other": "x"}, true); err == nil {
		t.Error("strict with a missing variable: the kept result came back instead of the error")
	}
	if fresh, err := substitute(m, refBundle("main@sha1:3"), map[string]string{"v": "three"}, false); err != nil || value(fresh.Bundle) != "three" {
		t.Errorf("new objects: %v, %v", fresh.Bundle, err)
	}
}

// TestPrepareReusesTheSubstitutionOfOneRender: two loads of one render decode objects of
// their own under one Bundle.Key; the second reuses the first's result, and another key
// (the content changed) recomputes it.
func TestPrepareReusesTheSubstitutionOfOneRender(t *testing.T) {
	m := &Memo{}
	value := func(b *sources.Bundle) string { return b.Objects[0].Object["data"].(map[string]any)["k"].(string) }
	load := func(key, rev string) *sources.Bundle {
		b := refBundle(rev)
		b.Key = key
		return b
	}
	first, err := substitute(m, load("render-1", "main@sha1:1"), map[string]string{"v": "one"}, false)
	if err != nil || value(first.Bundle) != "one" {
		t.Fatalf("first: %v, %v", first.Bundle, err)
	}
	second, err := substitute(m, load("render-1", "main@sha1:2"), map[string]string{"v": "one"}, false)
	if err != nil || second.Bundle.Objects[0] != first.Bundle.Objects[0] || second.Bundle.Revision != "main@sha1:2" {
		t.Errorf("the same render decoded again: want the kept result at the new revision; got a new one: %v (%s), %v",
			second.Bundle.Objects[0] != first.Bundle.Objects[0], second.Bundle.Revision, err)
	}
	other := load("render-2", "main@sha1:3")
	other.Objects[0].Object["data"] = map[string]any{"k": "x-${v}"}
	if third, err := substitute(m, other, map[string]string{"v": "one"}, false); err != nil || value(third.Bundle) != "x-one" {
		t.Errorf("another render: the kept result came back: %v, %v", third.Bundle, err)
	}
}

// sameMap reports whether a and b are the same map, not just equal ones.
func sameMap(a, b any) bool {
	ma, ok1 := a.(map[string]any)
	mb, ok2 := b.(map[string]any)
	return ok1 && ok2 && reflect.ValueOf(ma).UnsafePointer() == reflect.ValueOf(mb).UnsafePointer()
}

// TestPrepareKeepsOnlyWhatChanged: the kept result shares with the rendered object every
// part the substitution left as it was, so that keeping it costs the substituted paths, not
// a second copy of the render.
func TestPrepareKeepsOnlyWhatChanged(t *testing.T) {
	spec := map[string]any{"replicas": int64(2), "template": map[string]any{"spec": map[string]any{
		"containers": []any{map[string]any{"name": "app", "image": "app:1", "ports": []any{map[string]any{"containerPort": int64(80)}}}}}}}
	labels := map[string]any{"app": "web"}
	in := &sources.Bundle{Revision: "main@sha1:1", Origins: []string{"d.yaml:1"}, Objects: []*unstructured.Unstructured{{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "labels": labels, "annotations": map[string]any{"placement": "${tier}"}},
		"spec":     spec}}}}
	want := in.Objects[0].DeepCopy()
	want.SetAnnotations(map[string]string{"placement": "gold"})
	m := &Memo{}
	res, err := substitute(m, in, map[string]string{"tier": "gold"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !m.kept || len(m.changed) != 1 || m.changed[0].out != res.Bundle.Objects[0] {
		t.Fatal("the substituted object was not kept")
	}
	got := res.Bundle.Objects[0]
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

// TestPrepareFailureDropsTheKeptResult: once the variables change, the result computed
// from the old ones (which may hold a rotated Secret's value) is not kept: not while the new
// substitution fails, not while it runs. The Redactor of the failed run still hides what it
// was given.
func TestPrepareFailureDropsTheKeptResult(t *testing.T) {
	m := &Memo{}
	in := refBundle("main@sha1:1")
	if _, err := substitute(m, in, map[string]string{"v": "one"}, true); err != nil {
		t.Fatal(err)
	}
	if !m.kept {
		t.Fatal("the first result was not kept: nothing to test")
	}
	res, err := substitute(m, in, map[string]string{"other": "x"}, true, "decrypted") // strict: ${v} has no value now
	if err == nil {
		t.Fatal("strict with a missing variable succeeded")
	}
	if m.kept || m.changed != nil || m.in != nil {
		t.Error("the result of the old variables is still kept after the new substitution failed")
	}
	if got := res.Redactor.String("x decrypted"); got != "x ***" {
		t.Errorf("the failed run's redactor hides nothing: %q", got)
	}
}

// cmObject is a ConfigMap app/name whose data.k is val.
func cmObject(name, val string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "app"}, "data": map[string]any{"k": val}}}
}

// TestMemoRefusesObjectsInOtherPlaces: a render loaded again under one Key whose objects come
// in another order (a render that is not the same for one key) gets a new substitution,
// not the kept object put over another one: no object twice, none lost to a prune.
func TestMemoRefusesObjectsInOtherPlaces(t *testing.T) {
	m := &Memo{}
	first := &sources.Bundle{Key: "render-1", Objects: []*unstructured.Unstructured{cmObject("a", "${v}"), cmObject("b", "plain")}}
	if _, err := substitute(m, first, map[string]string{"v": "one"}, false); err != nil {
		t.Fatal(err)
	}
	second := &sources.Bundle{Key: "render-1", Objects: []*unstructured.Unstructured{cmObject("b", "plain"), cmObject("a", "${v}")}}
	res, err := substitute(m, second, map[string]string{"v": "one"}, false)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]int{}
	for _, o := range res.Bundle.Objects {
		names[o.GetName()]++
	}
	if names["a"] != 1 || names["b"] != 1 || value(t, res.Bundle.Objects[1], "k") != "one" {
		t.Errorf("objects in another order under one Key: got %v, a = %q; want a and b once each, a substituted", names, value(t, res.Bundle.Objects[1], "k"))
	}
}

// TestDecryptionMemoRefusesObjectsInOtherPlaces: the kept plaintext of an object is never put
// over another object, and an encrypted object that moved is decrypted again.
func TestDecryptionMemoRefusesObjectsInOtherPlaces(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	m := &Memo{}
	in := bundle(t, plainYAML, enc)
	in.Key = "render-1"
	if _, err := Prepare(t.Context(), in, Options{Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: m}}); err != nil || !m.kept {
		t.Fatalf("first decryption: %v, kept %t", err, m.kept)
	}
	other := bundle(t, enc, plainYAML)
	other.Key = "render-1"
	res, err := Prepare(t.Context(), other, Options{Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: m}})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Bundle.Objects {
		if _, ok := o.Object["sops"]; ok {
			t.Errorf("object %d (%s) still encrypted", i, o.GetName())
		}
	}
	if res.Bundle.Objects[0].GetName() != "cfg" || res.Bundle.Objects[1].GetName() != "plain" {
		t.Errorf("objects %s, %s; want cfg, plain", res.Bundle.Objects[0].GetName(), res.Bundle.Objects[1].GetName())
	}
}

// TestDecryptionMemoDroppedWithoutEncryptedObjects: once a render holds no encrypted object,
// the plaintexts kept from an earlier one are dropped, not kept until the Sync goes.
func TestDecryptionMemoDroppedWithoutEncryptedObjects(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	m := &Memo{}
	if _, err := Prepare(t.Context(), bundle(t, plainYAML, enc), Options{Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: m}}); err != nil || !m.kept {
		t.Fatalf("first decryption: %v, kept %t", err, m.kept)
	}
	if _, err := Prepare(t.Context(), bundle(t, plainYAML), Options{Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: m}}); err != nil {
		t.Fatal(err)
	}
	if m.kept || m.changed != nil {
		t.Error("the plaintexts of the encrypted render are still kept")
	}
}

// TestDecryptionMemoDroppedWithoutKeys: once the caller decrypts no more (no keys), the
// plaintexts kept from its last decryption are dropped, even while its render still holds
// encrypted objects.
func TestDecryptionMemoDroppedWithoutKeys(t *testing.T) {
	key := sopsfixture.NewKey(t)
	enc := string(sopsfixture.Encrypt(t, []byte(configMapYAML), sopsfixture.DefaultRegex, key.Recipient))
	m := &Memo{}
	if _, err := Prepare(t.Context(), bundle(t, plainYAML, enc), Options{Decryption: Decryption{Keys: keysOf(t, key.Identity), Memo: m}}); err != nil || !m.kept {
		t.Fatalf("first decryption: %v, kept %t", err, m.kept)
	}
	if _, err := Prepare(t.Context(), bundle(t, plainYAML, enc), Options{Decryption: Decryption{Memo: m}}); err == nil {
		t.Fatal("an encrypted object without keys was not refused")
	}
	if m.kept || m.changed != nil {
		t.Error("the plaintexts of the last decryption are still kept")
	}
}
