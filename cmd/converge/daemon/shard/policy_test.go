package shard

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// These tests hold the decisions of a step (review, decide, budget) as tables: no client,
// no clock but the one each row states.

var (
	policyCfg = Config{Namespace: "ns", Shards: 4, Replica: "a",
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	t0 = time.Unix(1000, 0)
)

const me = "a_1"

// shardAt is the Lease of shard i of a count, held by holder ("" none) at version rv.
func shardAt(i, count int, holder, rv string) coordinationv1.Lease {
	c := policyCfg
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.ShardLeaseName(i), ResourceVersion: rv,
		Labels:      map[string]string{labelLeaseKind: leaseKindShard},
		Annotations: map[string]string{annotationShards: strconv.Itoa(count)}}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

// member is the replica Lease of replica (holder replica+"_1") of a count at version rv.
func member(replica string, count int, rv string) coordinationv1.Lease {
	c := policyCfg
	c.Replica = replica
	return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.ReplicaLeaseName(), ResourceVersion: rv,
		Labels:      map[string]string{labelLeaseKind: leaseKindMember},
		Annotations: map[string]string{annotationShards: strconv.Itoa(count)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(replica + "_1")}}
}

// history is what a coordinator saw: before, listed at t0, then now, listed age later (the
// Leases whose version changed in between were renewed meanwhile).
type history struct {
	before, now []coordinationv1.Lease
	age         time.Duration
}

func (h history) seen() (seen, time.Time) {
	s := seen{}
	s.observe(h.before, t0, policyCfg)
	s.observe(h.now, t0.Add(h.age), policyCfg)
	return s, t0.Add(h.age)
}

// same is a history of leases listed twice, unchanged, age apart.
func same(age time.Duration, leases ...coordinationv1.Lease) history {
	return history{before: leases, now: leases, age: age}
}

type reviewed struct {
	Live, Fair int
	Drop       []string
	Other      bool
	Lose       []loss
	Clear      map[int]bool // shard → its Lease is cleared (false: only forgotten)
}

func summarize(r reading) reviewed {
	out := reviewed{Live: r.live, Fair: r.fair, Other: len(r.other) > 0, Lose: r.lose}
	for _, l := range r.drop {
		out.Drop = append(out.Drop, l.Name)
	}
	if len(r.clear) > 0 {
		out.Clear = map[int]bool{}
		for _, c := range r.clear {
			out.Clear[c.shard] = c.lease != nil
		}
	}
	return out
}

