package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartRendersTheWorkload: the generated chart, rendered as the daemon renders a
// Sync's chart (in a render child), gives exactly the workload's tenant objects, object for
// object, with and without -parity's annotation and after a prune step's values (one
// case: each render child of the race-enabled test binary costs seconds).
func TestChartRendersTheWorkload(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n, syncs int
		parity   bool
		prune    float64
	}{
		{name: "1000 objects in one Sync's chart", n: 1000, syncs: 10},
		{name: "parity, pruned", n: 200, syncs: 4, parity: true, prune: 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := generateDaemon(tc.n, tc.syncs, daemonWorkloadOptions{Parity: tc.parity})
			if err != nil {
				t.Fatal(err)
			}
			if tc.prune > 0 {
				w, _ = prunedWorkload(w, tc.prune)
			}
			dir := t.TempDir()
			if err := writeChart(filepath.Join(dir, chartFolder), w, tc.parity); err != nil {
				t.Fatal(err)
			}
			got, err := renderChart(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{}
			for _, objs := range w.Tenants {
				for _, u := range objs {
					want[keyOf(u)] = canonical(t, u)
				}
			}
			if len(got) != len(want) {
				t.Errorf("the chart rendered %d objects, want %d", len(got), len(want))
			}
			for _, u := range got {
				w, ok := want[keyOf(u)]
				switch {
				case !ok:
					t.Errorf("the chart rendered %s, not in the workload", keyOf(u))
				case canonical(t, u) != w:
					t.Errorf("%s:\n got %s\nwant %s", keyOf(u), canonical(t, u), w)
				}
			}
		})
	}
}

// canonical is u as JSON, keys sorted (a number is a number, whatever its Go type).
func canonical(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	js, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}
