package engine

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestDriftReportAppliesANewDesiredObject checks that a run that detects drift and only
// reports it still applies an object whose desired content changed since its last apply
// (the memo recorded another desired hash): a substituteFrom ConfigMap or a Helm values
// source changed without a new revision. That is no drift, and Report must not leave it.
//
// Without it: the new desired value was reported as drift of the live object and never
// applied.
func TestDriftReportAppliesANewDesiredObject(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	report := opts
	report.Drift = DriftOptions{Detect: true, Report: reportAll}
	small := []*unstructured.Unstructured{configMap(h.ns, "out", map[string]any{"size": "small"})}
	h.apply(opts, small...)
	h.settle(report, 1, small)

	large := []*unstructured.Unstructured{configMap(h.ns, "out", map[string]any{"size": "large"})}
	res := h.apply(report, large...)
	if len(res.Drift) != 0 {
		t.Errorf("a new desired object reported as drift: %+v", res.Drift)
	}
	if got := cmData(h, "out", "size"); got != "large" {
		t.Errorf("data.size = %q after the run with the new desired object, want large (actions %v)", got, actions(res.Changes))
	}
}
