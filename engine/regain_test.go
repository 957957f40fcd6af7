package engine

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestRevertedEditRegainsFieldsAndWakesAgain checks an edit set back before the reconcile
// it woke: the values are the source's, but the field is the editor's. The reconcile applies
// once to make it Converge's again (reported configured), so that the next edit of it
// changes Converge's field set and wakes the Sync again; a later run sends nothing.
//
// Without the regain: the reconcile found the object unchanged and sent nothing, the field
// stayed the editor's, and every later edit of it by the same manager woke nobody until the
// interval (the drift trigger watches the apply managers' field sets).
func TestRevertedEditRegainsFieldsAndWakesAgain(t *testing.T) {
	h, reports := newReportingHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 2)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	edit := func(name, v, manager string) {
		t.Helper()
		p := client.RawPatch(types.MergePatchType, []byte(`{"data":{"v":"`+v+`"}}`))
		if err := h.plain.Patch(h.ctx, h.liveCM(name), p, client.FieldOwner(manager)); err != nil {
			t.Fatal(err)
		}
	}
	ownsV := func() bool {
		for _, mf := range h.liveCM("cm-00").GetManagedFields() {
			if mf.Manager == FieldManager && strings.Contains(string(mf.FieldsV1.Raw), `"f:v"`) {
				return true
			}
		}
		return false
	}
	edit("cm-00", "edited", "k9s")
	edit("cm-00", "1", "k9s") // set back before the reconcile
	if ownsV() {
		t.Fatal("Converge still owns data.v after another manager changed it")
	}
	var regained *Change
	for range 20 { // the watch cache shows the edits within a few runs
		res := h.apply(opts, objs...)
		if c, ok := changesByName(res)["ConfigMap cm-00"]; ok && c.Action == ActionConfigured {
			regained = &c
			break
		}
	}
	if regained == nil || regained.Message != msgRegained || !ownsV() {
		t.Fatalf("the fields were not taken back: change %+v, Converge owns data.v: %v", regained, ownsV())
	}
	if cmData(h, "cm-00", "v") != "1" {
		t.Fatalf("data.v = %q, want the source's 1", cmData(h, "cm-00", "v"))
	}
	h.settle(opts, 1, objs) // and nothing more is sent once they are

	for len(reports) > 0 {
		<-reports
	}
	edit("cm-00", "drifted", "k9s")
	edit("cm-01", "sentinel", "kubectl-edit")
	expectReports(t, h, reports, 2, "a second edit of cm-00 by the same manager, then an edit of cm-01")
}
