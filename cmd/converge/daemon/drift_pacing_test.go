package daemon

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// delays records AddAfter calls; the rest of the queue is not used by driftTrigger.
type delays struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	got []time.Duration
}

func (q *delays) AddAfter(_ reconcile.Request, d time.Duration) { q.got = append(q.got, d) }

// pacedTrigger is a drift trigger on a clock the test moves, its queue recording the delays
// asked, tracking the Sync ns/app as the inventory ns_app.
func pacedTrigger() (*driftTrigger, *delays, *time.Time, types.NamespacedName) {
	clock := time.Unix(1000, 0)
	d := newDriftTrigger(newSyncStates())
	d.now = func() time.Time { return clock }
	q := &delays{}
	d.queue = q
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	d.track("ns_app", key)
	return d, q, &clock, key
}

// TestDriftPacing checks the pacing of drift-triggered reconciles on a clock the test moves:
// a first change waits the debounce; changes while one is scheduled add nothing; after a slow
// reconcile (10 s) the next one waits as long again, so changes that never stop cannot make
// a hot loop (I10); unknown inventories are ignored.
func TestDriftPacing(t *testing.T) {
	d, q, clock, key := pacedTrigger()

	d.changed("ns_app")
	d.changed("ns_app") // already scheduled
	d.changed("other")  // not a Sync of this daemon
	*clock = clock.Add(driftDebounce)
	d.reconciled(key, 10*time.Second) // the drift reconcile ran and took 10 s
	*clock = clock.Add(time.Second)
	d.changed("ns_app")
	want := []time.Duration{driftDebounce, 9 * time.Second}
	if len(q.got) != len(want) || q.got[0] != want[0] || q.got[1] != want[1] {
		t.Errorf("AddAfter delays = %v, want %v", q.got, want)
	}
}

// TestDriftScheduleTakenEarly: a reconcile that reads the Sync's objects before the drift
// reconcile's time (the queue merged the delayed request into an earlier one) takes the
// schedule; a change after it schedules another, no sooner than the minimum gap after the
// one taken. Before, that change counted as already scheduled and waited for the interval.
func TestDriftScheduleTakenEarly(t *testing.T) {
	d, q, clock, key := pacedTrigger()

	d.changed("ns_app") // scheduled in driftDebounce
	*clock = clock.Add(100 * time.Millisecond)
	d.track("ns_app", key) // a spec change's reconcile reads the objects first
	d.reconciled(key, 50*time.Millisecond)
	*clock = clock.Add(100 * time.Millisecond)
	d.changed("ns_app") // missed by that reconcile
	d.changed("ns_app") // now pending again
	// The second waits the minimum gap after the schedule taken (due 200 ms from now).
	want := []time.Duration{driftDebounce, driftDebounce + driftMinGap - 200*time.Millisecond}
	if len(q.got) != len(want) || q.got[0] != want[0] || q.got[1] != want[1] {
		t.Errorf("AddAfter delays = %v, want %v", q.got, want)
	}
}
