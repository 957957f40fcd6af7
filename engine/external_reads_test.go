package engine

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// TestExternalObjectsReadWithoutCachingTheirKind checks that a health check of an object the
// set does not apply, and a depends-on of one, are read from the API server when the watch
// cache does not already watch their kind: a kind nothing applies (PodTemplate here) is
// never listed or watched. Without it, the health check's read through the cache started an
// informer holding every PodTemplate of the cluster (every Pod, for a check naming one Pod),
// kept for the life of the daemon.
func TestExternalObjectsReadWithoutCachingTheirKind(t *testing.T) {
	h := newWatchHarness(t)
	ext := obj("v1", "PodTemplate", h.ns, "ext", map[string]any{"template": map[string]any{
		"spec": map[string]any{"containers": []any{map[string]any{"name": "c", "image": "example.invalid/app:1"}}}}})
	if err := h.plain.Create(h.ctx, ext); err != nil {
		t.Fatal(err)
	}
	opts := testOpts()
	opts.Wait, opts.Timeout = true, 20*time.Second
	opts.HealthChecks = []object.ObjMetadata{{GroupKind: schema.GroupKind{Kind: "PodTemplate"}, Namespace: h.ns, Name: "ext"}}
	dependent := configMap(h.ns, "dependent", nil)
	annotate(dependent, DependsOnAnnotation, "/namespaces/"+h.ns+"/PodTemplate/ext")
	for range 2 { // the first apply, then a no-op
		res := h.apply(opts, dependent)
		if oh := healthOf(res, h.ns+"_ext__PodTemplate"); oh.Status != "Current" {
			t.Fatalf("health of the PodTemplate = %+v, want Current", oh)
		}
	}
	if n := h.rt.CountResource("list", "podtemplates", "") + h.rt.CountResource("watch", "podtemplates", ""); n != 0 {
		t.Errorf("PodTemplates were listed or watched %d times: the cache holds a kind the set does not apply (%v)", n, h.rt.Counts())
	}
	if h.rt.CountResource("get", "podtemplates", "") == 0 {
		t.Errorf("the PodTemplate was never read from the API server (%v)", h.rt.Counts())
	}
}

// TestHealthChecksOfAWatchedKindCostNoRequest checks that health checks of a kind the watch
// cache already holds (50 ConfigMaps beside a set that applies a ConfigMap) are read from it:
// a no-op reconcile costs the inventory's read alone, as without them (the no-op budget of
// docs/benchmarks.md). Without it: a GET per health check per reconcile, 51 requests.
func TestHealthChecksOfAWatchedKindCostNoRequest(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	opts.Timeout = 20 * time.Second
	for i := range 50 {
		name := fmt.Sprintf("ext-%02d", i)
		if err := h.plain.Create(h.ctx, configMap(h.ns, name, map[string]any{"v": "1"})); err != nil {
			t.Fatal(err)
		}
		opts.HealthChecks = append(opts.HealthChecks, object.ObjMetadata{GroupKind: schema.GroupKind{Kind: "ConfigMap"}, Namespace: h.ns, Name: name})
	}
	objs := manyCMs(h.ns, "1", 1)
	h.apply(opts, objs...)
	res := h.settle(opts, 1, objs)
	if got := len(res.Health); got != 50 {
		t.Errorf("health of %d objects, want the 50 checks (no Wait)", got)
	}
	for _, oh := range res.Health {
		if oh.Status != "Current" {
			t.Errorf("health %+v, want Current", oh)
		}
	}
}
