package shard

import (
	"slices"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
)

// The policy of a step, as pure functions of what the coordinator listed and holds and the
// time: review reads the Leases (who lives, what this replica lost, what it may clear),
// decide plans the rest (what to acquire, clear, delete and release). The coordinator
// (coordinator.go) carries the plans out, in their order, each write only while the step's
// budget lasts.

// observed is a record's version and when this process first saw it.
type observed struct {
	rv string
	at time.Time
}

// seen is what the coordinator observed, by key: a Lease's name, or "holder:<identity>" for
// the replica Lease of a shard holder (version "absent" when it has none). A record is
// judged by how long it has been seen unchanged on this process's monotonic clock, as
// client-go's leader election does, never by comparing clocks.
type seen map[string]observed

// observe notes the Leases listed at now: each at its version, each shard holder at its
// replica Lease's version, and forgets the records no longer listed.
func (s seen) observe(leases []coordinationv1.Lease, now time.Time, c Config) {
	names := map[string]bool{}
	members := map[string]*coordinationv1.Lease{} // holder identity → its replica Lease
	for i := range leases {
		l := &leases[i]
		names[l.Name] = true
		s.note(l.Name, l.ResourceVersion, now)
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" && l.Labels[labelLeaseKind] == leaseKindMember {
			members[h] = l
		}
	}
	for i := range leases {
		l := &leases[i]
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		if h == "" || l.Labels[labelLeaseKind] != leaseKindShard {
			continue
		}
		key := "holder:" + h
		names[key] = true
		rv := "absent"
		if m := members[h]; m != nil {
			rv = m.ResourceVersion
		}
		s.noteHolder(key, rv, duration(l, c), now)
	}
	for name := range s {
		if !names[name] {
			delete(s, name)
		}
	}
}

// note records when the record key was first seen at version rv.
func (s seen) note(key, rv string, now time.Time) {
	if o, ok := s[key]; !ok || o.rv != rv {
		s[key] = observed{rv: rv, at: now}
	}
}

// noteHolder notes the replica Lease of a shard holder. A Lease deleted after it had
// expired stays expired: the replica that deleted it (a dropped member) does not make the
// others wait a second lease duration for its shards.
func (s seen) noteHolder(key, rv string, d time.Duration, now time.Time) {
	if o, ok := s[key]; ok && o.rv != rv && rv == "absent" && now.Sub(o.at) >= d {
		s[key] = observed{rv: rv, at: o.at}
		return
	}
	s.note(key, rv, now)
}

// unchanged reports whether the record key was seen at one version for d or longer.
func (s seen) unchanged(key string, d time.Duration, now time.Time) bool {
	o, ok := s[key]
	return ok && now.Sub(o.at) >= d
}

// expired reports whether shard Lease l is free: no holder, or neither it nor its holder's
// replica Lease (which the holder renews for all its shards) changed for the lease duration.
func (s seen) expired(l *coordinationv1.Lease, now time.Time, c Config) bool {
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	if h == "" {
		return true
	}
	d := duration(l, c)
	return s.unchanged(l.Name, d, now) && s.unchanged("holder:"+h, d, now)
}

// duration is l's lease duration, else the configured one.
func duration(l *coordinationv1.Lease, c Config) time.Duration {
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return c.LeaseDuration
}

// sameShards reports whether l was written by a replica of c's --shards.
func sameShards(l *coordinationv1.Lease, c Config) bool {
	return l.Annotations[annotationShards] == strconv.Itoa(c.Shards)
}

// holder is l's holder identity ("" for none).
func holder(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }

// fairShare is how many of n shards each of live replicas may hold: ceil(n/live), so that
// the live replicas together can hold every shard, none holding more than one above another.
func fairShare(n, live int) int {
	if live < 1 {
		live = 1
	}
	return (n + live - 1) / live
}

// mine is what a step knows of this replica when it decides.
type mine struct {
	identity string
	held     []bool // per shard: held (being released or not)
	toClear  []int  // the shards whose release finished (Table.toClear)
}

// loss is a held shard given up without a Lease write, and why.
type loss struct {
	shard  int
	reason string
}

