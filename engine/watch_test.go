package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
)

// newWatchHarness is newHarness with a running watch cache (Options.Watch). changed, if
// given, becomes Options.Changed.
func newWatchHarness(t *testing.T, changed ...func(string)) *harness {
	t.Helper()
	cluster.Require(t, env)
	h := newHarness(t, Hooks{})
	var onChange func(string)
	if len(changed) > 0 {
		onChange = changed[0]
	}
	h.useWatchEngine(Options{Changed: onChange})
	return h
}

// useWatchEngine replaces h's engine with a watch-cache engine of opts (Watch set, a short
// PollInterval unless given) on a fresh fault transport, running until the test ends.
func (h *harness) useWatchEngine(opts Options) {
	h.t.Helper()
	cfg, rt := fault.Config(env.Config)
	opts.Watch = true
	if opts.PollInterval == 0 {
		opts.PollInterval = 500 * time.Millisecond
	}
	eng, err := New(cfg, opts)
	if err != nil {
		h.t.Fatal(err)
	}
	runUntilCleanup(h.t, eng)
	h.eng, h.rt = eng, rt
}

// runUntilCleanup runs eng (its watch cache) until the test ends, and fails the test if Run
// returns an error.
func runUntilCleanup(t *testing.T, eng *Engine) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func manyCMs(ns, value string, n int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, n)
	for i := range n {
		out = append(out, configMap(ns, fmt.Sprintf("cm-%02d", i), map[string]any{"v": value}))
	}
	return out
}

// settle re-applies objs until a run sends at most maxRequests requests (the watch cache
// catches up with the last writes within a few runs) and returns that run's result.
func (h *harness) settle(opts ApplyOptions, maxRequests int, objs []*unstructured.Unstructured) *Result {
	h.t.Helper()
	var res *Result
	for range 20 {
		h.rt.Reset()
		res = h.apply(opts, objs...)
		if h.rt.Count() <= maxRequests {
			return res
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.t.Fatalf("a re-apply of an unchanged set never got down to %d requests (last: %v, writes %v)",
		maxRequests, h.rt.Counts(), h.rt.Writes())
	return res
}

// TestWatchNoOpSendsNothing checks the watch-cache fast path: once converged, a re-apply of
// the unchanged set (with readiness wait) costs only the inventory read and no write (I7;
// the no-op target of docs/benchmarks.md: ≤ 10 requests, no write), and reports every object unchanged.
func TestWatchNoOpSendsNothing(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	opts.Wait = true
	objs := manyCMs(h.ns, "1", 20)
	h.apply(opts, objs...)
	res := h.settle(opts, 1, objs)
	if s := res.Summary(); s.Unchanged != 20 || s.NotReady != 0 {
		t.Errorf("no-op summary = %+v, want 20 unchanged, all ready", s)
	}
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("a no-op sent writes: %v", w)
	}
}

// TestWatchDetectsDrift checks the fast path never trades correctness away: an out-of-band
// edit of a live object changes its resourceVersion, so the next run takes the full path and
// restores it (I7), and a changed desired object is applied.
func TestWatchDetectsDrift(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 5)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)

	live := h.liveCM("cm-03")
	if err := unstructured.SetNestedField(live.Object, "edited", "data", "v"); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, live, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	var got string
	for range 20 { // until the watch cache shows the edit, runs may still skip cm-03
		h.apply(opts, objs...)
		if got, _, _ = unstructured.NestedString(h.liveCM("cm-03").Object, "data", "v"); got == "1" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got != "1" {
		t.Fatalf("out-of-band edit not corrected: data.v = %q", got)
	}

	changed := manyCMs(h.ns, "1", 5)
	changed[1] = configMap(h.ns, "cm-01", map[string]any{"v": "2"})
	res := h.apply(opts, changed...)
	if got := actions(res.Changes)[cmID(h.ns, "cm-01")]; got != ActionConfigured {
		t.Errorf("changed object: action %s, want configured", got)
	}
}

// TestWatchRemembersWhatItApplied checks the memo records objects the run created or
// configured, not only those it verified unchanged: once the watch cache has seen the writes,
// the very next run of the same set sends nothing per object (a run that forgot what it
// had just applied would send the run after every change down the full path once more).
func TestWatchRemembersWhatItApplied(t *testing.T) {
	h := newWatchHarness(t)
	opts := testOpts()
	for _, value := range []string{"created", "configured"} {
		objs := manyCMs(h.ns, value, 10)
		h.apply(opts, objs...)
		time.Sleep(time.Second) // let the watch cache see the writes (not a timing assertion)
		h.rt.Reset()
		res := h.apply(opts, objs...)
		if s := res.Summary(); s.Unchanged != 10 || h.rt.Count() > 1 {
			t.Errorf("after objects were %s: summary %+v, requests %v; want 10 unchanged and only the inventory read",
				value, s, h.rt.Counts())
		}
	}
}

// TestWatchReportsOutOfBandChanges checks Options.Changed: an out-of-band edit and a deletion
// of managed objects are reported with the owner's inventory ID, so the daemon can correct
// them without waiting for the interval (the drift target of docs/benchmarks.md: corrected within 5 s of the edit).
// newReportingHarness is newWatchHarness whose Options.Changed reports go to the returned
// channel (up to 100 waiting; more are dropped).
func newReportingHarness(t *testing.T) (*harness, chan string) {
	t.Helper()
	reports := make(chan string, 100)
	h := newWatchHarness(t, func(id string) {
		select {
		case reports <- id:
		default:
		}
	})
	return h, reports
}

func TestWatchReportsOutOfBandChanges(t *testing.T) {
	h, reports := newReportingHarness(t)
	opts := testOpts()
	objs := manyCMs(h.ns, "1", 3)
	h.apply(opts, objs...)
	h.settle(opts, 1, objs)
	expect := func(what string) {
		t.Helper()
		for {
			select {
			case id := <-reports:
				if id == h.ref.ID {
					return
				}
			case <-h.ctx.Done():
				t.Fatalf("%s: never reported", what)
			}
		}
	}
	drain := func() {
		for len(reports) > 0 {
			<-reports
		}
	}

	drain()
	live := h.liveCM("cm-01")
	if err := unstructured.SetNestedField(live.Object, "edited", "data", "v"); err != nil {
		t.Fatal(err)
	}
	if err := h.plain.Update(h.ctx, live, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	expect("an out-of-band edit")

	drain()
	if err := h.plain.Delete(h.ctx, h.liveCM("cm-02")); err != nil {
		t.Fatal(err)
	}
	expect("an out-of-band delete")
}
