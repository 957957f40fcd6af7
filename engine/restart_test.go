package engine

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
)

// restartSet is a set of n objects of each of four kinds in ns: ConfigMaps (labels, data),
// Secrets (data), headless Services (an atomic selector, a port whose protocol the server
// defaults into its key) and Deployments (nested associative lists, an atomic toleration
// list, quantities, many defaulted fields).
func restartSet(ns string, n int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range n {
		name := fmt.Sprintf("r-%02d", i)
		labels := map[string]any{"app": name}
		cm := configMap(ns, name, map[string]any{"key": fmt.Sprintf("value-%d", i)})
		cm.SetLabels(map[string]string{"app": name, "tier": "web"})
		out = append(out, cm,
			obj("v1", "Secret", ns, name, map[string]any{"type": "Opaque", "data": map[string]any{"k": "dmFsdWU="}}),
			obj("v1", "Service", ns, name, map[string]any{"spec": map[string]any{
				"clusterIP": "None", "selector": labels,
				"ports": []any{map[string]any{"name": "http", "port": int64(80), "targetPort": int64(8080)}},
			}}),
			obj("apps/v1", "Deployment", ns, name, map[string]any{"spec": map[string]any{
				"replicas": int64(0), "selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"containers": []any{map[string]any{"name": "app", "image": "busybox:1.36",
							"env":       []any{map[string]any{"name": "A", "value": "1"}},
							"ports":     []any{map[string]any{"containerPort": int64(8080)}},
							"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}},
						}},
						"tolerations": []any{map[string]any{"key": "k", "operator": "Exists"}},
					},
				},
			}}),
		)
	}
	return out
}

// TestRestartSendsNoDryRunPerObject checks the restart budget: a new engine (a
// restarted daemon, a new owner after a handover, the CLI) re-applying an unchanged set
// trusts each object on the LIST's word, from its managedFields and values, instead of
// dry-running it: O(kinds × namespaces) requests, not one per object, and no write (I7).
// Without the judgement of appliedAsDesired: 40 dry-runs (PATCH) for the 40 objects, per engine.
func TestRestartSendsNoDryRunPerObject(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) {
			h := newHarness(t, Hooks{})
			if watch {
				h.useWatchEngine(Options{})
			}
			opts := testOpts()
			objs := restartSet(h.ns, 10)
			if s := h.apply(opts, objs...).Summary(); s.Created != len(objs) {
				t.Fatalf("cold apply: %+v", s)
			}
			// The new process: a new engine, with no memo, on the same cluster, once the
			// controllers are done with the Deployments' status (as they are long before a
			// restart).
			h.deploymentsSettled()
			h.restart(watch)
			res := h.apply(opts, restartSet(h.ns, 10)...)
			if s := res.Summary(); s.Unchanged != len(objs) {
				t.Errorf("re-apply by a new engine: %+v, want %d unchanged: %v", s, len(objs), notUnchanged(res))
			}
			if w := h.rt.Writes(); len(w) != 0 {
				t.Errorf("re-apply by a new engine wrote: %v", w)
			}
			// Four kinds in one namespace: per kind, the survey's names-only and full LISTs
			// (and, with the watch cache, its informer's LIST); the GETs are the inventory's.
			p, l := h.rt.Count("patch"), h.rt.Count("list")
			g := 0
			for _, r := range []string{"configmaps", "secrets", "services", "deployments"} {
				g += h.rt.CountResource("get", r, "")
			}
			if p != 0 || l > 3*4 || g > 1 {
				t.Errorf("re-apply of %d unchanged objects by a new engine: %d PATCH (dry-runs), %d LIST, %d GET; want 0, at most 12, at most 1: %v",
					len(objs), p, l, g, h.rt.Counts())
			}
		})
	}
}

