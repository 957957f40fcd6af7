package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// crdFor returns a namespaced CRD for kind Widget in group and a custom resource of it.
func crdFor(group string) *unstructured.Unstructured {
	return obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets."+group, map[string]any{
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type": "object", "properties": map[string]any{"size": map[string]any{"type": "integer"}},
					}},
				}},
			}},
		},
	})
}

func widget(group, ns, name string, size int64) *unstructured.Unstructured {
	return obj(group+"/v1", "Widget", ns, name, map[string]any{"spec": map[string]any{"size": size}})
}

// TestCRDWithCustomResources checks staging and dry-run: a set holding a CRD, its custom
// resources and a Namespace with objects in it dry-runs cleanly before anything exists
// (changing nothing: no object, no inventory), applies in one go, and a later dry-run of a
// change reports a diff while leaving every resourceVersion as it was.
func TestCRDWithCustomResources(t *testing.T) {
	h := newHarness(t, Hooks{})
	group := strings.ReplaceAll(h.ns, "-", "") + ".converge.test"
	extraNS := h.ns + "-x"
	t.Cleanup(func() {
		_ = h.plain.Delete(context.Background(), crdFor(group))
		_ = h.plain.Delete(context.Background(), obj("v1", "Namespace", "", extraNS, nil))
	})
	set := func(size int64) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			widget(group, h.ns, "w1", size), widget(group, extraNS, "w2", 1),
			configMap(extraNS, "cm", nil), obj("v1", "Namespace", "", extraNS, nil), crdFor(group),
		}
	}
	opts := testOpts()
	dry := opts
	dry.DryRun = true
	res := h.apply(dry, set(1)...)
	wantMsg := map[string]string{
		"_widgets." + group + "_apiextensions.k8s.io_CustomResourceDefinition": "",
		"_" + extraNS + "__Namespace":                                          "",
		h.ns + "_w1_" + group + "_Widget":                                      msgCRDPending,
		extraNS + "_w2_" + group + "_Widget":                                   msgCRDPending,
		extraNS + "_cm__ConfigMap":                                             msgNamespacePending,
	}
	gotMsg := map[string]string{}
	for _, c := range res.Changes {
		gotMsg[c.ID] = c.Message
		if c.Action != ActionCreated {
			t.Errorf("dry-run %s: %s, want created", c.ID, c.Action)
		}
	}
	if diff := cmp.Diff(wantMsg, gotMsg); diff != "" {
		t.Errorf("dry-run messages (-want +got):\n%s", diff)
	}
	if h.live("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets."+group) != nil ||
		h.live("v1", "Namespace", "", extraNS) != nil || h.live("v1", "ConfigMap", h.ns, h.ref.Name) != nil {
		t.Fatal("the dry-run created something")
	}

	h.rt.Reset()
	res = h.apply(opts, set(1)...)
	if diff := cmp.Diff(Summary{Created: 5}, res.Summary()); diff != "" {
		t.Errorf("apply (-want +got):\n%s", diff)
	}
	// The custom resources of the new CRD resolve once it is Established; each is alone in
	// its namespace, so each is read with one GET (the survey lists groups of two or more)
	// and applied once.
	if g, p := h.rt.CountResource("get", "widgets", ""), h.rt.CountResource("patch", "widgets", ""); g != 2 || p != 2 {
		t.Errorf("%d GETs and %d PATCHes of widgets during the apply, want 2 and 2: %v", g, p, h.rt.Counts())
	}

	before := h.resourceVersions(group, extraNS)
	res = h.apply(dry, set(2)...)
	want := map[string]Action{}
	for id := range wantMsg {
		want[id] = ActionUnchanged
	}
	want[h.ns+"_w1_"+group+"_Widget"] = ActionConfigured
	if diff := cmp.Diff(want, actions(res.Changes)); diff != "" {
		t.Errorf("dry-run of a change (-want +got):\n%s", diff)
	}
	for _, c := range res.Changes {
		if c.Action == ActionConfigured && (!strings.Contains(c.Diff, "-  size: 1") || !strings.Contains(c.Diff, "+  size: 2")) {
			t.Errorf("diff of %s:\n%s", c.ID, c.Diff)
		}
	}
	if diff := cmp.Diff(before, h.resourceVersions(group, extraNS)); diff != "" {
		t.Errorf("the dry-run changed resourceVersions (-before +after):\n%s", diff)
	}

	// The custom resources and then the CRD leave the set: both are pruned (kinds the
	// engine's client scheme does not know).
	res, err := h.eng.Apply(h.ctx, h.set(configMap(extraNS, "cm", nil), obj("v1", "Namespace", "", extraNS, nil)), opts)
	if err != nil {
		t.Fatalf("prune of the CRD and its custom resources: %v", err)
	}
	if s := res.Summary(); s.Pruned != 3 || s.Failed != 0 {
		t.Errorf("prune: %+v, want 3 pruned", s)
	}
}

func (h *harness) resourceVersions(group, extraNS string) map[string]string {
	out := map[string]string{}
	for _, o := range []*unstructured.Unstructured{
		h.live(group+"/v1", "Widget", h.ns, "w1"), h.live(group+"/v1", "Widget", extraNS, "w2"),
		h.live("v1", "ConfigMap", extraNS, "cm"), h.live("v1", "Namespace", "", extraNS),
		h.live("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets."+group),
		h.live("v1", "ConfigMap", h.ns, h.ref.Name),
	} {
		if o == nil {
			h.t.Fatal("an applied object is missing")
		}
		out[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = o.GetResourceVersion()
	}
	return out
}
