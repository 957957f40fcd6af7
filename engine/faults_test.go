package engine

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
)

// The randomized fault sweep: `make test-faults SEEDS=200` (or SEED=n to replay one). Each
// seed picks a scenario, a fault schedule and a crash point, runs a few reconciles of a
// changing set under faults, checks the safety invariants after every run, then stops the
// faults and checks liveness. Without CONVERGE_FAULT_SEEDS / CONVERGE_FAULT_SEED it skips.

// sweepScenario is one kind of randomized run.
type sweepScenario struct {
	name  string
	rules func(r *rand.Rand) []fault.Rule
	crash bool // also crash at a random point of the first run
}

var sweepScenarios = []sweepScenario{
	{"errors", func(r *rand.Rand) []fault.Rule {
		codes := []int{http.StatusConflict, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusServiceUnavailable}
		verbs := []string{"get", "create", "update", "patch", "delete"}
		var rules []fault.Rule
		for range 1 + r.IntN(3) {
			rules = append(rules, fault.Rule{Verb: verbs[r.IntN(len(verbs))], Status: codes[r.IntN(len(codes))], Probability: 0.1 + 0.4*r.Float64()})
		}
		return rules
	}, false},
	{"ambiguous", func(r *rand.Rand) []fault.Rule {
		verbs := []string{"create", "update", "patch", "delete"}
		return []fault.Rule{{Verb: verbs[r.IntN(len(verbs))], DropResponse: true, Probability: 0.2 + 0.3*r.Float64()}}
	}, false},
	{"crash", func(*rand.Rand) []fault.Rule { return nil }, true},
	{"crash+errors", func(r *rand.Rand) []fault.Rule {
		return []fault.Rule{{Status: http.StatusServiceUnavailable, Probability: 0.2 * r.Float64()}}
	}, true},
}

// sweepStats aggregates the runs of one scenario.
type sweepStats struct {
	seeds, faults, violations int
	slowest                   time.Duration
}

