package engine

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// scaleAs sets the replicas of Deployment name through its scale subresource as manager,
// as the HPA (kube-controller-manager) does.
func (h *harness) scaleAs(name, manager string, replicas int64) {
	h.t.Helper()
	dep := h.live("apps/v1", "Deployment", h.ns, name)
	if err := h.plain.SubResource("scale").Update(h.ctx, dep, client.WithSubResourceBody(scaleTo(h.ns, name, replicas)),
		client.FieldOwner(manager)); err != nil {
		h.t.Fatal(err)
	}
}

// convergeEntry is the live object's managedFields entry of Converge's apply (JSON, all of
// it: fields, time, version), and whether it owns spec.replicas.
func convergeEntry(t *testing.T, live *unstructured.Unstructured) (entry string, ownsReplicas bool) {
	t.Helper()
	for _, mf := range live.GetManagedFields() {
		if mf.Manager == FieldManager && mf.Operation == metav1.ManagedFieldsOperationApply && mf.Subresource == "" {
			b, err := json.Marshal(mf)
			if err != nil {
				t.Fatal(err)
			}
			return string(b), strings.Contains(string(mf.FieldsV1.Raw), `"f:replicas"`)
		}
	}
	t.Fatalf("%s has no managedFields entry of %s's apply", live.GetName(), FieldManager)
	return "", false
}

// TestIgnoredReplicasLeftToTheAutoscaler: an HPA-like manager (kube-controller-manager
// through the scale subresource) changes spec.replicas of a Deployment that an ignore rule
// covers, by path or by naming the manager. A dry-run, and an apply asked for a diff, then
// show the Deployment unchanged with no diff; the next apply of a changed render (a label added) leaves replicas at the
// scaled value and Converge's managedFields entry without spec.replicas; a second scale
// leaves that entry byte-identical, and so does the apply after it (what a drift trigger on
// Converge's own entry relies on). With the watch cache's memo too. Before, the ignored path
// was applied with the live value: Converge co-owned spec.replicas again, and every scale
// changed its entry.
func TestIgnoredReplicasLeftToTheAutoscaler(t *testing.T) {
	target := &ObjectSelector{Kind: "Deployment"}
	for _, rule := range []struct {
		name string
		rule IgnoreRule
	}{
		{"path", IgnoreRule{Paths: []string{"/spec/replicas"}, Target: target}},
		{"managers", IgnoreRule{Managers: []string{"kube-controller-manager"}, Target: target}},
	} {
		for _, watched := range []bool{false, true} {
			t.Run(rule.name+map[bool]string{false: "/listed", true: "/watched"}[watched], func(t *testing.T) {
				h := newHarness(t, Hooks{})
				if watched {
					h = newWatchHarness(t)
				}
				opts := testOpts()
				opts.Ignore = []IgnoreRule{rule.rule}
				h.apply(opts, deployment(h.ns, "web", "1"))
				h.scaleAs("web", "kube-controller-manager", 3)

				dry := opts
				dry.DryRun = true
				res, err := h.eng.Apply(h.ctx, h.set(deployment(h.ns, "web", "1")), dry)
				if err != nil {
					t.Fatal(err)
				}
				if c := changesByName(res)["Deployment web"]; c.Action != ActionUnchanged || c.Diff != "" {
					t.Errorf("dry-run after the scale: %s\n%s", c.Action, c.Diff)
				}
				withDiff := opts
				withDiff.Diff = true
				if c := changesByName(h.apply(withDiff, deployment(h.ns, "web", "1")))["Deployment web"]; c.Action != ActionUnchanged || c.Diff != "" {
					t.Errorf("apply with a diff after the scale: %s\n%s", c.Action, c.Diff)
				}

				labeled := deployment(h.ns, "web", "1")
				labeled.SetLabels(map[string]string{"team": "a"})
				h.apply(opts, labeled)
				live := h.live("apps/v1", "Deployment", h.ns, "web")
				replicas, _, _ := unstructured.NestedInt64(live.Object, "spec", "replicas")
				entry, owns := convergeEntry(t, live)
				if replicas != 3 || live.GetLabels()["team"] != "a" || owns {
					t.Fatalf("after the apply: replicas %d, labels %v, Converge's entry owns spec.replicas: %v; want 3, team=a, false\n%s",
						replicas, live.GetLabels(), owns, entry)
				}

				h.scaleAs("web", "kube-controller-manager", 4)
				if got, _ := convergeEntry(t, h.live("apps/v1", "Deployment", h.ns, "web")); got != entry {
					t.Errorf("a scale changed Converge's entry:\n%s\nwas\n%s", got, entry)
				}
				res = h.apply(opts, labeled)
				if got := changesByName(res)["Deployment web"].Action; got != ActionUnchanged {
					t.Errorf("apply after the second scale: %s, want unchanged", got)
				}
				live = h.live("apps/v1", "Deployment", h.ns, "web")
				replicas, _, _ = unstructured.NestedInt64(live.Object, "spec", "replicas")
				if got, _ := convergeEntry(t, live); got != entry || replicas != 4 {
					t.Errorf("after the apply: replicas %d (want 4); Converge's entry\n%s\nwas\n%s", replicas, got, entry)
				}
			})
		}
	}
}

