package engine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// editCM sets data.key of the ConfigMap name with a plain update by another field manager,
// as an autoscaler or kubectl edit would.
func (h *harness) editCM(name, key, value string) {
	h.t.Helper()
	live := h.liveCM(name)
	if err := unstructured.SetNestedField(live.Object, value, "data", key); err != nil {
		h.t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, live, client.FieldOwner("autoscaler")); err != nil {
		h.t.Fatal(err)
	}
}

func cmData(h *harness, name, key string) string {
	v, _, _ := unstructured.NestedString(h.liveCM(name).Object, "data", key)
	return v
}

// TestIgnoreLeavesAnotherManagersFieldAlone: a field an ignore rule names is created as
// rendered, then, once another manager changed it, neither shown as a change by a dry-run
// nor set back by an apply, even when the render changes it; the same field of an object
// the rule does not select is set back (I7), and the rest of the selected object still
// follows the render. With the watch cache too, whose memo would otherwise send a changed
// render at once without reading the live object. Without the rules, the dry-run showed
// web configured and the apply set data.replicas back to the render's value.
func TestIgnoreLeavesAnotherManagersFieldAlone(t *testing.T) {
	for _, watched := range []bool{false, true} {
		t.Run(map[bool]string{false: "listed", true: "watched"}[watched], func(t *testing.T) {
			h := newHarness(t, Hooks{})
			if watched {
				h = newWatchHarness(t)
			}
			opts := testOpts()
			opts.Ignore = []IgnoreRule{{Paths: []string{"/data/replicas"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: "web"}}}
			render := func(replicas, image string) []*unstructured.Unstructured {
				return []*unstructured.Unstructured{
					configMap(h.ns, "web", map[string]any{"replicas": replicas, "image": image}),
					configMap(h.ns, "other", map[string]any{"replicas": replicas}),
				}
			}
			h.apply(opts, render("3", "v1")...)
			if got := cmData(h, "web", "replicas"); got != "3" {
				t.Fatalf("created with replicas %q, want the render's 3", got)
			}
			h.editCM("web", "replicas", "7")
			h.editCM("other", "replicas", "7")

			dry := opts
			dry.DryRun = true
			res, err := h.eng.Apply(h.ctx, h.set(render("3", "v1")...), dry)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range res.Changes {
				if c.ID == cmID(h.ns, "web") && (c.Action != ActionUnchanged || c.Diff != "") {
					t.Errorf("dry-run shows the ignored field: web %s\n%s", c.Action, c.Diff)
				}
			}
			for range 3 {
				h.apply(opts, render("3", "v1")...)
			}
			res = h.apply(opts, render("5", "v2")...)
			if got := actions(res.Changes)[cmID(h.ns, "web")]; got != ActionConfigured {
				t.Errorf("web with a new image: action %s, want configured", got)
			}
			if got, img := cmData(h, "web", "replicas"), cmData(h, "web", "image"); got != "7" || img != "v2" {
				t.Errorf("web: replicas %q image %q, want the other manager's 7 and the render's v2", got, img)
			}
			if got := cmData(h, "other", "replicas"); got != "5" {
				t.Errorf("other (not selected): replicas %q, want the render's 5", got)
			}
			res = h.apply(opts, render("5", "v2")...)
			if got := actions(res.Changes)[cmID(h.ns, "web")]; got != ActionUnchanged {
				t.Errorf("web on a no-op run: action %s, want unchanged", got)
			}
		})
	}
}

// TestIgnoreRuleMatchingNothingReported: a rule whose target selects no object, and one
// whose selected objects do not set its path, are reported in the Result; the run applies.
func TestIgnoreRuleMatchingNothingReported(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Ignore = []IgnoreRule{
		{Paths: []string{"/data/k"}, Target: &ObjectSelector{Kind: "ConfigMap"}},
		{Paths: []string{"/spec/replicas"}, Target: &ObjectSelector{Kind: "Deployment"}},
		{Paths: []string{"/data/typo"}, Target: &ObjectSelector{Kind: "ConfigMap"}},
	}
	res := h.apply(opts, configMap(h.ns, "cm", map[string]any{"k": "v"}))
	if len(res.IgnoreUnmatched) != 2 || !strings.Contains(res.IgnoreUnmatched[0], "ignore rule 1 selects no object") ||
		!strings.Contains(res.IgnoreUnmatched[1], "ignore rule 2") || !strings.Contains(res.IgnoreUnmatched[1], "/data/typo") {
		t.Errorf("IgnoreUnmatched = %q, want rules 1 and 2", res.IgnoreUnmatched)
	}
	if h.liveCM("cm") == nil {
		t.Error("the run did not apply")
	}
	opts.Ignore = []IgnoreRule{{Paths: []string{"data/k"}}}
	if _, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "cm", nil)), opts); err == nil || !IsTerminal(err) {
		t.Errorf("a path that is not a JSON pointer: want a terminal error, got %v", err)
	}
}

// TestWatchNoOpWithIgnoreRules: rules selecting every object cost a converged no-op run no
// request beyond the inventory read (the memo decides before any rule is looked at), and
// another manager's change of an ignored field settles back to that cost, the field left
// as the other manager set it.
func TestWatchNoOpWithIgnoreRules(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	opts.Ignore = []IgnoreRule{{Paths: []string{"/data/v"}, Target: &ObjectSelector{Kind: "ConfigMap"}}}
	objs := manyCMs(h.ns, "1", 20)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	h.editCM("cm-03", "v", "scaled")
	res := h.settle(opts, 1, objs)
	if s := res.Summary(); s.Unchanged != 20 {
		t.Errorf("no-op summary = %+v, want 20 unchanged", s)
	}
	if got := cmData(h, "cm-03", "v"); got != "scaled" {
		t.Errorf("cm-03 data.v = %q, want the other manager's value", got)
	}
}