// shardLease is a shard and its Lease as listed (nil: none, or not this replica's to clear).
type shardLease struct {
	shard int
	lease *coordinationv1.Lease
}

// reading is review's result.
type reading struct {
	shards map[string]*coordinationv1.Lease // the shard Leases listed, by name
	drop   []*coordinationv1.Lease          // replica Leases of replicas gone: deleted
	live   int                              // live replicas of this --shards, this one included
	fair   int                              // fairShare of the shards among them
	other  []string                         // Leases live under another --shards: acquire nothing
	lose   []loss                           // held shards whose Lease another holds, or nobody
	clear  []shardLease                     // released shards; their Lease, when it names this replica, is cleared
}

// review reads the Leases listed at now (s has observed them). It counts the live replicas
// of this --shards (this one included): those whose replica Lease changed within its lease
// duration; the others' Leases are dropped. A live replica or a held shard Lease of another
// --shards goes to other. A held shard whose Lease is gone or names another holder is lost.
// A released shard is cleared, unless lost now.
func review(leases []coordinationv1.Lease, s seen, now time.Time, c Config, m mine) reading {
	r := reading{shards: map[string]*coordinationv1.Lease{}, live: 1}
	for i := range leases {
		l := &leases[i]
		switch l.Labels[labelLeaseKind] {
		case leaseKindShard:
			r.shards[l.Name] = l
		case leaseKindMember:
			switch {
			case l.Name == c.ReplicaLeaseName():
			case s.unchanged(l.Name, duration(l, c), now):
				r.drop = append(r.drop, l)
			case sameShards(l, c): // a replica of another --shards shares no shard with this one
				r.live++
			default:
				// A live replica of another --shards: acquire nothing while it lives, as for
				// a shard Lease held under another count. With a replica's first step (after
				// creating its replica Lease) acquiring nothing and every later one listing
				// after its renewal, two replicas of different counts cannot both acquire:
				// each lists after registering, so whichever lists second sees the other.
				r.other = append(r.other, l.Name+"="+l.Annotations[annotationShards])
			}
		}
	}
	for _, name := range sortedNames(r.shards) {
		if l := r.shards[name]; holder(l) != "" && !sameShards(l, c) && !s.expired(l, now, c) {
			r.other = append(r.other, l.Name+"="+l.Annotations[annotationShards])
		}
	}
	r.fair = fairShare(c.Shards, r.live)
	r.lose, r.clear = losses(r.shards, c, m)
	return r
}

// losses lists the held shards whose Lease is gone or held by another, and the released
// shards to clear (those not lost now), with their Lease when it still names this replica.
func losses(shards map[string]*coordinationv1.Lease, c Config, m mine) (lose []loss, clear []shardLease) {
	lost := map[int]bool{}
	for i, held := range m.held {
		if !held {
			continue
		}
		if l := shards[c.ShardLeaseName(i)]; l == nil || holder(l) != m.identity {
			h := "nobody"
			if l != nil {
				h = holder(l)
			}
			lose = append(lose, loss{shard: i, reason: "the Lease is held by " + h})
			lost[i] = true
		}
	}
	for _, i := range m.toClear {
		if lost[i] {
			continue
		}
		r := shardLease{shard: i}
		if l := shards[c.ShardLeaseName(i)]; l != nil && holder(l) == m.identity {
			r.lease = l
		}
		clear = append(clear, r)
	}
	return lose, clear
}

// state is what the table says of one shard when a step decides (Table.states).
type state struct {
	held     bool // its Lease is this replica's
	stopping bool // being released, or lost and draining
}

// turn is what a step knows of itself when it decides.
type turn struct {
	identity   string
	steps      int  // steps before this one
	registered bool // this step created the replica Lease
	renewed    bool // this step's renewal of the replica Lease succeeded
	offset     int  // where this replica starts looking for shards to acquire
	now        time.Time
}

// plan is decide's result, carried out in this order.
type plan struct {
	waiting bool                    // Leases live under another --shards: nothing acquired
	acquire []shardLease            // shards to try to acquire, in order, until want are
	want    int                     // how many more shards this replica may hold
	stray   []shardLease            // to clear (skipped when acquired by this step)
	orphans []*coordinationv1.Lease // shard Leases of a larger --shards, free: deleted
	release []int                   // held shards above the fair share: released
}

