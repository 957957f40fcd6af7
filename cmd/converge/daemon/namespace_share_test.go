package daemon

import (
	"testing"
	"time"
)

func TestNamespaceShare(t *testing.T) {
	for _, c := range []struct {
		workers, configured, active, want int
	}{
		{workers: 4, active: 1, want: 3},     // alone: all but one worker, which reaches the queue
		{workers: 2, active: 1, want: 1},     //
		{workers: 1, active: 1, want: 1},     // at least one: a single worker is never refused to all
		{workers: 4, active: 2, want: 2},     // even shares
		{workers: 5, active: 2, want: 2},     // rounded down
		{workers: 4, active: 3, want: 1},     //
		{workers: 4, active: 9, want: 1},     // at least one each
		{workers: 0, active: 0, want: 1},     // unset counts are one
		{workers: 4, configured: 3, want: 3}, // the flag, whoever else waits
		{workers: 4, configured: 3, active: 4, want: 3},
		{workers: 4, configured: 9, want: 4}, // at most every worker
		{workers: 4, configured: -1, active: 2, want: 2},
	} {
		if got := namespaceShare(c.workers, c.configured, c.active, true); got != c.want {
			t.Errorf("namespaceShare(%d, %d, %d) = %d, want %d", c.workers, c.configured, c.active, got, c.want)
		}
	}
}

// TestNamespaceShareUnshared: a namespace that is the only one holding Syncs uses every
// worker: nobody else could use the one kept free (keeping it free, 100 Syncs of one namespace run
// on 3 of 4 workers, the fourth deferring each Sync it takes by a second: the bench's 100
// Syncs are all Ready in 14.6 s instead of 7.1 s).
func TestNamespaceShareUnshared(t *testing.T) {
	if got := namespaceShare(4, 0, 1, false); got != 4 {
		t.Errorf("alone and unshared: %d, want 4", got)
	}
	if got := namespaceShare(4, 0, 2, false); got != 2 {
		t.Errorf("two active: %d, want 2", got)
	}
	if got := namespaceShare(4, 3, 1, false); got != 3 {
		t.Errorf("configured: %d, want 3", got)
	}
	g := newNamespaceGate(4, 0)
	g.holders = &syncHolders{}
	g.holders.add("a", 2)
	var done []func()
	for i := range 4 {
		d, ok := g.enter("a")
		if !ok {
			t.Fatalf("reconcile %d of the only namespace with Syncs refused", i+1)
		}
		done = append(done, d)
	}
	for _, d := range done {
		d()
	}
	g.holders.add("b", 1)
	for i := range 3 {
		if _, ok := g.enter("a"); !ok {
			t.Fatalf("reconcile %d of a refused", i+1)
		}
	}
	if _, ok := g.enter("a"); ok {
		t.Error("a took the fourth worker while namespace b holds a Sync")
	}
	g.holders.add("b", -1)
	if _, ok := g.enter("a"); !ok {
		t.Error("a refused the fourth worker once b's Sync is gone")
	}
}

func TestAdmitted(t *testing.T) {
	for _, c := range []struct {
		inFlight, share int
		want            bool
	}{
		{0, 1, true}, {1, 1, false}, {1, 2, true}, {2, 2, false}, {3, 2, false},
	} {
		if got := admitted(c.inFlight, c.share); got != c.want {
			t.Errorf("admitted(%d, %d) = %v, want %v", c.inFlight, c.share, got, c.want)
		}
	}
}

// TestNamespaceGate: with 4 workers a namespace alone gets 3; another namespace is admitted
// beside it, and while the other runs or was deferred within waitingFor the first is held to
// 2; a finished reconcile frees its slot.
func TestNamespaceGate(t *testing.T) {
	now := time.Unix(0, 0)
	g := newNamespaceGate(4, 0)
	g.now = func() time.Time { return now }
	var doneA []func()
	enterA := func(want bool, why string) {
		t.Helper()
		done, ok := g.enter("a")
		if ok != want {
			t.Fatalf("namespace a admitted = %v, want %v: %s", ok, want, why)
		}
		if ok {
			doneA = append(doneA, done)
		}
	}
	for range 3 {
		enterA(true, "alone, within all workers but one")
	}
	enterA(false, "alone, the last worker")
	doneB, ok := g.enter("b")
	if !ok {
		t.Fatal("namespace b refused while a runs 3")
	}
	doneA[0]()
	enterA(false, "over its share of 2 while b runs")
	doneB()
	enterA(true, "b ended: a alone again")
	doneA[1]()
	g.deferred["b"] = now // b's Sync was deferred: b waits
	enterA(false, "over its share of 2 while b waits")
	now = now.Add(waitingFor + time.Second)
	enterA(true, "b has not asked for waitingFor")
	var nilGate *namespaceGate
	if _, ok := nilGate.enter("a"); !ok {
		t.Error("a nil gate refused")
	}
}
