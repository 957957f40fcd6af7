package engine

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
)

// fluxDeployment is the Deployment web as a Kustomization applies it: Flux's tracking
// labels, an env var B the source later drops.
func fluxDeployment(ns string, env ...map[string]any) *unstructured.Unstructured {
	containers := []any{map[string]any{"name": "web", "image": "registry.example/web:1", "env": anySlice(env)}}
	d := obj("apps/v1", "Deployment", ns, "web", map[string]any{"spec": map[string]any{
		"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
			"spec":     map[string]any{"containers": containers},
		},
	}})
	d.SetLabels(map[string]string{"app": "web"})
	return d
}

func anySlice(ms []map[string]any) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

func envVar(name, value string) map[string]any { return map[string]any{"name": name, "value": value} }

// withLabels returns u with more labels.
func withLabels(u *unstructured.Unstructured, kv ...string) *unstructured.Unstructured {
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	u.SetLabels(l)
	return u
}

// managers lists the main-resource field managers of u as "name/operation".
func managers(u *unstructured.Unstructured) []string {
	var out []string
	for _, mf := range u.GetManagedFields() {
		if mf.Subresource == "" {
			out = append(out, mf.Manager+"/"+string(mf.Operation))
		}
	}
	return out
}

// hasManager reports whether u has a main-resource managedFields entry of manager.
func hasManager(u *unstructured.Unstructured, manager string) bool {
	for _, m := range managers(u) {
		if strings.HasPrefix(m, manager+"/") {
			return true
		}
	}
	return false
}

// TestHandOverOnAdoption: objects Flux's kustomize-controller applied (server-side apply),
// kubectl applied client-side (an update with last-applied-configuration) and Argo CD applied
// are adopted with their fields handed over: same UIDs, the Deployment's template
// unchanged and its generation bumped once (its owner annotation), no entry of the old managers left, their tracking labels and annotations gone
// except a label the source declares, and a field the source no longer declares removed
// from the cluster. A manager not on the list (an autoscaler's replicas) keeps its field.
//
// Without it: the old managers' entries stayed, so the dropped env var and data key stayed
// in the cluster co-owned by kustomize-controller and kubectl, and so did Flux's labels,
// Argo CD's tracking annotation and kubectl's last-applied-configuration.
func TestHandOverOnAdoption(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) { testHandOverOnAdoption(t, watch) })
	}
}

