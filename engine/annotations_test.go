package engine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestFluxAndArgoAnnotations: a set moved from Flux or Argo CD keeps what its objects' own
// annotations asked of that tool. Leaving the set: kustomize.toolkit.fluxcd.io/prune:
// disabled and Argo CD's Prune=false keep the object, Argo CD's Delete=false does not. The
// set deleted: Flux's prune annotation and Delete=false keep the object, Prune=false does
// not. Kept objects leave the inventory.
func TestFluxAndArgoAnnotations(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	cm := func(name string, kv ...string) *unstructured.Unstructured {
		return annotate(configMap(h.ns, name, nil), kv...)
	}
	objs := []*unstructured.Unstructured{
		cm("flux", FluxPruneAnnotation, PruneDisabled),
		cm("argo-prune", ArgoSyncOptionsAnnotation, "ServerSideApply=true, Prune=false"),
		cm("argo-delete", ArgoSyncOptionsAnnotation, "Delete=false"),
		cm("plain"),
	}
	h.apply(opts, objs...)
	res := h.apply(opts, cm("other"))
	for name, kept := range map[string]bool{"flux": true, "argo-prune": true, "argo-delete": false, "plain": false} {
		if got := h.liveCM(name) != nil; got != kept {
			t.Errorf("%s left the set: exists = %v, want %v", name, got, kept)
		}
	}
	for _, c := range res.Pruned {
		if c.Object.Name == "flux" && !strings.Contains(c.Message, FluxPruneAnnotation) {
			t.Errorf("the kept object's message %q does not name %s", c.Message, FluxPruneAnnotation)
		}
	}
	wantKeys(t, "inventory after the prune", h.inventory(), cmID(h.ns, "other"))

	h.apply(opts, cm("flux-2", FluxPruneAnnotation, PruneDisabled), cm("argo-prune-2", ArgoSyncOptionsAnnotation, "Prune=false"),
		cm("argo-delete-2", ArgoSyncOptionsAnnotation, "Delete=false"), cm("other"))
	if _, err := h.eng.Delete(h.ctx, h.ref, DeleteOptions{Concurrency: 2}); err != nil {
		t.Fatal(err)
	}
	for name, kept := range map[string]bool{"flux-2": true, "argo-delete-2": true, "argo-prune-2": false, "other": false} {
		if got := h.liveCM(name) != nil; got != kept {
			t.Errorf("%s after the set's deletion: exists = %v, want %v", name, got, kept)
		}
	}
}

// TestFluxReconcileAndForceAnnotations: kustomize.toolkit.fluxcd.io/reconcile: disabled
// leaves the object alone (skipped, named in the message, kept in the inventory), and
// kustomize.toolkit.fluxcd.io/force: enabled, like Argo CD's Replace=true, recreates an object
// whose immutable field changed.
func TestFluxReconcileAndForceAnnotations(t *testing.T) {
	h := newHarness(t, Hooks{})
	opts := testOpts()
	h.apply(opts, configMap(h.ns, "a", map[string]any{"k": "1"}))
	res := h.apply(opts, annotate(configMap(h.ns, "a", map[string]any{"k": "2"}), FluxReconcileAnnotation, ReconcileDisabled))
	for _, c := range res.Changes {
		if c.ID == cmID(h.ns, "a") && (c.Action != ActionSkipped || !strings.Contains(c.Message, FluxReconcileAnnotation)) {
			t.Errorf("a: %s %q, want skipped naming %s", c.Action, c.Message, FluxReconcileAnnotation)
		}
	}
	if v, _, _ := unstructured.NestedString(h.liveCM("a").Object, "data", "k"); v != "1" {
		t.Errorf("an object left alone was changed: data.k = %q", v)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"))

	for _, force := range [][2]string{{FluxForceAnnotation, ForceEnabled}, {ArgoSyncOptionsAnnotation, "Replace=true"}} {
		imm := func(v string) *unstructured.Unstructured {
			u := configMap(h.ns, "imm", map[string]any{"k": v})
			u.Object["immutable"] = true
			return u
		}
		h.apply(opts, imm("1"))
		uid := h.liveCM("imm").GetUID()
		h.apply(opts, annotate(imm("2"), force[0], force[1]))
		live := h.liveCM("imm")
		if v, _, _ := unstructured.NestedString(live.Object, "data", "k"); v != "2" || live.GetUID() == uid {
			t.Errorf("%s: %s: not recreated: data.k = %q, uid %s (old %s)", force[0], force[1], v, live.GetUID(), uid)
		}
		if err := h.plain.Delete(h.ctx, live); err != nil {
			t.Fatal(err)
		}
	}
}