func TestReview(t *testing.T) {
	const fresh, gone = 5 * time.Second, 16 * time.Second
	self := member("a", 4, "1")
	none := []bool{false, false, false, false}
	cases := []struct {
		name string
		h    history
		m    mine
		want reviewed
	}{
		{name: "alone: every shard is its share", h: same(fresh, self), m: mine{held: none},
			want: reviewed{Live: 1, Fair: 4}},
		{name: "two replicas share half each", h: history{before: []coordinationv1.Lease{self, member("b", 4, "1")},
			now: []coordinationv1.Lease{self, member("b", 4, "2")}, age: gone}, m: mine{held: none},
			want: reviewed{Live: 2, Fair: 2}},
		{name: "three replicas: the share rounds up", h: history{before: []coordinationv1.Lease{member("b", 4, "1"), member("c", 4, "1")},
			now: []coordinationv1.Lease{member("b", 4, "2"), member("c", 4, "2")}, age: gone}, m: mine{held: none},
			want: reviewed{Live: 3, Fair: 2}},
		{name: "a replica unchanged for its lease duration left: dropped, not counted",
			h: same(gone, self, member("b", 4, "1")), m: mine{held: none},
			want: reviewed{Live: 1, Fair: 4, Drop: []string{"converge-replica-b"}}},
		{name: "a replica seen less than its lease duration lives",
			h: same(fresh, member("b", 4, "1")), m: mine{held: none},
			want: reviewed{Live: 2, Fair: 2}},
		{name: "a live replica of another --shards stops acquiring and is not counted",
			h: same(fresh, member("b", 8, "1")), m: mine{held: none},
			want: reviewed{Live: 1, Fair: 4, Other: true}},
		{name: "a shard Lease held under another --shards, its holder live, stops acquiring",
			h: history{before: []coordinationv1.Lease{shardAt(5, 8, "b_1", "1"), member("b", 8, "1")},
				now: []coordinationv1.Lease{shardAt(5, 8, "b_1", "1"), member("b", 8, "2")}, age: fresh}, m: mine{held: none},
			want: reviewed{Live: 1, Fair: 4, Other: true}},
		{name: "a shard Lease of another --shards whose holder expired does not",
			h: same(gone, shardAt(5, 8, "b_1", "1")), m: mine{held: none},
			want: reviewed{Live: 1, Fair: 4}},
		{name: "own Lease taken by another: the shard is lost",
			h: same(fresh, shardAt(0, 4, "b_1", "2")), m: mine{identity: me, held: []bool{true, false, false, false}},
			want: reviewed{Live: 1, Fair: 4, Lose: []loss{{shard: 0, reason: "the Lease is held by b_1"}}}},
		{name: "own Lease gone: the shard is lost",
			h: same(fresh), m: mine{identity: me, held: []bool{false, true, false, false}},
			want: reviewed{Live: 1, Fair: 4, Lose: []loss{{shard: 1, reason: "the Lease is held by nobody"}}}},
		{name: "own Lease still own: kept",
			h: same(fresh, shardAt(2, 4, me, "1")), m: mine{identity: me, held: []bool{false, false, true, false}},
			want: reviewed{Live: 1, Fair: 4}},
		{name: "released shards: a Lease naming this replica is cleared, another only forgotten",
			h:    same(fresh, shardAt(1, 4, me, "1"), shardAt(3, 4, "b_1", "1")),
			m:    mine{identity: me, held: []bool{false, true, false, false}, toClear: []int{1, 3}},
			want: reviewed{Live: 1, Fair: 4, Clear: map[int]bool{1: true, 3: false}}},
		{name: "a released shard lost now is not cleared",
			h:    same(fresh, shardAt(1, 4, "b_1", "2")),
			m:    mine{identity: me, held: []bool{false, true, false, false}, toClear: []int{1}},
			want: reviewed{Live: 1, Fair: 4, Lose: []loss{{shard: 1, reason: "the Lease is held by b_1"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, now := c.h.seen()
			got := summarize(review(c.h.now, s, now, policyCfg, c.m))
			if len(got.Lose) == 0 {
				got.Lose = nil
			}
			if len(c.want.Lose) == 0 {
				c.want.Lose = nil
			}
			if d := cmp.Diff(c.want, got, cmp.AllowUnexported(loss{})); d != "" {
				t.Errorf("review (-want +got):\n%s", d)
			}
		})
	}
}

type decided struct {
	Waiting bool
	Acquire []int
	Want    int
	Stray   []int
	Orphans []string
	Release []int
}

func summarizePlan(p plan) decided {
	out := decided{Waiting: p.waiting, Want: p.want, Release: p.release, Orphans: nil}
	for _, a := range p.acquire {
		out.Acquire = append(out.Acquire, a.shard)
	}
	for _, s := range p.stray {
		out.Stray = append(out.Stray, s.shard)
	}
	for _, l := range p.orphans {
		out.Orphans = append(out.Orphans, l.Name)
	}
	return out
}

// holding is a table state: the shards held, and those stopping (being released, or lost
// and draining).
func holding(held, stopping []int) []state {
	out := make([]state, policyCfg.Shards)
	for _, i := range held {
		out[i].held = true
	}
	for _, i := range stopping {
		out[i].stopping = true
	}
	return out
}

func TestDecide(t *testing.T) {
	const fresh, gone = 5 * time.Second, 16 * time.Second
	ready := turn{identity: me, steps: 1, renewed: true}
	two := history{before: []coordinationv1.Lease{member("b", 4, "1")}, now: []coordinationv1.Lease{member("b", 4, "2")}, age: fresh}
	with := func(h history, more ...coordinationv1.Lease) history {
		h.before = append(append([]coordinationv1.Lease{}, h.before...), more...)
		h.now = append(append([]coordinationv1.Lease{}, h.now...), more...)
		return h
	}
	cases := []struct {
		name   string
		h      history
		shards []state
		turn   turn
		want   decided
	}{
		{name: "alone, nothing held: every shard, from the offset", h: same(fresh), shards: holding(nil, nil),
			turn: turn{identity: me, steps: 1, renewed: true, offset: 2},
			want: decided{Acquire: []int{2, 3, 0, 1}, Want: 4}},
		{name: "the first step only registers", h: same(fresh), shards: holding(nil, nil),
			turn: turn{identity: me, steps: 0, renewed: true}, want: decided{}},
		{name: "the step that created the replica Lease acquires nothing", h: same(fresh), shards: holding(nil, nil),
			turn: turn{identity: me, steps: 3, registered: true, renewed: true}, want: decided{}},
		{name: "a step whose renewal failed acquires nothing", h: same(fresh), shards: holding(nil, nil),
			turn: turn{identity: me, steps: 3}, want: decided{}},
		// The executor stops once want shards are acquired: the candidates are all it may try.
		{name: "two replicas: up to half, the other's live shards skipped",
			h:      with(two, shardAt(0, 4, "b_1", "1"), shardAt(1, 4, "b_1", "1")),
			shards: holding(nil, nil), turn: ready, want: decided{Acquire: []int{2, 3}, Want: 2}},
		{name: "at the fair share: nothing to do", h: two, shards: holding([]int{0, 1}, nil), turn: ready, want: decided{}},
		{name: "above the fair share: the last held are released", h: two, shards: holding([]int{0, 1, 2, 3}, nil),
			turn: ready, want: decided{Release: []int{2, 3}}},
		{name: "three replicas of 4 shards: 2 each, one above released",
			h: with(history{before: []coordinationv1.Lease{member("b", 4, "1"), member("c", 4, "1")},
				now: []coordinationv1.Lease{member("b", 4, "2"), member("c", 4, "2")}, age: fresh}),
			shards: holding([]int{0, 1, 3}, nil), turn: ready, want: decided{Release: []int{3}}},
		{name: "a shard being released counts neither as held nor as free", h: same(fresh), shards: holding([]int{0, 1}, []int{1}),
			turn: ready, want: decided{Acquire: []int{2, 3}, Want: 3}},
		{name: "a lost shard still draining is not acquired", h: same(fresh), shards: holding(nil, []int{0}),
			turn: ready, want: decided{Acquire: []int{1, 2, 3}, Want: 4}},
		{name: "an expired holder's shard is taken over",
			h:      same(gone, shardAt(0, 4, "x_1", "1"), shardAt(1, 4, "x_1", "1")),
			shards: holding(nil, nil), turn: ready, want: decided{Acquire: []int{0, 1, 2, 3}, Want: 4}},
		{name: "a holder whose replica Lease changes keeps its shards",
			h: history{before: []coordinationv1.Lease{shardAt(0, 4, "b_1", "1"), member("b", 4, "1")},
				now: []coordinationv1.Lease{shardAt(0, 4, "b_1", "1"), member("b", 4, "2")}, age: gone},
			shards: holding(nil, nil), turn: ready, want: decided{Acquire: []int{1, 2, 3}, Want: 2}},
		{name: "a Lease naming this replica, not held: re-taken under the share, and cleared unless taken",
			h: same(fresh, shardAt(3, 4, me, "1")), shards: holding(nil, nil), turn: ready,
			want: decided{Acquire: []int{0, 1, 2, 3}, Want: 4, Stray: []int{3}}},
		{name: "a stray Lease above the share is cleared",
			h: with(two, shardAt(3, 4, me, "1")), shards: holding([]int{0, 1}, nil), turn: ready,
			want: decided{Stray: []int{3}}},
		{name: "a live replica of another --shards: nothing acquired, no orphan deleted",
			h: with(history{before: []coordinationv1.Lease{member("b", 8, "1")}, now: []coordinationv1.Lease{member("b", 8, "2")}, age: fresh},
				shardAt(6, 8, "", "1")),
			shards: holding(nil, nil), turn: ready, want: decided{Waiting: true}},
		{name: "orphans of a larger --shards, free or expired, are deleted",
			h:      same(gone, shardAt(5, 8, "", "1"), shardAt(6, 8, "x_1", "1")),
			shards: holding([]int{0, 1, 2, 3}, nil), turn: ready,
			want: decided{Orphans: []string{"converge-shard-05", "converge-shard-06"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, now := c.h.seen()
			c.turn.now = now
			r := review(c.h.now, s, now, policyCfg, mine{identity: me, held: make([]bool, policyCfg.Shards)})
			got := summarizePlan(decide(r, c.shards, c.turn, s, policyCfg))
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("decide (-want +got):\n%s", d)
			}
		})
	}
}

func TestBudget(t *testing.T) {
	c := policyCfg // renew deadline 10 s, retry period 2 s
	cases := []struct {
		name  string
		b     budget
		after time.Duration // since t0
		left  time.Duration // of the earliest held shard
		held  bool
		bound time.Duration
		want  bool
	}{
		{name: "renewed: writes until a write and a renewal still fit", b: budget{renewed: t0}, after: 7900 * time.Millisecond, held: true, bound: 2 * time.Second, want: true},
		{name: "renewed: none once they would not", b: budget{renewed: t0}, after: 8 * time.Second, held: true, bound: 2 * time.Second, want: false},
		{name: "a slow renewal: each write may take longer, the reserve grows", b: budget{renewed: t0, latency: 3 * time.Second},
			after: 3300 * time.Millisecond, held: true, bound: 3600 * time.Millisecond, want: true},
		{name: "a slow renewal: the reserve reached", b: budget{renewed: t0, latency: 3 * time.Second},
			after: 3400 * time.Millisecond, held: true, bound: 3600 * time.Millisecond, want: false},
		{name: "the bound stops at half the renew deadline", b: budget{renewed: t0, latency: 10 * time.Second},
			after: 0, held: true, bound: 5 * time.Second, want: false},
		{name: "renewal failed: counts back from the earliest held shard", b: budget{}, left: 5 * time.Second, held: true, bound: 2 * time.Second, want: true},
		{name: "renewal failed: too little left", b: budget{}, left: time.Second, held: true, bound: 2 * time.Second, want: false},
		{name: "renewal failed, nothing held: nothing to keep", b: budget{}, bound: 2 * time.Second, want: true},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			if got := k.b.bound(c); got != k.bound {
				t.Errorf("bound %s, want %s", got, k.bound)
			}
			if got := k.b.allows(t0.Add(k.after), k.left, k.held, c); got != k.want {
				t.Errorf("allows %v, want %v", got, k.want)
			}
		})
	}
}