func testHandOverOnAdoption(t *testing.T, watch bool) {
	h := newHarness(t, Hooks{})
	if watch {
		h.useWatchEngine(Options{})
	}
	opts := testOpts()
	opts.Adopt = true

	fluxLabels := []string{"kustomize.toolkit.fluxcd.io/name", "app", "kustomize.toolkit.fluxcd.io/namespace", "flux-system"}
	h.ssa(withLabels(fluxDeployment(h.ns, envVar("A", "1"), envVar("B", "2")), fluxLabels...), "kustomize-controller")
	// The deployment controller writes the Deployment too: update on the latest read.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		u := h.live("apps/v1", "Deployment", h.ns, "web")
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicas")
		return h.plain.Update(h.ctx, u, client.FieldOwner("autoscaler"))
	}); err != nil {
		t.Fatal(err)
	}
	kubectl := annotate(configMap(h.ns, "kubectl", map[string]any{"a": "1", "old": "x"}),
		lastAppliedAnnotation, `{"apiVersion":"v1","kind":"ConfigMap"}`)
	if err := h.plain.Create(h.ctx, kubectl, client.FieldOwner("kubectl-client-side-apply")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"argo", "argo-declared"} {
		h.ssa(annotate(withLabels(configMap(h.ns, name, map[string]any{"a": "1"}), argoInstanceLabel, "app"),
			"argocd.argoproj.io/tracking-id", "app:/ConfigMap:"+h.ns+"/"+name), "argocd-controller")
	}
	h.deploymentsSettled()
	before := map[string]*unstructured.Unstructured{"web": h.live("apps/v1", "Deployment", h.ns, "web")}
	for _, name := range []string{"kubectl", "argo", "argo-declared"} {
		before[name] = h.liveCM(name)
	}

	desired := func(env ...map[string]any) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{fluxDeployment(h.ns, env...), configMap(h.ns, "kubectl", map[string]any{"a": "1"}),
			configMap(h.ns, "argo", map[string]any{"a": "1"}),
			withLabels(configMap(h.ns, "argo-declared", map[string]any{"a": "1"}), argoInstanceLabel, "app")}
	}
	h.apply(opts, desired(envVar("A", "1"), envVar("B", "2"))...)

	web := h.live("apps/v1", "Deployment", h.ns, "web")
	// A Deployment's generation counts its annotations too (they are copied to its
	// ReplicaSets): the owner annotation bumps it once, in the hand-over patch that adds it
	// with the rest, and the apply after changes nothing more. Its template is untouched, so
	// no Pod is replaced.
	if web.GetUID() != before["web"].GetUID() || web.GetGeneration() != before["web"].GetGeneration()+1 ||
		!equality.Semantic.DeepEqual(web.Object["spec"].(map[string]any)["template"], before["web"].Object["spec"].(map[string]any)["template"]) {
		t.Errorf("Deployment web: UID %s generation %d, was %s %d (recreated, or changed more than by its owner annotation)",
			web.GetUID(), web.GetGeneration(), before["web"].GetUID(), before["web"].GetGeneration())
	}
	for name, u := range map[string]*unstructured.Unstructured{"Deployment web": web, "ConfigMap kubectl": h.liveCM("kubectl"),
		"ConfigMap argo": h.liveCM("argo"), "ConfigMap argo-declared": h.liveCM("argo-declared")} {
		for _, m := range []string{"kustomize-controller", "kubectl-client-side-apply", "argocd-controller"} {
			if hasManager(u, m) {
				t.Errorf("%s still has a managedFields entry of %s: %v", name, m, managers(u))
			}
		}
		for _, k := range []string{"kustomize.toolkit.fluxcd.io/name", "kustomize.toolkit.fluxcd.io/namespace"} {
			if _, ok := u.GetLabels()[k]; ok {
				t.Errorf("%s still has the tracking label %s", name, k)
			}
		}
		for _, k := range []string{"argocd.argoproj.io/tracking-id", lastAppliedAnnotation} {
			if _, ok := u.GetAnnotations()[k]; ok {
				t.Errorf("%s still has the tracking annotation %s", name, k)
			}
		}
		if name != "Deployment web" && u.GetUID() != before[strings.TrimPrefix(name, "ConfigMap ")].GetUID() {
			t.Errorf("%s was recreated", name)
		}
		if u.GetAnnotations()[OwnerAnnotation] != h.ref.ID {
			t.Errorf("%s not adopted: owner %q", name, u.GetAnnotations()[OwnerAnnotation])
		}
	}
	if r, _, _ := unstructured.NestedInt64(web.Object, "spec", "replicas"); r != 3 || !hasManager(web, "autoscaler") {
		t.Errorf("the autoscaler's replicas were taken: replicas %d, managers %v", r, managers(web))
	}
	if _, ok := h.liveCM("argo").GetLabels()[argoInstanceLabel]; ok {
		t.Errorf("ConfigMap argo: Argo CD's %s label stayed though the source does not declare it", argoInstanceLabel)
	}
	if v := h.liveCM("argo-declared").GetLabels()[argoInstanceLabel]; v != "app" {
		t.Errorf("ConfigMap argo-declared: the declared label %s = %q, want kept", argoInstanceLabel, v)
	}
	if _, ok, _ := unstructured.NestedString(h.liveCM("kubectl").Object, "data", "old"); ok {
		t.Error("ConfigMap kubectl: data.old, which the source does not declare, stayed (kubectl still owns it)")
	}

	// The source drops env B: the apply removes it, since Converge owns it now.
	h.apply(opts, desired(envVar("A", "1"))...)
	c, _, _ := unstructured.NestedSlice(h.live("apps/v1", "Deployment", h.ns, "web").Object, "spec", "template", "spec", "containers")
	if env := c[0].(map[string]any)["env"].([]any); len(env) != 1 {
		t.Errorf("env B removed from the source stayed in the cluster: %v", env)
	}
}

