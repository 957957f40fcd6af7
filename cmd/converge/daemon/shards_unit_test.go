package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestFairShare: the live replicas' shares cover every shard, and differ by at most one
// shard once balanced.
func TestFairShare(t *testing.T) {
	for _, c := range []struct{ n, live, want int }{
		{64, 1, 64}, {64, 3, 22}, {64, 4, 16}, {64, 5, 13}, {12, 3, 4}, {12, 5, 3}, {1, 3, 1}, {64, 0, 64}, {3, 64, 1},
	} {
		got := fairShare(c.n, c.live)
		if got != c.want {
			t.Errorf("fairShare(%d, %d) = %d, want %d", c.n, c.live, got, c.want)
		}
		if c.live > 0 && got*c.live < c.n {
			t.Errorf("fairShare(%d, %d) = %d: %d replicas cannot hold every shard", c.n, c.live, got, c.live)
		}
	}
}

// TestShardOfStable: a Sync's shard depends on its UID only, and spreads.
func TestShardOfStable(t *testing.T) {
	if shardOf("3c1f0b8e-1111-4c1d-9a0e-000000000001", 64) != shardOf("3c1f0b8e-1111-4c1d-9a0e-000000000001", 64) {
		t.Fatal("shardOf is not stable")
	}
	used := map[int]bool{}
	for i := 0; i < 640; i++ {
		used[shardOf(types.UID(time.Duration(i).String()+"-uid"), 64)] = true
	}
	if len(used) < 60 {
		t.Errorf("640 UIDs fell in only %d of 64 shards", len(used))
	}
}

// TestShardFence: a write made for a shard goes out only while the shard is held and
// renewed within the deadline; a released or lost shard, or one past its deadline, refuses
// it before it is sent. Reads and writes that name no shard pass.
func TestShardFence(t *testing.T) {
	var sent int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent++ }))
	defer srv.Close()
	now := time.Unix(1000, 0)
	tab := newShardTable(4, 10*time.Second)
	tab.now = func() time.Time { return now }
	rt := tab.wrap(http.DefaultTransport)
	do := func(ctx context.Context, method string) error {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	shard1 := withShard(context.Background(), 1)
	mustRefuse := func(what string) {
		t.Helper()
		before := sent
		if err := do(shard1, http.MethodPatch); !errors.Is(err, errShardNotHeld) || sent != before {
			t.Errorf("%s: a write went out (err %v)", what, err)
		}
		if err := do(shard1, http.MethodGet); err != nil {
			t.Errorf("%s: a read was refused: %v", what, err)
		}
		if err := do(context.Background(), http.MethodPost); err != nil {
			t.Errorf("%s: a write naming no shard was refused: %v", what, err)
		}
	}
	mustRefuse("never held")
	if _, ok := tab.begin(1); ok {
		t.Error("a reconcile started for a shard not held")
	}

	tab.renewed(1, now)
	done, ok := tab.begin(1)
	if !ok {
		t.Fatal("no reconcile starts for a held shard")
	}
	if err := do(shard1, http.MethodPatch); err != nil {
		t.Fatalf("held: %v", err)
	}
	// Releasing: no reconcile starts, the running one may still write.
	if !tab.stop(1, false) {
		t.Fatal("stop: nothing to drain")
	}
	if _, ok := tab.begin(1); ok {
		t.Error("a reconcile started for a shard being released")
	}
	if err := do(shard1, http.MethodPatch); err != nil {
		t.Errorf("a reconcile of a shard being released could not finish its writes: %v", err)
	}
	// Past the deadline without a renew (paused, or the API server unreachable).
	now = now.Add(10 * time.Second)
	mustRefuse("past the renew deadline")
	now = now.Add(-5 * time.Second)
	// Lost: refused at once, though within the deadline.
	tab.stop(1, true)
	mustRefuse("lost")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := tab.drain(ctx, 1); err == nil {
		t.Error("drained while a reconcile still runs")
	}
	cancel()
	done()
	if err := tab.drain(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	tab.drained(1)
	if !tab.free(1) {
		t.Error("a lost and drained shard is not free to acquire again")
	}
}

// TestShardLeaseExpiry: a held shard Lease is taken only once neither it nor its holder's
// replica Lease changed for the lease duration on this process's clock; a replica Lease
// deleted while fresh (another process took the replica's name) restarts the wait, one
// deleted after it expired does not.
func TestShardLeaseExpiry(t *testing.T) {
	const d = 4 * time.Second
	c := &shardCoordinator{o: Options{LeaseDuration: d}, seen: map[string]observedLease{}}
	shard := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "converge-shard-00", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x_1")}}
	t0 := time.Unix(1000, 0)
	see := func(now time.Time, member string) bool {
		c.observe(shard.Name, shard.ResourceVersion, now)
		c.observeHolder("holder:x_1", member, d, now)
		return c.expired(shard, now)
	}
	if see(t0, "10") || see(t0.Add(d-time.Millisecond), "10") {
		t.Fatal("expired before the lease duration")
	}
	if see(t0.Add(d-time.Millisecond), "11") || see(t0.Add(2*d-2*time.Millisecond), "11") {
		t.Fatal("expired though the holder renewed its replica Lease")
	}
	if !see(t0.Add(2*d), "11") {
		t.Fatal("not expired a lease duration after the holder's last renew")
	}
	if !see(t0.Add(2*d+time.Second), "absent") {
		t.Fatal("the replica Lease deleted after it expired restarted the wait")
	}
	// A fresh replica Lease deleted: wait again.
	c.seen = map[string]observedLease{}
	see(t0, "10")
	if see(t0.Add(time.Second), "absent") || see(t0.Add(d), "absent") {
		t.Fatal("a replica Lease deleted while fresh let its shards go at once")
	}
	if !see(t0.Add(time.Second+d), "absent") {
		t.Fatal("never expired")
	}
	free := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "converge-shard-01"}}
	if !c.expired(free, t0) {
		t.Error("a Lease without holder is not free")
	}
}

