package daemon

import "testing"

func TestNamespaceShare(t *testing.T) {
	for _, c := range []struct {
		workers, configured, want int
	}{
		{workers: 4, want: 2},                // default: half the workers
		{workers: 5, want: 2},                // rounded down
		{workers: 2, want: 1},                //
		{workers: 1, want: 1},                // at least one: a single worker is never refused to all
		{workers: 0, want: 1},                // an unset worker count is one worker
		{workers: 4, configured: 3, want: 3}, // the flag
		{workers: 4, configured: 9, want: 4}, // at most every worker
		{workers: 4, configured: -1, want: 2},
	} {
		if got := namespaceShare(c.workers, c.configured); got != c.want {
			t.Errorf("namespaceShare(%d, %d) = %d, want %d", c.workers, c.configured, got, c.want)
		}
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

// TestNamespaceGate: a namespace at its share is refused while another is admitted; a
// finished reconcile frees its slot.
func TestNamespaceGate(t *testing.T) {
	g := newNamespaceGate(2)
	doneA1, ok1 := g.enter("a")
	_, ok2 := g.enter("a")
	if !ok1 || !ok2 {
		t.Fatal("namespace a refused within its share")
	}
	if _, ok := g.enter("a"); ok {
		t.Error("namespace a admitted over its share")
	}
	if _, ok := g.enter("b"); !ok {
		t.Error("namespace b refused while a is at its share")
	}
	doneA1()
	if _, ok := g.enter("a"); !ok {
		t.Error("namespace a refused after one of its reconciles ended")
	}
	var nilGate *namespaceGate
	if _, ok := nilGate.enter("a"); !ok {
		t.Error("a nil gate refused")
	}
}
