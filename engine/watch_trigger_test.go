package engine

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestWatchWakesOnlyForWhatAnApplySet checks that the watch cache reports an out-of-band
// change only when it touches a field an apply set: a Deployment scaled through its scale
// subresource by an autoscaler's manager (the source does not set spec.replicas), and the
// Deployment controller's own annotations and status, wake nobody; an edit of a label the
// source sets does. Two sets share the Deployment informer, whose events arrive in order:
// when the edit of set B's Deployment is reported, the scale of set A's came before it.
//
// Without the fingerprint: the scale changed the generation, and was reported as drift of
// set A (a reconcile per autoscaler step).
func TestWatchWakesOnlyForWhatAnApplySet(t *testing.T) {
	h, reports := newReportingHarness(t)
	opts := testOpts()
	scaled := deployment(h.ns, "scaled", "1")
	unstructured.RemoveNestedField(scaled.Object, "spec", "replicas")
	h.apply(opts, scaled)
	other := h.ref
	other.Name, other.ID = "inventory-b", "inv-b-"+h.ns
	edited := deployment(h.ns, "edited", "1")
	edited.SetLabels(map[string]string{"team": "a"})
	if _, err := h.eng.Apply(h.ctx, Set{Inventory: other, Objects: []*unstructured.Unstructured{edited}}, opts); err != nil {
		t.Fatal(err)
	}
	for len(reports) > 0 {
		<-reports
	}

	dep := h.live("apps/v1", "Deployment", h.ns, "scaled")
	if err := h.plain.SubResource("scale").Update(h.ctx, dep, client.WithSubResourceBody(scaleTo(h.ns, "scaled", 3)),
		client.FieldOwner("kube-controller-manager")); err != nil {
		t.Fatal(err)
	}
	if got := h.live("apps/v1", "Deployment", h.ns, "scaled"); got.GetGeneration() == dep.GetGeneration() {
		t.Fatalf("the scale left generation %d: it changed nothing to report", got.GetGeneration())
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"b"}}}`))
	if err := h.plain.Patch(h.ctx, h.live("apps/v1", "Deployment", h.ns, "edited"), patch, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case id := <-reports:
			switch id {
			case other.ID:
				return
			case h.ref.ID:
				t.Fatalf("the scale of a field no apply sets was reported as drift of %s", id)
			}
		case <-h.ctx.Done():
			t.Fatal("the edit of a label the source sets was never reported")
		}
	}
}

// TestWatchIgnoredFieldsWakeNoReconcile checks that a change of what a Sync's ignore rules
// leave alone wakes no reconcile, while a change of another field the source sets does. The
// source sets data.v, which a paths rule ignores, and data.w; Converge's apply owns both.
// Each of these changes of the ConfigMap is followed by an edit of another inventory's
// ConfigMap (same informer, so its events arrive in order), whose report must come first:
// another manager's first update of data.v (which takes it from Converge's apply entry), a
// manager a managers rule names applying a field and then another set of fields (a new
// apply entry, then a changed one), and an unnamed manager applying data.v alone with force.
// Then another manager's update of data.w must be reported.
//
// Without the rules in the fingerprint: each of the three changed an apply manager's field
// set, and was reported as drift.
func TestWatchIgnoredFieldsWakeNoReconcile(t *testing.T) {
	h, reports := newReportingHarness(t)
	opts := testOpts()
	opts.Ignore = []IgnoreRule{
		{Paths: []string{"/data/v"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: "ignored"}},
		{Managers: []string{"sidecar-*"}, Target: &ObjectSelector{Kind: "ConfigMap"}},
	}
	objs := []*unstructured.Unstructured{configMap(h.ns, "ignored", map[string]any{"v": "1", "w": "1"})}
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	other := h.ref
	other.Name, other.ID = "inventory-b", "inv-b-"+h.ns
	if _, err := h.eng.Apply(h.ctx, Set{Inventory: other, Objects: []*unstructured.Unstructured{
		configMap(h.ns, "sentinel", map[string]any{"s1": "0", "s2": "0", "s3": "0", "s4": "0"})}}, testOpts()); err != nil {
		t.Fatal(err)
	}
	for len(reports) > 0 {
		<-reports
	}

	edit := func(name, manager, data string) {
		t.Helper()
		patch := client.RawPatch(types.MergePatchType, []byte(`{"data":`+data+`}`))
		if err := h.plain.Patch(h.ctx, h.liveCM(name), patch, client.FieldOwner(manager)); err != nil {
			t.Fatal(err)
		}
	}
	applyAs := func(manager string, data map[string]any) {
		t.Helper()
		u := configMap(h.ns, "ignored", data)
		if err := h.plain.Apply(h.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager),
			client.ForceOwnership); err != nil {
			t.Fatal(err)
		}
	}
	// unreported makes one change of the ConfigMap, then edits a field of the sentinel that
	// Converge's apply owns (one per call: an edited field is the editor's), whose report
	// must come before any of the owner's.
	sentinel := 0
	unreported := func(what string, change func()) {
		t.Helper()
		change()
		sentinel++
		edit("sentinel", "kubectl-edit", `{"s`+strconv.Itoa(sentinel)+`":"1"}`)
		for {
			select {
			case id := <-reports:
				switch id {
				case other.ID:
					return
				case h.ref.ID:
					t.Fatalf("%s: reported as drift of %s", what, id)
				}
			case <-h.ctx.Done():
				t.Fatalf("%s: the sentinel's edit was never reported", what)
			}
		}
	}
	unreported("another manager's update of the ignored data.v", func() { edit("ignored", "kubectl-edit", `{"v":"2"}`) })
	unreported("a named manager's apply of data.x", func() { applyAs("sidecar-injector", map[string]any{"x": "1"}) })
	unreported("a named manager's apply of data.y instead", func() { applyAs("sidecar-injector", map[string]any{"y": "1"}) })
	unreported("an unnamed manager's apply of the ignored data.v alone", func() { applyAs("tuner", map[string]any{"v": "3"}) })

	edit("ignored", "kubectl-edit", `{"w":"2"}`)
	for {
		select {
		case id := <-reports:
			if id == h.ref.ID {
				return
			}
		case <-h.ctx.Done():
			t.Fatal("another manager's update of data.w, which the source sets, was never reported")
		}
	}
}
