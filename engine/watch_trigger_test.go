package engine

import (
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