// TestRestartFindsOutOfBandEdits checks that the new engine's trust never hides drift (I7):
// edits made out of band between two engines, of every way the managedFields can record
// them, are found and corrected by the new engine's first run, and only they cost a dry-run.
func TestRestartFindsOutOfBandEdits(t *testing.T) {
	for _, watch := range []bool{true, false} {
		t.Run(fmt.Sprintf("watch=%v", watch), func(t *testing.T) {
			h := newHarness(t, Hooks{})
			if watch {
				h.useWatchEngine(Options{})
			}
			opts := testOpts()
			h.apply(opts, restartSet(h.ns, 6)...)

			edited := map[string]string{} // object → how it was edited
			// kubectl edit of a field we own (a plain update: the field moves to its manager).
			h.update("ConfigMap", "r-00", "kubectl-edit", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "edited", "data", "key")
			})
			edited["ConfigMap r-00"] = "update of data.key"
			// An update that only removes a field we own: its manager owns nothing after it,
			// so the managedFields show no other manager at all.
			h.update("ConfigMap", "r-01", "kubectl-edit", func(u *unstructured.Unstructured) {
				unstructured.RemoveNestedField(u.Object, "metadata", "labels", "tier")
			})
			edited["ConfigMap r-01"] = "update removing a label"
			// An apply as our own field manager (someone ran kubectl apply --server-side
			// --field-manager=converge) that adds a label: our apply entry now owns a field
			// the desired object lacks.
			cm := configMap(h.ns, "r-02", map[string]any{"key": "value-2"})
			cm.SetLabels(map[string]string{"app": "r-02", "tier": "web", "extra": "x"})
			cm.SetAnnotations(map[string]string{OwnerAnnotation: h.ref.ID})
			h.ssa(cm, FieldManager)
			edited["ConfigMap r-02"] = "apply as converge adding a label"
			// kubectl edit inside an atomic value we own (a Service's selector, a
			// Deployment's tolerations): the whole value moves to the editor.
			h.update("Service", "r-00", "kubectl-edit", func(u *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(u.Object, "other", "spec", "selector", "extra")
			})
			edited["Service r-00"] = "update inside the atomic selector"
			h.update("Deployment", "r-00", "kubectl-edit", func(u *unstructured.Unstructured) {
				tol, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "tolerations")
				tol[0].(map[string]any)["effect"] = "NoSchedule"
				_ = unstructured.SetNestedSlice(u.Object, tol, "spec", "template", "spec", "tolerations")
			})
			edited["Deployment r-00"] = "update inside the atomic tolerations"
			// kubectl scale (the scale subresource) of a Deployment, and an edit of a nested
			// element of an associative list (a container's env value).
			h.update("Deployment", "r-01", "kubectl-edit", func(u *unstructured.Unstructured) {
				c, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
				c[0].(map[string]any)["env"] = []any{map[string]any{"name": "A", "value": "2"}}
				_ = unstructured.SetNestedSlice(u.Object, c, "spec", "template", "spec", "containers")
			})
			edited["Deployment r-01"] = "update of an env value"
			dep := h.live("apps/v1", "Deployment", h.ns, "r-02")
			if err := h.plain.SubResource("scale").Update(h.ctx, dep, client.WithSubResourceBody(scaleTo(h.ns, "r-02", 2)),
				client.FieldOwner("kubectl-scale")); err != nil {
				t.Fatal(err)
			}
			edited["Deployment r-02"] = "kubectl scale"
			// Another manager's forced apply of a field we own: that manager owns it now.
			other := configMap(h.ns, "r-03", map[string]any{"key": "theirs"})
			h.ssa(other, "other-tool")
			edited["ConfigMap r-03"] = "another manager's forced apply"

			h.restart(watch)
			// The field another apply manager took is its own (I11): without ForceConflicts
			// the new engine reports the conflict (not "unchanged"), with it the field is
			// taken back. Everything else is corrected by the first run either way.
			res, _ := h.eng.Apply(h.ctx, h.set(restartSet(h.ns, 6)...), opts)
			acts := changesByName(res)
			if got := acts["ConfigMap r-03"]; got.Action != ActionFailed || !strings.Contains(got.Message, "conflict") {
				t.Errorf("ConfigMap r-03 (%s): %s %q, want a reported conflict", edited["ConfigMap r-03"], got.Action, got.Message)
			}
			for name, how := range edited {
				if name == "ConfigMap r-03" {
					continue
				}
				if got := acts[name]; got.Action != ActionConfigured {
					t.Errorf("%s (%s): %s %q, want configured", name, how, got.Action, got.Message)
				}
			}
			if n := len(res.Changes) - len(edited); res.Summary().Unchanged != n {
				t.Errorf("%+v, want the %d objects not edited unchanged", res.Summary(), n)
			}
			// Only the edited objects are dry-run (and re-applied): 8 dry-runs, 7 applies; and
			// the five kubectl edits are handed over to Converge first (one JSON patch each
			// at most, DefaultTakeOverManagers), so what they added is not kept.
			if p, want := h.rt.Count("patch"), 2*len(edited)+5; p > want {
				t.Errorf("%d PATCH, want at most %d (a dry-run and an apply per edited object, a hand-over per kubectl edit): %v",
					p, want, h.rt.Counts())
			}
			force := opts
			force.ForceConflicts = true
			h.apply(force, restartSet(h.ns, 6)...)

			want := restartSet(h.ns, 6)
			for _, d := range want {
				if _, ok := edited[d.GetKind()+" "+d.GetName()]; !ok {
					continue
				}
				l := h.live(d.GetAPIVersion(), d.GetKind(), h.ns, d.GetName())
				if !appliedAsDesiredValues(t, d, l) {
					t.Errorf("%s %s (%s) not corrected", d.GetKind(), d.GetName(), edited[d.GetKind()+" "+d.GetName()])
				}
			}
			if l := h.liveCM("r-02").GetLabels(); l["extra"] != "" {
				t.Errorf("ConfigMap r-02: the label applied as converge was not removed: %v", l)
			}
			// Atomic values are replaced whole: nothing the editors added inside them stays.
			sel, _, _ := unstructured.NestedMap(h.live("v1", "Service", h.ns, "r-00").Object, "spec", "selector")
			if !equalValue(sel, map[string]any{"app": "r-00"}) {
				t.Errorf("Service r-00: selector %v after the correction", sel)
			}
			tol, _, _ := unstructured.NestedSlice(h.live("apps/v1", "Deployment", h.ns, "r-00").Object, "spec", "template", "spec", "tolerations")
			if !equalValue(tol, []any{map[string]any{"key": "k", "operator": "Exists"}}) {
				t.Errorf("Deployment r-00: tolerations %v after the correction", tol)
			}
		})
	}
}

