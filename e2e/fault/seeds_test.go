package fault

import (
	"slices"
	"testing"
)

func TestSeeds(t *testing.T) {
	for _, tc := range []struct {
		seed, seeds string
		want        []uint64
		bad         bool
	}{
		{seeds: "", want: nil},
		{seeds: "3", want: []uint64{1, 2, 3}},
		{seeds: "101-103", want: []uint64{101, 102, 103}},
		{seed: "8", seeds: "200", want: []uint64{8}},
		{seeds: "5-2", bad: true},
		{seeds: "0-2", bad: true},
		{seeds: "x", bad: true},
		{seed: "-1", bad: true},
	} {
		t.Setenv("CONVERGE_FAULT_SEED", tc.seed)
		t.Setenv("CONVERGE_FAULT_SEEDS", tc.seeds)
		got, err := Seeds()
		if (err != nil) != tc.bad || !slices.Equal(got, tc.want) {
			t.Errorf("SEED=%q SEEDS=%q: %v, %v; want %v (error: %v)", tc.seed, tc.seeds, got, err, tc.want, tc.bad)
		}
	}
}
