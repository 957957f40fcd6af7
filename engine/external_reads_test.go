package engine

import (
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
