package engine

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// deployment is a Deployment the Full cluster makes Available; note goes into its pod
// template, so changing it starts a rollout (a new generation).
func deployment(ns, name, note string) *unstructured.Unstructured {
	return obj("apps/v1", "Deployment", ns, name, map[string]any{"spec": map[string]any{
		"replicas": int64(1),
		"selector": map[string]any{"matchLabels": map[string]any{"app": name}},
		"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"app": name}, "annotations": map[string]any{"note": note}},
			"spec":     map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.invalid/app:1"}}},
		},
	}})
}

// TestStaleCacheReadinessWaitsForAppliedGeneration freezes the engine's cache of Deployments
// once a Deployment is Available, then changes its pod template. The apply answers with a
// new generation that the frozen cache never shows: the wait must not call the Deployment
// Current on the old copy (I6: Ready only for what was applied and seen Current). Once the
// cache thaws, the rollout is judged and the run is Ready.
//
// It failed before: kstatus judged the cached copy of the old generation, Available with
// observedGeneration equal to its (old) generation, so the run was Ready at once.
func TestStaleCacheReadinessWaitsForAppliedGeneration(t *testing.T) {
	h, stale := newStaleHarness(t)
	opts := testOpts()
	opts.Wait = true
	opts.Timeout = 2 * time.Minute
	h.apply(opts, deployment(h.ns, "web", "1"))
	gvk := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	if err := stale.Freeze(h.ctx, gvk, h.ns); err != nil {
		t.Fatal(err)
	}
	served := stale.Served()
	short := opts
	short.Timeout = 5 * time.Second
	res, err := h.eng.Apply(h.ctx, h.set(deployment(h.ns, "web", "2")), short)
	if stale.Served() == served {
		t.Fatal("the wait read nothing from the frozen cache: the scenario did not run")
	}
	if got := actions(res.Changes)[h.ns+"_web_apps_Deployment"]; got != ActionConfigured {
		t.Fatalf("changed Deployment: %s, want %s", got, ActionConfigured)
	}
	if err == nil || len(res.Health) != 1 || res.Health[0].Status == "Current" {
		t.Errorf("I6: Ready on a cached copy older than the apply: health %+v, error %v", res.Health, err)
	} else if !strings.Contains(res.Health[0].Message, "generation") {
		t.Errorf("health message %q does not say which generation it waits for", res.Health[0].Message)
	}

	stale.Thaw(gvk.GroupKind())
	res, err = h.eng.Apply(h.ctx, h.set(deployment(h.ns, "web", "2")), opts)
	if err != nil || len(res.Health) != 1 || res.Health[0].Status != "Current" {
		t.Errorf("after Thaw: health %+v, error %v; want Current", res.Health, err)
	}
}