// TestHandOverCrashBeforeApply: when the hand-over patch lands but its answer is lost (the
// run stops before the apply), the object is already ours (owner annotation, in the
// inventory written ahead), and the next run finishes: the field the source dropped goes.
// Objects that need no hand-over cost no extra request.
//
// Without it: the old manager kept its field and the next run left it in place.
func TestHandOverCrashBeforeApply(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	opts.Adopt = true
	h.ssa(withLabels(configMap(h.ns, "cm", map[string]any{"a": "1", "old": "x"}), "kustomize.toolkit.fluxcd.io/name", "app"),
		"kustomize-controller")
	uid := h.liveCM("cm").GetUID()
	desired := configMap(h.ns, "cm", map[string]any{"a": "1"})

	h.rt.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Name: "cm", Times: 1, DropResponse: true})
	if _, err := h.eng.Apply(h.ctx, h.set(desired), opts); err == nil {
		t.Fatal("Apply succeeded though the hand-over's answer was dropped")
	}
	h.rt.SetRules()
	mid := h.liveCM("cm")
	if hasManager(mid, "kustomize-controller") || mid.GetAnnotations()[OwnerAnnotation] != h.ref.ID {
		t.Fatalf("the hand-over did not land as one write: managers %v, owner %q", managers(mid), mid.GetAnnotations()[OwnerAnnotation])
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "cm"))

	opts.Adopt = false // ours now: no adoption needed to finish
	h.apply(opts, desired)
	live := h.liveCM("cm")
	if _, ok, _ := unstructured.NestedString(live.Object, "data", "old"); ok || live.GetUID() != uid {
		t.Errorf("after the next run: data %v, UID %s (was %s)", live.Object["data"], live.GetUID(), uid)
	}

	h.rt.Reset()
	h.apply(opts, desired)
	if n := h.rt.Count("patch"); n != 0 {
		t.Errorf("a converged run sent %d patches: %v", n, h.rt.Writes())
	}
}

// TestSSAPolicies: the apply policy annotations as Flux honours them, in Flux's spelling
// and Converge's. IfNotPresent creates once and never changes the object after; Ignore
// (on the desired object) never creates it, and (on the live one) never applies nor prunes
// it; Merge adopts without handing another manager's fields over; an unknown value fails
// that object alone with an error naming it and the annotation, and nothing is pruned.
//
// Without it: the annotations were ignored: IfNotPresent objects were updated, ignored ones
// created, applied and pruned, and a misspelt value went unnoticed.
func TestSSAPolicies(t *testing.T) {
	for _, watch := range []bool{false, true} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) { testSSAPolicies(t, watch) })
	}
}

func testSSAPolicies(t *testing.T, watch bool) {
	h := newHarness(t, Hooks{})
	if watch {
		h.useWatchEngine(Options{})
	}
	opts := testOpts()
	opts.Adopt = true
	h.ssa(withLabels(configMap(h.ns, "merge", map[string]any{"a": "1", "theirs": "x"}), "kustomize.toolkit.fluxcd.io/name", "app"),
		"kustomize-controller")
	set := func(v string) []*unstructured.Unstructured {
		return []*unstructured.Unstructured{
			annotate(configMap(h.ns, "once", map[string]any{"v": v}), FluxSSAAnnotation, "IfNotPresent"),
			annotate(configMap(h.ns, "once-converge", map[string]any{"v": v}), SSAAnnotation, "ifnotpresent"),
			annotate(configMap(h.ns, "never", map[string]any{"v": v}), FluxSSAAnnotation, SSAIgnore),
			configMap(h.ns, "kept", map[string]any{"v": v}),
			annotate(configMap(h.ns, "merge", map[string]any{"a": "1"}), SSAAnnotation, SSAMerge),
		}
	}
	h.apply(opts, set("1")...)
	if h.liveCM("never") != nil {
		t.Error("ConfigMap never (Ignore) was created")
	}
	merge := h.liveCM("merge")
	if !hasManager(merge, "kustomize-controller") || merge.GetLabels()["kustomize.toolkit.fluxcd.io/name"] != "app" {
		t.Errorf("ConfigMap merge (Merge) was handed over: managers %v, labels %v", managers(merge), merge.GetLabels())
	}
	if merge.GetAnnotations()[OwnerAnnotation] != h.ref.ID {
		t.Errorf("ConfigMap merge (Merge) not adopted: %v", merge.GetAnnotations())
	}

	// kept is told to be left alone in the cluster (kubectl annotate).
	h.update("ConfigMap", "kept", "kubectl-annotate", func(u *unstructured.Unstructured) {
		annotate(u, SSAAnnotation, SSAIgnore)
	})
	if watch { // a live annotation counts from when the watch cache shows it
		rv := h.liveCM("kept").GetResourceVersion()
		if err := wait.PollUntilContextTimeout(h.ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			c, err := h.eng.cache.cachedLive(ctx, set("1")[3].GroupVersionKind(), client.ObjectKey{Namespace: h.ns, Name: "kept"})
			return err == nil && c != nil && c.GetResourceVersion() == rv, nil
		}); err != nil {
			t.Fatal("the watch cache never showed the annotation")
		}
	}
	res := h.apply(opts, set("2")...)
	for _, name := range []string{"once", "once-converge", "kept"} {
		if v, _, _ := unstructured.NestedString(h.liveCM(name).Object, "data", "v"); v != "1" {
			t.Errorf("ConfigMap %s was changed: data.v = %q", name, v)
		}
		if got := actions(res.Changes)[cmID(h.ns, name)]; got != ActionSkipped {
			t.Errorf("ConfigMap %s: %s, want %s", name, got, ActionSkipped)
		}
	}
	res = h.apply(opts, set("2")[:2]...) // kept leaves the set
	if h.liveCM("kept") == nil {
		t.Errorf("ConfigMap kept (Ignore on the live object) was pruned: %v", res.Pruned)
	}

	bad := annotate(configMap(h.ns, "bad", map[string]any{"v": "1"}), SSAAnnotation, "Sometimes")
	res, err := h.eng.Apply(h.ctx, h.set(append(set("2")[:1], bad)...), opts)
	if err == nil || !IsTerminal(err) || !strings.Contains(err.Error(), cmName(h.ns, "bad")) ||
		!strings.Contains(err.Error(), SSAAnnotation) || !strings.Contains(err.Error(), `"Sometimes"`) {
		t.Errorf("Apply error = %v, want a terminal error naming %s, the annotation and its value", err, cmName(h.ns, "bad"))
	}
	if h.liveCM("bad") != nil {
		t.Error("ConfigMap bad was created despite its unknown apply policy")
	}
	if h.liveCM("once-converge") == nil || anyPruned(res.Pruned) {
		t.Errorf("a run with a bad annotation pruned: %v", res.Pruned)
	}
}