// decide plans what remains of a step once the review's losses and clears are carried out
// and shards holds the table's state. Nothing is acquired while a Lease lives under another
// --shards, in the step that created the replica Lease (replicas starting together see each
// other first) or in one whose renewal failed; otherwise free or expired shards are tried,
// from offset, while fewer than the fair share are held. Stray Leases (naming this replica,
// not held: an acquire whose answer was lost, a lost shard) are cleared: with this replica's
// Lease renewed they would never expire. Leases numbered beyond this --shards are deleted
// once free, and only when nothing lives under another count (the rollout may go back).
// The held shards above the fair share are released.
func decide(r reading, shards []state, t turn, s seen, c Config) plan {
	var p plan
	var held []int
	for i, st := range shards {
		if st.held && !st.stopping {
			held = append(held, i)
		}
	}
	p.waiting = len(r.other) > 0
	if !p.waiting && t.steps > 0 && !t.registered && t.renewed && len(held) < r.fair {
		p.want = r.fair - len(held)
		p.acquire = acquirable(r, shards, t, s, c)
	}
	for i, st := range shards {
		if l := r.shards[c.ShardLeaseName(i)]; l != nil && holder(l) == t.identity && !st.held {
			p.stray = append(p.stray, shardLease{shard: i, lease: l})
		}
	}
	if !p.waiting {
		p.orphans = orphans(r, t, s, c)
	}
	if len(held) > r.fair {
		p.release = held[r.fair:]
	}
	return p
}

// acquirable lists, from t.offset on, the shards neither held nor stopping whose Lease is
// absent, expired, or names this replica.
func acquirable(r reading, shards []state, t turn, s seen, c Config) []shardLease {
	var out []shardLease
	for j := range shards {
		i := (t.offset + j) % len(shards)
		if shards[i].held || shards[i].stopping {
			continue
		}
		l := r.shards[c.ShardLeaseName(i)]
		if l != nil && !s.expired(l, t.now, c) && holder(l) != t.identity {
			continue
		}
		out = append(out, shardLease{shard: i, lease: l})
	}
	return out
}

// orphans lists the shard Leases numbered beyond c.Shards, written under another count,
// that are free or expired: no replica of this count ever takes them.
func orphans(r reading, t turn, s seen, c Config) []*coordinationv1.Lease {
	var out []*coordinationv1.Lease
	for _, name := range sortedNames(r.shards) {
		l := r.shards[name]
		if i, ok := c.shardOfLeaseName(name); ok && i >= c.Shards && !sameShards(l, c) && s.expired(l, t.now, c) {
			out = append(out, l)
		}
	}
	return out
}

func sortedNames(m map[string]*coordinationv1.Lease) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// budget is when a step's writes must stop: the next renewal must be sent while the held
// shards are still valid.
type budget struct {
	renewed time.Time     // when this step's successful renewal was sent (zero: it failed)
	latency time.Duration // how long the last successful renewal took
}

// bound is how long a request other than the renewal and the list may take: one
// RetryPeriod, or as long as the last renewal took on a slower API server, at most half the
// renew deadline (a step that holds nothing has no budget to stop it, and a renewal of a
// replica holding nothing may take the whole deadline).
func (b budget) bound(c Config) time.Duration {
	return max(c.RetryPeriod, min(b.latency*6/5, c.RenewDeadline/2))
}

// allows reports whether a step may still send a write at now: only until one more write
// (bound) and the next renewal (as long as the last one took) still fit before the renew
// deadline from its renewal. A step whose renewal failed counts back from left, the time
// the earliest held shard stays valid (held false: nothing held, nothing to keep): they
// stay valid until then, and the next step's renewal may still keep them.
func (b budget) allows(now time.Time, left time.Duration, held bool, c Config) bool {
	reserve := b.bound(c) + b.latency // the last write, then the next renewal
	if b.renewed.IsZero() {
		return !held || left > reserve
	}
	return now.Before(b.renewed.Add(c.RenewDeadline - reserve))
}
