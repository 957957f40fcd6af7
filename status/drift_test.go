package status

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestWriteRecordsDrift checks status.drift and the Drifted condition: written with the
// outcome that found the drift (with lastAppliedGeneration), nothing written when the same
// drift is found again (I7), kept by an outcome that did not judge drift (a fetch failure),
// and both gone once a reconcile finds none.
func TestWriteRecordsDrift(t *testing.T) {
	c, ft, key := setup(t)
	w := &Writer{Live: c, Client: c}
	rev := "main@sha1:0123456789012345678901234567890123456789"
	drift := func() *v1alpha1.DriftStatus {
		return &v1alpha1.DriftStatus{Objects: []v1alpha1.DriftedObject{
			{Group: "apps", Kind: "Deployment", Namespace: key.Namespace, Name: "web",
				Fields: []v1alpha1.DriftedField{{Path: "spec.replicas", Manager: "kubectl-edit"}}},
			{Kind: "ConfigMap", Namespace: key.Namespace, Name: "settings", Missing: true},
		}}
	}
	o := ready(1, rev)
	o.DriftKnown, o.Drift = true, drift()
	if err := w.Write(context.Background(), key, o); err != nil {
		t.Fatal(err)
	}
	s := get(t, c, key)
	if diff := cmp.Diff(drift(), s.Status.Drift); diff != "" {
		t.Errorf("status.drift (-want +got):\n%s", diff)
	}
	if s.Status.LastAppliedGeneration != 1 {
		t.Errorf("lastAppliedGeneration = %d, want 1", s.Status.LastAppliedGeneration)
	}
	cond := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonDriftDetected ||
		!strings.Contains(cond.Message, "Deployment "+key.Namespace+"/web: spec.replicas (kubectl-edit)") ||
		!strings.Contains(cond.Message, "ConfigMap "+key.Namespace+"/settings: deleted") {
		t.Fatalf("Drifted condition = %+v, want True DriftDetected naming the field, its manager and the deleted object", cond)
	}

	ft.Reset()
	o.Drift = drift()
	if err := w.Write(context.Background(), key, o); err != nil {
		t.Fatal(err)
	}
	failed := Outcome{Generation: 1, Ready: metav1.ConditionFalse, Reason: "FetchFailed", Message: "x"}
	if err := w.Write(context.Background(), key, failed); err != nil {
		t.Fatal(err)
	}
	if s := get(t, c, key); s.Status.Drift == nil || meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted) == nil {
		t.Error("an outcome that did not judge drift dropped it")
	}
	if n := ft.Mutating(); n != 1 {
		t.Errorf("the same drift again, then a failure: %d writes, want 1 (the failure's)", n)
	}

	o.Drift = nil
	if err := w.Write(context.Background(), key, o); err != nil {
		t.Fatal(err)
	}
	s = get(t, c, key)
	if s.Status.Drift != nil || meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted) != nil {
		t.Errorf("drift gone, status still shows drift %+v, conditions %+v", s.Status.Drift, s.Status.Conditions)
	}
}
