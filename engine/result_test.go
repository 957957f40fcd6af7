package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSummary(t *testing.T) {
	r := &Result{
		Changes: []Change{{Action: ActionCreated}, {Action: ActionConfigured}, {Action: ActionUnchanged},
			{Action: ActionUnchanged}, {Action: ActionSkipped}, {Action: ActionFailed}},
		Pruned: []Change{{Action: ActionPruned}, {Action: ActionSkipped}},
		Health: []ObjectHealth{{Status: "Current"}, {Status: "InProgress"}},
	}
	want := Summary{Created: 1, Configured: 1, Unchanged: 2, Pruned: 1, Skipped: 2, Failed: 1, NotReady: 1}
	if diff := cmp.Diff(want, r.Summary()); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
}