// TestRestartDryRunAsksTheServer checks what a DryRun (the CLI's apply --dry-run and diff)
// shows for unchanged objects is still the server's answer, unchanged: every object
// unchanged, no diff, each dry-run on the server, nothing written.
func TestRestartDryRunAsksTheServer(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	objs := restartSet(h.ns, 3)
	h.apply(opts, objs...)
	// The deployment controller's status writes after the creates move the Deployments past
	// what the dry-run's LIST shows: the engine then reads and asks again, as it must.
	h.deploymentsSettled()
	h.restart(false)
	dry := opts
	dry.DryRun = true
	res := h.apply(dry, restartSet(h.ns, 3)...)
	for _, c := range res.Changes {
		if c.Action != ActionUnchanged || c.Diff != "" || c.Message != "" {
			t.Errorf("dry-run of unchanged %s: %s %q, diff %q", c.ID, c.Action, c.Message, c.Diff)
		}
	}
	if p := h.rt.Count("patch"); p != len(objs) {
		t.Errorf("dry-run: %d PATCH, want %d (one server-side dry-run per object): %v", p, len(objs), h.rt.Counts())
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("dry-run wrote: %v", w)
	}
}

// deploymentsSettled waits (bounded) until the Deployments of h.ns are observed at their
// generation and two LISTs a second apart show each at the same resourceVersion.
func (h *harness) deploymentsSettled() {
	h.t.Helper()
	versions := func() (map[string]string, bool) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("apps/v1")
		list.SetKind("DeploymentList")
		if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
			h.t.Fatal(err)
		}
		out, done := map[string]string{}, true
		for _, d := range list.Items {
			g, _, _ := unstructured.NestedInt64(d.Object, "status", "observedGeneration")
			done = done && g == d.GetGeneration()
			out[d.GetName()] = d.GetResourceVersion()
		}
		return out, done
	}
	last, _ := versions()
	for range 30 {
		time.Sleep(time.Second)
		now, done := versions()
		if done && maps.Equal(now, last) {
			return
		}
		last = now
	}
	h.t.Fatal("the Deployments' status never settled")
}

// restart replaces h's engine with a new one (watch: with its watch cache running), as a
// restarted process would have: no memo, no cache.
func (h *harness) restart(watch bool) {
	h.t.Helper()
	if watch {
		h.useWatchEngine(Options{})
		return
	}
	cfg, rt := fault.Config(env.Config)
	eng, err := New(cfg, Options{PollInterval: h.eng.opts.PollInterval})
	if err != nil {
		h.t.Fatal(err)
	}
	h.eng, h.rt = eng, rt
}

// update edits the live object kind/name of h.ns with a plain update by manager.
func (h *harness) update(kind, name, manager string, edit func(*unstructured.Unstructured)) {
	h.t.Helper()
	apiVersion := "v1"
	if kind == "Deployment" {
		apiVersion = "apps/v1"
	}
	u := h.live(apiVersion, kind, h.ns, name)
	edit(u)
	if err := h.plain.Update(h.ctx, u, client.FieldOwner(manager)); err != nil {
		h.t.Fatalf("update %s %s: %v", kind, name, err)
	}
}

// ssa server-side applies u as manager, forcing conflicts.
func (h *harness) ssa(u *unstructured.Unstructured, manager string) {
	h.t.Helper()
	if err := h.plain.Apply(h.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		h.t.Fatalf("apply %s as %s: %v", u.GetName(), manager, err)
	}
}