// TestIgnoreManagersNoOpCostsNothingMore: a manager rule costs a converged no-op run no
// request beyond the same run without it, listed (the survey's LIST) and watched (the
// inventory read alone); a field the named manager changed since is left as it set it and
// sends nothing. Without the rule the edit is drift and is set back.
func TestIgnoreManagersNoOpCostsNothingMore(t *testing.T) {
	t.Run("listed", func(t *testing.T) {
		h := newHarness(t, Hooks{})
		opts := testOpts()
		objs := manyCMs(h.ns, "1", 10)
		h.apply(opts, objs...)
		h.rt.Reset()
		h.apply(opts, objs...)
		without := h.rt.Count()
		opts.Ignore = []IgnoreRule{{Managers: []string{"autoscaler"}, Target: &ObjectSelector{Kind: "ConfigMap"}}}
		h.editCM("cm-03", "v", "scaled")
		h.rt.Reset()
		res := h.apply(opts, objs...)
		if s := res.Summary(); s.Unchanged != 10 || h.rt.Count() > without || len(h.rt.Writes()) != 0 {
			t.Errorf("no-op with the rule: %+v, %d requests (without it: %d), writes %v", s, h.rt.Count(), without, h.rt.Writes())
		}
		if got := cmData(h, "cm-03", "v"); got != "scaled" {
			t.Errorf("cm-03 data.v = %q, want the autoscaler's value", got)
		}
		opts.Ignore = nil
		h.apply(opts, objs...)
		if got := cmData(h, "cm-03", "v"); got != "1" {
			t.Errorf("without the rule: cm-03 data.v = %q, want it set back to 1", got)
		}
	})
	t.Run("watched", func(t *testing.T) {
		h := newWatchHarness(t)
		opts := testOpts()
		opts.Ignore = []IgnoreRule{{Managers: []string{"autoscaler"}, Target: &ObjectSelector{Kind: "ConfigMap"}}}
		objs := manyCMs(h.ns, "1", 20)
		h.apply(opts, objs...)
		h.settle(opts, 1, objs)
		h.editCM("cm-03", "v", "scaled")
		if s := h.settle(opts, 1, objs).Summary(); s.Unchanged != 20 {
			t.Errorf("no-op summary = %+v, want 20 unchanged", s)
		}
		if got := cmData(h, "cm-03", "v"); got != "scaled" {
			t.Errorf("cm-03 data.v = %q, want the autoscaler's value", got)
		}
	})
}

// TestIgnoreManagersUnmatchedReported: a manager rule whose managers own no field the render
// sets in the objects it selects is reported once an object exists (a run that only creates
// knows nothing yet), like a path no object sets; a rule whose target selects nothing is
// reported at once; a rule whose manager owns a field is not reported; and a rule naming
// Converge's own manager or an empty name is a terminal error naming the rule.
func TestIgnoreManagersUnmatchedReported(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Ignore = []IgnoreRule{
		{Managers: []string{"autoscaler"}, Target: &ObjectSelector{Kind: "ConfigMap"}},
		{Managers: []string{"nobody"}, Target: &ObjectSelector{Kind: "ConfigMap"}},
		{Managers: []string{"autoscaler"}, Target: &ObjectSelector{Kind: "Secret"}},
	}
	cm := configMap(h.ns, "cm", map[string]any{"v": "1"})
	res := h.apply(opts, cm)
	if want := []string{"ignore rule 2 selects no object of the set"}; !equalStrings(res.IgnoreUnmatched, want) {
		t.Errorf("first run: IgnoreUnmatched = %q, want %q", res.IgnoreUnmatched, want)
	}
	h.editCM("cm", "v", "scaled")
	res = h.apply(opts, cm)
	if len(res.IgnoreUnmatched) != 2 || !strings.HasPrefix(res.IgnoreUnmatched[1], "ignore rule 1: none of the 1 existing objects") ||
		!strings.Contains(res.IgnoreUnmatched[1], "nobody") {
		t.Errorf("second run: IgnoreUnmatched = %q, want rules 2 and 1 (nobody owns nothing)", res.IgnoreUnmatched)
	}
	for _, bad := range []string{"", FieldManager} {
		opts.Ignore = []IgnoreRule{{Paths: []string{"/data/v"}}, {Managers: []string{bad}}}
		if _, err := h.eng.Apply(h.ctx, h.set(cm), opts); err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), "ignore rule 1") {
			t.Errorf("manager %q: %v, want a terminal error naming rule 1", bad, err)
		}
	}
	if got := cmData(h, "cm", "v"); got != "scaled" {
		t.Errorf("cm data.v = %q, want the autoscaler's value", got)
	}
}

