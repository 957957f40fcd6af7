package engine

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestWatchWakesForADeletionHeldByAFinalizer checks that the out-of-band deletion of a
// managed object that a finalizer holds (it only gains a deletionTimestamp, no field set
// changes) is reported: the Sync must see it Terminating. A later edit of another object
// of the set is the sentinel (a fresh one each time: an edit takes the field from Converge's
// field set once): its report comes after the deletion's, in the informer's order.
//
// Without the deletionTimestamp in the fingerprint's rule: the deletion changed no apply
// manager's field set, and nobody was woken until the interval.
func TestWatchWakesForADeletionHeldByAFinalizer(t *testing.T) {
	h, reports := newReportingHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 3)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	hold := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/hold"]}}`))
	if err := h.plain.Patch(h.ctx, h.liveCM("cm-00"), hold, client.FieldOwner("some-controller")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		release := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))
		_ = h.plain.Patch(context.Background(), configMap(h.ns, "cm-00", nil), release)
	})
	h.editCM("cm-01", "v", "first") // wait until the finalizer's update has been handled
	expectReports(t, h, reports, 1, "an edit of cm-01")

	if err := h.plain.Delete(h.ctx, h.liveCM("cm-00")); err != nil {
		t.Fatal(err)
	}
	if h.liveCM("cm-00").GetDeletionTimestamp() == nil {
		t.Fatal("cm-00 has no deletionTimestamp: the finalizer did not hold it")
	}
	h.editCM("cm-02", "v", "second")
	expectReports(t, h, reports, 2, "the deletion of cm-00 held by a finalizer, then an edit of cm-02")
}

// expectReports waits for n reports of h's inventory, draining them; it fails the test with
// what when the test's context ends first.
func expectReports(t *testing.T, h *harness, reports chan string, n int, what string) {
	t.Helper()
	for got := 0; got < n; {
		select {
		case id := <-reports:
			if id == h.ref.ID {
				got++
			}
		case <-h.ctx.Done():
			t.Fatalf("%s: %d of %d reports", what, got, n)
		}
	}
}
