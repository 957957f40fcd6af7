package engine

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// docsOf is objs as a set of JSON documents (Set.Docs), as a daemon's render cache holds them.
func (h *harness) docsOf(objs ...*unstructured.Unstructured) Set {
	h.t.Helper()
	set := Set{Inventory: h.ref}
	for i, o := range objs {
		js, err := json.Marshal(o.Object)
		if err != nil {
			h.t.Fatal(err)
		}
		set.Docs = append(set.Docs, js)
		set.Origins = append(set.Origins, "apps/"+string(rune('a'+i))+".yaml")
	}
	return set
}

// TestSetOfDocuments: a set given as JSON documents is prepared one object at a time, and no
// item holds its object once prepared; each decodes again to the object a decoded set
// prepares. Applied, it behaves as the decoded set does: a CRD with its custom resource, a
// default namespace, an ignore rule, then a no-op that changes nothing. A document that does
// not decode fails the run before anything is written, naming the object and its file.
func TestSetOfDocuments(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(map[bool]string{false: "listed", true: "watched"}[watched], func(t *testing.T) {
			h := newHarness(t, Hooks{})
			if watched {
				h = newWatchHarness(t)
			}
			group := strings.ReplaceAll(h.ns, "-", "") + ".docs.converge.test"
			t.Cleanup(func() { _ = h.plain.Delete(context.Background(), crdFor(group)) })
			render := func(replicas string) []*unstructured.Unstructured {
				return []*unstructured.Unstructured{
					widget(group, h.ns, "w1", 1),
					configMap("", "defaulted", map[string]any{"k": "v"}),
					configMap(h.ns, "web", map[string]any{"replicas": replicas, "image": "v1"}),
					crdFor(group),
				}
			}
			opts := testOpts()
			opts.DefaultNamespace = h.ns
			opts.Ignore = []IgnoreRule{{Paths: []string{"/data/replicas"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: "web"}}}

			items, _, err := h.eng.prepare(h.docsOf(render("3")...), opts)
			if err != nil {
				t.Fatal(err)
			}
			decoded, _, err := h.eng.prepare(Set{Inventory: h.ref, Objects: render("3")}, opts)
			if err != nil {
				t.Fatal(err)
			}
			for i, it := range items {
				if it.obj != nil {
					t.Errorf("%s: holds its object once prepared", it.key)
				}
				o, err := it.object()
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(decoded[i].obj.Object, o.Object); diff != "" {
					t.Errorf("%s: decoded again (-from the decoded set +from its document):\n%s", it.key, diff)
				}
			}

			res, err := h.eng.Apply(h.ctx, h.docsOf(render("3")...), opts)
			if err != nil {
				t.Fatal(err)
			}
			for id, a := range actions(res.Changes) {
				if a != ActionCreated {
					t.Errorf("first run: %s %s, want created", id, a)
				}
			}
			if len(res.Changes) != 4 || len(res.IgnoreUnmatched) != 0 {
				t.Errorf("first run: %d changes, unmatched rules %v; want 4 and none", len(res.Changes), res.IgnoreUnmatched)
			}
			h.editCM("web", "replicas", "7")
			for range 2 {
				if res, err = h.eng.Apply(h.ctx, h.docsOf(render("5")...), opts); err != nil {
					t.Fatal(err)
				}
			}
			for id, a := range actions(res.Changes) {
				if a != ActionUnchanged {
					t.Errorf("no-op run: %s %s, want unchanged", id, a)
				}
			}
			if got := cmData(h, "web", "replicas"); got != "7" {
				t.Errorf("web: replicas %q, want the ignored field left at 7", got)
			}

			bad := h.docsOf(render("3")...)
			bad.Docs[1] = []byte(`{"apiVersion": "v1", "kind": `)
			before := h.inventory()
			if _, err := h.eng.Apply(h.ctx, bad, opts); err == nil || !strings.Contains(err.Error(), "object 1: apps/b.yaml") || !IsTerminal(err) {
				t.Errorf("a document that does not decode: %v; want a terminal error naming object 1 and its file", err)
			}
			if diff := cmp.Diff(before, h.inventory()); diff != "" {
				t.Errorf("a document that does not decode changed the inventory:\n%s", diff)
			}
		})
	}
}