func equalStrings(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00")
}

// TestIgnoreManagersLeavesInjectedFields: a webhook-like manager (a plain update as
// sidecar-injector) injects a container before the rendered one, changes the rendered
// container's image and annotates the pod template. With a rule naming it, the next apply of
// a changed render keeps all three, found by the container's key although its position
// moved, and Converge's entry does not own the image; no conflict is reported. Without the
// rule the rendered image is set back.
func TestIgnoreManagersLeavesInjectedFields(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, deployment(h.ns, "web", "1"))
	// The deployment controller writes the object too: read it again on a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := h.live("apps/v1", "Deployment", h.ns, "web")
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		cs[0].(map[string]any)["image"] = "example.invalid/app:mutated"
		cs = append([]any{map[string]any{"name": "proxy", "image": "example.invalid/proxy:1"}}, cs...)
		_ = unstructured.SetNestedSlice(u.Object, cs, "spec", "template", "spec", "containers")
		_ = unstructured.SetNestedField(u.Object, "true", "spec", "template", "metadata", "annotations", "sidecar.example/injected")
		return h.plain.Update(h.ctx, u, client.FieldOwner("sidecar-injector"))
	})
	if err != nil {
		t.Fatal(err)
	}
	opts.Ignore = []IgnoreRule{{Managers: []string{"sidecar-*"}, Target: &ObjectSelector{Group: "apps", Kind: "Deployment"}}}
	labeled := deployment(h.ns, "web", "1")
	labeled.SetLabels(map[string]string{"team": "a"})
	if c := changesByName(h.apply(opts, labeled))["Deployment web"]; c.Action != ActionConfigured {
		t.Fatalf("apply of the changed render: %s %q, want configured", c.Action, c.Message)
	}
	read := func() (images []string, injected string, entry string) {
		live := h.live("apps/v1", "Deployment", h.ns, "web")
		cs, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "containers")
		for _, c := range cs {
			images = append(images, c.(map[string]any)["name"].(string)+"="+c.(map[string]any)["image"].(string))
		}
		injected, _, _ = unstructured.NestedString(live.Object, "spec", "template", "metadata", "annotations", "sidecar.example/injected")
		entry, _ = convergeEntry(t, live)
		return images, injected, entry
	}
	images, injected, entry := read()
	if strings.Join(images, " ") != "proxy=example.invalid/proxy:1 c=example.invalid/app:mutated" || injected != "true" ||
		strings.Contains(entry, `"f:image"`) || webLabel(h, "team") != "a" {
		t.Errorf("with the rule: containers %v, injected %q, Converge's entry\n%s", images, injected, entry)
	}
	opts.Ignore = nil
	h.apply(opts, labeled)
	if images, _, _ := read(); strings.Join(images, " ") != "proxy=example.invalid/proxy:1 c=example.invalid/app:1" {
		t.Errorf("without the rule: containers %v, want c's image set back to the render's", images)
	}
}

// webLabel is the label key of the live Deployment web.
func webLabel(h *harness, key string) string {
	return h.live("apps/v1", "Deployment", h.ns, "web").GetLabels()[key]
}

// TestIgnoreManagersAreNotTakenOver: a manager on the take-over list (kubectl-edit, by the
// default kubectl-*) that an ignore rule names keeps its fields on the objects the rule
// selects: no hand-over moves them to Converge, the edited value stays, and the same edit of
// an object the rule does not select is taken over and set back. Before, the hand-over
// renamed the manager's entry to Converge's and the apply set the field back.
func TestIgnoreManagersAreNotTakenOver(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	objs := []*unstructured.Unstructured{configMap(h.ns, "kept", map[string]any{"v": "1"}), configMap(h.ns, "other", map[string]any{"v": "1"})}
	h.apply(opts, objs...)
	for _, name := range []string{"kept", "other"} {
		h.update("ConfigMap", name, "kubectl-edit", func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "edited", "data", "v")
		})
	}
	opts.Ignore = []IgnoreRule{{Managers: []string{"kubectl-edit"}, Target: &ObjectSelector{Kind: "ConfigMap", Name: "kept"}}}
	h.apply(opts, objs...)
	managers := func(name string) []string {
		var out []string
		for _, mf := range h.liveCM(name).GetManagedFields() {
			out = append(out, mf.Manager)
		}
		return out
	}
	if got, ms := cmData(h, "kept", "v"), managers("kept"); got != "edited" || !strings.Contains(strings.Join(ms, " "), "kubectl-edit") {
		t.Errorf("kept: data.v %q, managers %v; want kubectl-edit's value and entry kept", got, ms)
	}
	if got, ms := cmData(h, "other", "v"), managers("other"); got != "1" || strings.Contains(strings.Join(ms, " "), "kubectl-edit") {
		t.Errorf("other: data.v %q, managers %v; want it taken over and set back", got, ms)
	}
}