// TestShardFenceCancelsInFlightWrite: a write sent while its shard is held is cancelled
// once the shard's holding ends unrenewed, so it cannot stay in flight long after another
// replica may have taken the shard over (the API server stalled, the connection hung).
// Before, the fence checked only when the request was sent: the write below, answered after
// 10 s, succeeded although the shard had run out 9.7 s before.
func TestShardFenceCancelsInFlightWrite(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	tab := newShardTable(2, 300*time.Millisecond)
	tab.renewed(1, time.Now())
	req, _ := http.NewRequestWithContext(withShard(context.Background(), 1), http.MethodPatch, srv.URL, nil)
	resp, err := tab.wrap(http.DefaultTransport).RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a write still in flight when its shard ran out went through")
	}
	if !errors.Is(err, errShardNotHeld) {
		t.Fatalf("want the write cancelled by the shard fence, got %v", err)
	}
}

// TestShardFenceKeepsRenewedWrite: a slow write whose shard is renewed while it is in flight
// goes on (an admission webhook taking longer than the renew deadline must not fail every
// apply under sharding), and once the answer's status has come its body is read to the end
// even after the shard ran out: the write happened. Both were cut at the deadline of the
// first version of the in-flight cancellation.
func TestShardFenceKeepsRenewedWrite(t *testing.T) {
	tab := newShardTable(2, 300*time.Millisecond)
	tab.renewed(0, time.Now())
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the coordinator's renewals
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				tab.renewAll(time.Now())
			}
		}
	}()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(900 * time.Millisecond) // three renew deadlines
		_, _ = w.Write([]byte("applied"))
	}))
	defer slow.Close()
	rt := tab.wrap(http.DefaultTransport)
	req, _ := http.NewRequestWithContext(withShard(context.Background(), 0), http.MethodPatch, slow.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("a write whose shard stayed renewed was cancelled: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "applied" {
		t.Fatalf("body %q, %v", body, err)
	}

	// Headers in time, the body after the shard ran out (renewals stopped).
	lateBody := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(700 * time.Millisecond)
		_, _ = w.Write([]byte("late"))
	}))
	defer lateBody.Close()
	tab1 := newShardTable(2, 300*time.Millisecond)
	tab1.renewed(1, time.Now())
	req, _ = http.NewRequestWithContext(withShard(context.Background(), 1), http.MethodPatch, lateBody.URL, nil)
	resp, err = tab1.wrap(http.DefaultTransport).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "late" {
		t.Fatalf("the body of an answered write was cut: %q, %v", body, err)
	}
}