// anyPruned reports whether any change is a prune.
func anyPruned(cs []Change) bool {
	for _, c := range cs {
		if c.Action == ActionPruned {
			return true
		}
	}
	return false
}

// TestListedManagers: names match exactly, a trailing "*" matches a prefix.
func TestListedManagers(t *testing.T) {
	for _, tc := range []struct {
		manager string
		want    bool
	}{
		{"kubectl", true}, {"kubectl-edit", true}, {"kustomize-controller", true}, {"argocd-controller", true},
		{"kube-controller-manager", false}, {"helm", false}, {"kustomize-controller-2", false}, {"", false},
	} {
		if got := listed(tc.manager, DefaultTakeOverManagers()); got != tc.want {
			t.Errorf("listed(%q) = %v, want %v", tc.manager, got, tc.want)
		}
	}
}

// TestHandOverOps: the hand-over patch, judged from the live object alone. A listed
// manager's entry is renamed and tracking keys the source does not declare are removed, with
// uid and resourceVersion tests first and the owner annotation last; nothing is sent for an
// object with nothing to hand over, for Merge, or for a manager not listed or a subresource
// entry; a declared key is kept.
func TestHandOverOps(t *testing.T) {
	entry := func(manager, op, sub string) map[string]any {
		return map[string]any{"manager": manager, "operation": op, "subresource": sub, "apiVersion": "v1",
			"fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{"f:k": map[string]any{}}}}
	}
	live := func(labels map[string]any, entries ...map[string]any) *unstructured.Unstructured {
		mf := make([]any, len(entries))
		for i, e := range entries {
			mf[i] = e
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
				"labels": labels, "managedFields": mf}}}
	}
	desired := func(ann map[string]any, labels map[string]any) *item {
		return &item{obj: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": "a", "namespace": "ns", "annotations": ann, "labels": labels}}}}
	}
	flux := map[string]any{"kustomize.toolkit.fluxcd.io/name": "app"}
	for _, tc := range []struct {
		name    string
		it      *item
		live    *unstructured.Unstructured
		wantOps []string // op path, in order
	}{
		{"nothing to hand over", desired(nil, nil), live(nil, entry("converge", "Apply", ""), entry("kube-controller-manager", "Update", "")), nil},
		{"subresource entry", desired(nil, nil), live(nil, entry("kubectl", "Update", "scale")), nil},
		{"Flux applied it", desired(nil, nil), live(flux, entry("kustomize-controller", "Apply", "")), []string{
			"test /metadata/uid", "test /metadata/resourceVersion", "replace /metadata/managedFields",
			"remove /metadata/labels/kustomize.toolkit.fluxcd.io~1name", "add /metadata/annotations"}},
		{"the source declares the label", desired(nil, flux), live(flux), nil},
		{"Merge", desired(map[string]any{FluxSSAAnnotation: "merge"}, nil), live(flux, entry("kustomize-controller", "Apply", "")), nil},
	} {
		ops, err := handOverOps(tc.it, tc.live, DefaultTakeOverManagers(), "converge", "inv")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got []string
		for _, op := range ops {
			got = append(got, op.Op+" "+op.Path)
		}
		if !slices.Equal(got, tc.wantOps) {
			t.Errorf("%s: ops %v, want %v", tc.name, got, tc.wantOps)
		}
	}
}
