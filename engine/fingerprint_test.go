package engine

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestFingerprintBlindToIgnoredFields checks the fingerprint of an object whose owner has
// ignore rules: the ignored paths (and what lies under them) and the apply entries of the
// managers a rule names do not count, everything else does; a path through a list index
// leaves nothing out; an object the rules do not select, one of another owner, one whose
// kind is not known, and one of an inventory whose rules were cleared or dropped are
// fingerprinted whole.
func TestFingerprintBlindToIgnoredFields(t *testing.T) {
	ig, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{
		{Paths: []string{"/data/v", "/spec/containers/0/image"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: "cm"}},
		{Managers: []string{"sidecar-*"}},
	}}, "", true)
	if err != nil {
		t.Fatal(err)
	}
	f := NewIgnoredFields()
	f.set("inv", ig)
	apply := func(manager, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationApply,
			FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	object := func(name, owner, kind string, entries ...metav1.ManagedFieldsEntry) *metav1.PartialObjectMetadata {
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: kind})
		pm.Name, pm.Namespace, pm.ManagedFields = name, "ns", entries
		pm.Annotations = map[string]string{OwnerAnnotation: owner}
		return pm
	}
	fp := func(pm *metav1.PartialObjectMetadata) string {
		t.Helper()
		if _, err := f.stripManagedFields(pm); err != nil {
			t.Fatal(err)
		}
		if pm.ManagedFields != nil || pm.SelfLink == "" {
			t.Fatalf("%s: managedFields %v, fingerprint %q", pm.Name, pm.ManagedFields, pm.SelfLink)
		}
		return appliedSets(pm)
	}
	// Converge's entries own the owner annotation too, as every apply of it does.
	const (
		ann      = `"f:metadata":{"f:annotations":{"f:config.k8s.io/owning-inventory":{}}}`
		vw       = `{"f:data":{"f:v":{},"f:w":{}},` + ann + `}`
		w        = `{"f:data":{"f:w":{}},` + ann + `}`
		v        = `{"f:data":{"f:v":{}},` + ann + `}`
		vSubtree = `{"f:data":{"f:v":{"f:deep":{}},"f:w":{}},` + ann + `}`
		vAlone   = `{"f:data":{"f:v":{}}}`
		image    = `{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:image":{},"f:name":{}}}},` + ann + `}`
		noImage  = `{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:name":{}}}},` + ann + `}`
	)
	same := []struct {
		name string
		a, b []metav1.ManagedFieldsEntry
	}{
		{"the ignored data.v taken from Converge", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, w)}},
		{"a field under the ignored data.v", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, vSubtree)}},
		{"an apply entry of the ignored data.v alone", []metav1.ManagedFieldsEntry{apply(FieldManager, w)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, w), apply("tuner", vAlone)}},
		{"a named manager's apply entry", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, vw), apply("sidecar-injector", `{"f:data":{"f:x":{}}}`)}},
	}
	for _, c := range same {
		if a, b := fp(object("cm", "inv", "ConfigMap", c.a...)), fp(object("cm", "inv", "ConfigMap", c.b...)); a != b {
			t.Errorf("%s: fingerprint %s, then %s", c.name, a, b)
		}
		if a, b := fp(object("cm", "other", "ConfigMap", c.a...)), fp(object("cm", "other", "ConfigMap", c.b...)); a == b {
			t.Errorf("%s, another owner's object: fingerprint %s both times", c.name, a)
		}
	}
	differ := []struct {
		name       string
		a, b       []metav1.ManagedFieldsEntry
		obj, owner string
		kind       string
	}{
		{"data.w taken from Converge", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, v)}, "cm", "inv", "ConfigMap"},
		{"a field under a list index's element", []metav1.ManagedFieldsEntry{apply(FieldManager, image)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, noImage)}, "cm", "inv", "ConfigMap"},
		{"data.v of an object the paths rule does not select", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, w)}, "other", "inv", "ConfigMap"},
		{"data.v of an object of unknown kind", []metav1.ManagedFieldsEntry{apply(FieldManager, vw)},
			[]metav1.ManagedFieldsEntry{apply(FieldManager, w)}, "cm", "inv", ""},
	}
	for _, c := range differ {
		if a, b := fp(object(c.obj, c.owner, c.kind, c.a...)), fp(object(c.obj, c.owner, c.kind, c.b...)); a == b {
			t.Errorf("%s: fingerprint %s both times", c.name, a)
		}
	}

	seen := object("cm", "inv", "ConfigMap", apply(FieldManager, vw))
	first := fp(seen)
	seen.SelfLink = "kept"
	if _, err := f.stripManagedFields(seen); err != nil || seen.SelfLink != "kept" {
		t.Errorf("an object seen again: fingerprint %q (err %v), want it left as it was", seen.SelfLink, err)
	}

	for what, forget := range map[string]func(){"cleared": func() { f.set("inv", nil) }, "dropped": func() { f.drop("inv") }} {
		f.set("inv", ig)
		forget()
		if a, b := fp(object("cm", "inv", "ConfigMap", apply(FieldManager, vw))), fp(object("cm", "inv", "ConfigMap", apply(FieldManager, w))); a == b {
			t.Errorf("rules %s: data.v taken from Converge left fingerprint %s", what, a)
		}
		if got := fp(object("cm", "inv", "ConfigMap", apply(FieldManager, vw))); got != fingerprintApplied([]metav1.ManagedFieldsEntry{apply(FieldManager, vw)}, nil, nil) || got == first {
			t.Errorf("rules %s: fingerprint %s, want the whole object's", what, got)
		}
	}
}

// TestFingerprintKeepsRulesSelectingByMetadata: a rule whose target selects by labels,
// annotations or API version leaves nothing out of the fingerprint, since the run selects
// the desired object and the watch cache would the live one. Without it: a label added by
// hand to the live object made the fingerprint blind to spec.replicas, which the run applied
// (the desired object lacked the label), and another manager's change of it woke nothing.
func TestFingerprintKeepsRulesSelectingByMetadata(t *testing.T) {
	for _, target := range []*ObjectSelector{
		{Kind: "Deployment", LabelSelector: "pinned=true"},
		{Kind: "Deployment", AnnotationSelector: "pinned=true"},
		{Kind: "Deployment", Version: "v1"},
	} {
		ig, err := newIgnorer(ApplyOptions{Ignore: []IgnoreRule{{Paths: []string{"/spec/replicas"}, Target: target}}}, "", true)
		if err != nil {
			t.Fatal(err)
		}
		f := NewIgnoredFields()
		f.set("inv", ig)
		obj := func(fields string) *metav1.PartialObjectMetadata {
			pm := &metav1.PartialObjectMetadata{}
			pm.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
			pm.Name, pm.Namespace = "web", "ns"
			pm.Annotations = map[string]string{OwnerAnnotation: "inv", "pinned": "true"} // set on the live object by hand
			pm.Labels = map[string]string{"pinned": "true"}
			pm.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
				FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}}
			if _, err := f.stripManagedFields(pm); err != nil {
				t.Fatal(err)
			}
			return pm
		}
		before := obj(`{"f:spec":{"f:replicas":{},"f:x":{}}}`)
		after := obj(`{"f:spec":{"f:x":{}}}`) // another manager took spec.replicas
		if appliedSets(before) == appliedSets(after) {
			t.Errorf("target %+v: spec.replicas taken from Converge's apply left the fingerprint as it was", *target)
		}
	}
}
