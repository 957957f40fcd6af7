package fault

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Seeds are the seeds a randomized sweep runs, from the environment (make test-faults and
// test-faults-daemon set both variables from SEEDS and SEED):
//
//   - CONVERGE_FAULT_SEED=n replays seed n alone;
//   - CONVERGE_FAULT_SEEDS=N runs seeds 1..N;
//   - CONVERGE_FAULT_SEEDS=A-B runs seeds A..B, so a long sweep can be split over runs
//     (SEEDS=1-100 and SEEDS=101-200 together are SEEDS=200).
//
// No seed (neither set, or N = 0) means the sweep is skipped; a malformed value is an error.
func Seeds() ([]uint64, error) {
	if s := os.Getenv("CONVERGE_FAULT_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("CONVERGE_FAULT_SEED=%q: want a number", s)
		}
		return []uint64{n}, nil
	}
	s := os.Getenv("CONVERGE_FAULT_SEEDS")
	if s == "" {
		return nil, nil
	}
	from, to, isRange := strings.Cut(s, "-")
	if !isRange {
		from, to = "1", s
	}
	a, errA := strconv.ParseUint(from, 10, 64)
	b, errB := strconv.ParseUint(to, 10, 64)
	if errA != nil || errB != nil || (isRange && (a == 0 || a > b)) {
		return nil, fmt.Errorf("CONVERGE_FAULT_SEEDS=%q: want N (seeds 1..N) or A-B (seeds A..B, 1 ≤ A ≤ B)", s)
	}
	var seeds []uint64
	for n := a; n <= b; n++ {
		seeds = append(seeds, n)
	}
	return seeds, nil
}
