package shard

import (
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
	if Of("3c1f0b8e-1111-4c1d-9a0e-000000000001", 64) != Of("3c1f0b8e-1111-4c1d-9a0e-000000000001", 64) {
		t.Fatal("shardOf is not stable")
	}
	used := map[int]bool{}
	for i := 0; i < 640; i++ {
		used[Of(types.UID(time.Duration(i).String()+"-uid"), 64)] = true
	}
	if len(used) < 60 {
		t.Errorf("640 UIDs fell in only %d of 64 shards", len(used))
	}
}

// TestShardLeaseExpiry: a held shard Lease is taken only once neither it nor its holder's
// replica Lease changed for the lease duration on this process's clock; a replica Lease
// deleted while fresh (another process took the replica's name) restarts the wait, one
// deleted after it expired does not.
func TestShardLeaseExpiry(t *testing.T) {
	const d = 4 * time.Second
	cfg := Config{LeaseDuration: d}
	s := seen{}
	shard := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "converge-shard-00", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("x_1")}}
	t0 := time.Unix(1000, 0)
	see := func(now time.Time, member string) bool {
		s.note(shard.Name, shard.ResourceVersion, now)
		s.noteHolder("holder:x_1", member, d, now)
		return s.expired(shard, now, cfg)
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
	s = seen{}
	see(t0, "10")
	if see(t0.Add(time.Second), "absent") || see(t0.Add(d), "absent") {
		t.Fatal("a replica Lease deleted while fresh let its shards go at once")
	}
	if !see(t0.Add(time.Second+d), "absent") {
		t.Fatal("never expired")
	}
	free := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "converge-shard-01"}}
	if !s.expired(free, t0, cfg) {
		t.Error("a Lease without holder is not free")
	}
}

// TestShardReadsBackOff: a Sync whose cache stays behind its live read is requeued less and
// less often, up to cacheBehindMax, and from the start again once it was read in step.
// Without the back-off, it would be requeued every 100 ms for as long as the cache stays
// behind.
func TestShardReadsBackOff(t *testing.T) {
	var r reads
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
	r.record(key, "", 1)
	if d := r.retryAfter(key); d != cacheBehindFirst {
		t.Errorf("after a read in step the back-off did not start again: %v", d)
	}
}

// TestLiveReadOfARecreatedSyncIsKept: forgetting a Sync gone (its UID) keeps the live read of
// the Sync that took its name since, so the new Sync's next reconcile does not read it live
// again; forgetting that one, or with no UID, drops it.
func TestLiveReadOfARecreatedSyncIsKept(t *testing.T) {
	var r reads
	key := types.NamespacedName{Namespace: "ns", Name: "app"}
	r.record(key, "uid-new", 3)
	r.forget(key, "uid-old")
	if r.stale(key, 3) {
		t.Errorf("forgetting the old Sync dropped the new one's live read")
	}
	r.forget(key, "uid-new")
	if !r.stale(key, 3) {
		t.Errorf("forgetting the new Sync kept its live read")
	}
	r.record(key, "uid-new", 3)
	r.forget(key, "")
	if !r.stale(key, 3) {
		t.Errorf("forgetting with no UID kept the live read")
	}
}

func TestShardOfLeaseName(t *testing.T) {
	o := Config{}
	for name, want := range map[string]int{"converge-shard-00": 0, "converge-shard-07": 7, "converge-shard-123": 123,
		"converge-shard-7": -1, "converge-shard-0x": -1, "converge-replica-a": -1, "converge-shard-ab12-03": -1} {
		i, ok := o.shardOfLeaseName(name)
		if (want < 0) == ok || (ok && i != want) {
			t.Errorf("%s: %d, %v; want %d", name, i, ok, want)
		}
	}
}

// TestShardLeftOfHeld: a renewal may take until the earliest validity of the shards held
// (expired ones, not yet swept, no longer count: no renewal keeps them), and nothing bounds
// it when nothing is held.
func TestShardLeftOfHeld(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newTable(4, 10*time.Second)
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

// TestShardRenewAllKeepsExpired: a renewal cannot revive a shard whose validity ran out
// before it was sent (another replica may have taken it). Without the check, renewAll would
// extend it.
func TestShardRenewAllKeepsExpired(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newTable(2, 10*time.Second)
	tab.now = func() time.Time { return now }
	tab.renewed(0, now)
	tab.renewed(1, now.Add(8*time.Second))
	now = now.Add(14 * time.Second)
	if tab.writable(0) {
		t.Fatal("shard 0 should have expired")
	}
	tab.renewAll(now)
	if tab.writable(0) {
		t.Errorf("a shard expired 4 s ago is writable again after a late renewal")
	}
	if !tab.writable(1) {
		t.Errorf("shard 1, valid when the renewal was sent, was not extended")
	}
}