// scaleTo is the Scale of a Deployment ns/name to replicas.
func scaleTo(ns, name string, replicas int64) *unstructured.Unstructured {
	return obj("autoscaling/v1", "Scale", ns, name, map[string]any{"spec": map[string]any{"replicas": replicas}})
}

// changesByName maps "Kind name" to each change.
func changesByName(res *Result) map[string]Change {
	out := map[string]Change{}
	for _, c := range res.Changes {
		out[c.Object.GroupKind.Kind+" "+c.Object.Name] = c
	}
	return out
}

// notUnchanged lists the changes that are not unchanged, for messages.
func notUnchanged(res *Result) []string {
	var out []string
	for _, c := range res.Changes {
		if c.Action != ActionUnchanged {
			out = append(out, fmt.Sprintf("%s: %s %s", c.ID, c.Action, c.Message))
		}
	}
	return out
}

// appliedAsDesiredValues reports whether every field of desired has its value in live (a
// subset check, independent of managedFields), for the checker.
func appliedAsDesiredValues(t *testing.T, desired, live *unstructured.Unstructured) bool {
	t.Helper()
	var sub func(d, l any) bool
	sub = func(d, l any) bool {
		switch d := d.(type) {
		case map[string]any:
			lm, ok := l.(map[string]any)
			if !ok {
				return false
			}
			for k, v := range d {
				if !sub(v, lm[k]) {
					return false
				}
			}
			return true
		case []any:
			ll, ok := l.([]any)
			if !ok || len(ll) != len(d) {
				return false
			}
			for i := range d {
				if !sub(d[i], ll[i]) {
					return false
				}
			}
			return true
		}
		return equalValue(d, l)
	}
	spec := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy().Object
		delete(c, "metadata")
		return c
	}
	if !sub(spec(desired), spec(live)) {
		return false
	}
	for k, v := range desired.GetLabels() {
		if live.GetLabels()[k] != v {
			return false
		}
	}
	return true
}

// TestRestartOnStaleCacheFindsEdits checks that a new engine never trusts an object on its
// watch cache's word (RELIABILITY.md, stale reads): its cache of ConfigMaps is frozen before
// two out-of-band edits (an update of a value we own, an apply as converge adding a label),
// so it still shows the objects as our last apply left them. The first run judges each on
// the API server's LIST (or a GET when the cache disagrees with it): the edited objects are
// dry-run and corrected, under the UID precondition, the others trusted (I7, I11).
// A guard for appliedAsDesired's callers: it passed before too, with a dry-run per object.
func TestRestartOnStaleCacheFindsEdits(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, manyCMs(h.ns, "1", 4)...)

	cfg, rt := fault.Config(env.Config)
	eng, err := New(cfg, Options{Watch: true, PollInterval: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stale := fault.NewStaleReader(eng.cache.cache, eng.client.Scheme())
	eng.cache.cache = staleCache{Cache: eng.cache.cache, stale: stale}
	runUntilCleanup(t, eng)
	for i := 0; ; i++ { // the cache starts in the background: wait for it (bounded)
		err := stale.Freeze(h.ctx, configMapGVK, h.ns)
		if err == nil {
			break
		}
		if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.update("ConfigMap", "cm-00", "kubectl-edit", func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, "edited", "data", "v")
	})
	cm := configMap(h.ns, "cm-01", map[string]any{"v": "1"})
	cm.SetLabels(map[string]string{"extra": "x"})
	cm.SetAnnotations(map[string]string{OwnerAnnotation: h.ref.ID})
	h.ssa(cm, FieldManager)

	h.eng, h.rt = eng, rt
	served := stale.Served()
	res := h.apply(opts, manyCMs(h.ns, "1", 4)...)
	if stale.Served() == served {
		t.Fatal("the run read nothing from the frozen cache: the scenario did not run")
	}
	acts := changesByName(res)
	for name, want := range map[string]Action{"cm-00": ActionConfigured, "cm-01": ActionConfigured, "cm-02": ActionUnchanged, "cm-03": ActionUnchanged} {
		if got := acts["ConfigMap "+name]; got.Action != want {
			t.Errorf("%s: %s %q, want %s", name, got.Action, got.Message, want)
		}
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("cm-00").Object, "data", "v"); v != "1" {
		t.Errorf("cm-00: data.v = %q after the run, want 1", v)
	}
	if l := h.liveCM("cm-01").GetLabels(); l["extra"] != "" {
		t.Errorf("cm-01: the label applied as converge is still there: %v", l)
	}
}