// TestRandomFaults is the randomized sweep.
func TestRandomFaults(t *testing.T) {
	seeds, err := fault.Seeds()
	if err != nil {
		t.Fatal(err)
	}
	if len(seeds) == 0 {
		t.Skip("set CONVERGE_FAULT_SEEDS=N or CONVERGE_FAULT_SEED=n (make test-faults)")
	}
	var mu sync.Mutex
	stats := map[string]*sweepStats{}
	for _, seed := range seeds {
		sc := sweepScenarios[seed%uint64(len(sweepScenarios))]
		// Every other round of scenarios runs the daemon's engine: watch cache and memo on.
		watch := (seed/uint64(len(sweepScenarios)))%2 == 1
		name := sc.name
		if watch {
			name += "+watch"
		}
		t.Run(fmt.Sprintf("seed=%d/%s", seed, name), func(t *testing.T) {
			faults, took, violations := runSweep(t, seed, sc, watch)
			mu.Lock()
			defer mu.Unlock()
			st := stats[name]
			if st == nil {
				st = &sweepStats{}
				stats[name] = st
			}
			st.seeds++
			st.faults += faults
			st.violations += violations
			st.slowest = max(st.slowest, took)
			if violations > 0 || t.Failed() {
				t.Logf("replay: make test-faults SEED=%d", seed)
			}
		})
	}
	names := make([]string, 0, len(stats))
	for n := range stats {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-14s %6s %8s %11s %18s\n", "scenario", "seeds", "faults", "violations", "slowest converge")
	for _, n := range names {
		st := stats[n]
		fmt.Fprintf(&b, "%-14s %6d %8d %11d %18s\n", n, st.seeds, st.faults, st.violations, st.slowest.Round(time.Millisecond))
	}
	fmt.Print(b.String())
}

// runSweep runs one seed, with the watch-cache engine when watch is set: three reconciles of a changing set under faults (safety checked
// after each), then faults off and reconciles until converged (liveness), then a quiescence
// check. It returns the faults injected, the time to converge and the violations found.
func runSweep(t *testing.T, seed uint64, sc sweepScenario, watch bool) (int, time.Duration, int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	crashAt := 0
	if sc.crash {
		crashAt = 1 + r.IntN(6)
	}
	var crashed atomic.Bool
	hooks := Hooks{AfterApply: func(k int, _ string) error {
		if crashAt > 0 && k == crashAt && crashed.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	}}
	h := newHarness(t, hooks)
	if watch {
		h.useWatchEngine(Options{Hooks: hooks, Heads: runHeads(t)})
	}
	h.rt.Seed(seed)
	foreign := annotate(configMap(h.ns, "foreign", nil), OwnerAnnotation, "someone-else")
	if err := h.plain.Create(h.ctx, foreign); err != nil {
		t.Fatal(err)
	}
	violations := 0
	check := func(when string) {
		before := t.Failed()
		h.ownedSubsetOfInventory() // I2
		if h.liveCM("foreign") == nil {
			t.Errorf("%s: I1: the foreign object was deleted", when)
		}
		if !before && t.Failed() {
			violations++
		}
	}
	opts := testOpts()
	opts.Concurrency = 1 + r.IntN(4)
	var desired []*unstructured.Unstructured
	h.rt.SetRules(sc.rules(r)...)
	for round := range 3 {
		desired = sweepSet(h.ns, r, round)
		_, err := h.eng.Apply(h.ctx, h.set(desired...), opts)
		if err != nil && !errors.Is(err, errCrash) {
			t.Logf("round %d under faults: %v", round, firstLine(err.Error()))
		}
		check(fmt.Sprintf("round %d", round))
	}
	injected := h.rt.Injected()
	if crashed.Load() {
		injected++
	}

	h.rt.SetRules()
	start := time.Now()
	var err error
	for range 5 {
		if _, err = h.eng.Apply(h.ctx, h.set(desired...), opts); err == nil {
			break
		}
	}
	took := time.Since(start)
	if err != nil {
		t.Errorf("I7: no convergence within 5 reconciles after the faults stopped: %v", err)
		violations++
	}
	check("after the faults")
	h.liveEqualsDesired(desired, &violations)
	h.rt.Reset()
	h.apply(opts, desired...)
	if w := h.rt.Writes(); len(w) > 0 {
		t.Errorf("I7: a converged reconcile sent writes: %v", w)
		violations++
	}
	return injected, took, violations
}

// sweepSet is the desired set of a round: a random subset of ten ConfigMaps with a
// round-dependent value, so rounds create, change and prune.
func sweepSet(ns string, r *rand.Rand, round int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range 10 {
		if r.IntN(3) == 0 {
			continue
		}
		out = append(out, configMap(ns, fmt.Sprintf("s%d", i), map[string]any{"round": strconv.Itoa(round)}))
	}
	return out
}

// liveEqualsDesired checks I7: exactly the desired ConfigMaps carry our annotation, with the
// desired data.
func (h *harness) liveEqualsDesired(desired []*unstructured.Unstructured, violations *int) {
	h.t.Helper()
	want := map[string]string{}
	for _, u := range desired {
		v, _, _ := unstructured.NestedString(u.Object, "data", "round")
		want[u.GetName()] = v
	}
	list := &unstructured.UnstructuredList{}
	list.SetAPIVersion("v1")
	list.SetKind("ConfigMapList")
	if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	got := map[string]string{}
	for _, u := range list.Items {
		if u.GetAnnotations()[OwnerAnnotation] == h.ref.ID {
			v, _, _ := unstructured.NestedString(u.Object, "data", "round")
			got[u.GetName()] = v
		}
	}
	if fmt.Sprint(want) != fmt.Sprint(got) {
		h.t.Errorf("I7: live %v, desired %v", got, want)
		*violations++
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