// TestShardReadsBackOff: a Sync whose cache stays behind its live read is requeued less and
// less often, up to cacheBehindMax, and from the start again once it was read in step.
// Before, it was requeued every 100 ms for as long as the cache stayed behind.
func TestShardReadsBackOff(t *testing.T) {
	var r shardReads
	key := types.NamespacedName{Namespace: "a", Name: "s"}
	var got []time.Duration
	for range 8 {
		got = append(got, r.retryAfter(key))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, cacheBehindMax, cacheBehindMax}
	if !slices.Equal(got, want) {
		t.Errorf("requeues %v, want %v", got, want)
	}
	r.record(key, 1)
	if d := r.retryAfter(key); d != cacheBehindFirst {
		t.Errorf("after a read in step the back-off did not start again: %v", d)
	}
}

func TestShardOfLeaseName(t *testing.T) {
	o := Options{}
	for name, want := range map[string]int{"converge-shard-00": 0, "converge-shard-07": 7, "converge-shard-123": 123,
		"converge-shard-7": -1, "converge-shard-0x": -1, "converge-replica-a": -1, "converge-shard-ab12-03": -1} {
		i, ok := o.shardOfLeaseName(name)
		if (want < 0) == ok || (ok && i != want) {
			t.Errorf("%s: %d, %v; want %d", name, i, ok, want)
		}
	}
}

// TestShardRefusedMarksTheReconcile: a write refused by the shard fence marks the
// reconcile's context, also when the shard is writable again afterwards (a renewal answered
// late), so the reconcile records no outcome made of the fence's refusals. Before, the
// status of such a reconcile said ApplyFailed with "shard not held" errors (seen in the
// 3-replica scale bench).
func TestShardRefusedMarksTheReconcile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	tab := newShardTable(2, 10*time.Second)
	tab.now = func() time.Time { return now }
	tab.renewed(0, now)
	rt := tab.wrap(http.DefaultTransport)
	patch := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	ctx := withShard(context.Background(), 0)
	if err := patch(ctx); err != nil || shardRefused(ctx) {
		t.Fatalf("a write of a held shard: %v, refused %v", err, shardRefused(ctx))
	}
	now = now.Add(11 * time.Second) // past the deadline, not swept yet
	if err := patch(ctx); !errors.Is(err, errShardNotHeld) {
		t.Fatalf("want the fence's refusal, got %v", err)
	}
	tab.renewAll(now.Add(-2 * time.Second)) // a renewal sent in time, answered late: writable again
	if !tab.writable(0) {
		t.Fatal("the late renewal did not extend the shard")
	}
	if err := patch(ctx); err != nil {
		t.Fatal(err)
	}
	if !shardRefused(ctx) {
		t.Error("the reconcile whose write was refused is not marked")
	}
	if other := withShard(context.Background(), 0); shardRefused(other) {
		t.Error("another reconcile is marked")
	}
}

// TestShardLeftOfHeld: a renewal may take until the earliest validity of the shards held
// (expired ones, not yet swept, no longer count: no renewal keeps them), and nothing bounds
// it when nothing is held.
func TestShardLeftOfHeld(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newShardTable(4, 10*time.Second)
	tab.now = func() time.Time { return now }
	if left, ok := tab.leftOfHeld(); ok {
		t.Fatalf("nothing held: got %s", left)
	}
	tab.renewed(0, now.Add(-9*time.Second))  // 1 s left
	tab.renewed(1, now.Add(-4*time.Second))  // 6 s left
	tab.renewed(2, now.Add(-12*time.Second)) // expired
	if left, ok := tab.leftOfHeld(); !ok || left != time.Second {
		t.Fatalf("got %s %v, want 1s", left, ok)
	}
	now = now.Add(time.Second)
	if left, ok := tab.leftOfHeld(); !ok || left != 5*time.Second {
		t.Fatalf("got %s %v, want 5s once shard 0 ran out", left, ok)
	}
}
