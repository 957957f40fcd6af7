package shard

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Table is what this replica knows of the shards it holds, shared by the coordinator
// (which acquires, renews and releases their Leases), the reconciler (which starts a
// reconcile only for a held shard and counts it while it runs) and the shard fence (which
// refuses a reconcile's writes once its shard is no longer held validly).
//
// Time is the monotonic clock of this process: a shard is valid until its last successful
// renew (measured from before the renew was sent) plus the renew deadline. Another replica
// takes the shard only after it saw the Lease unchanged for the lease duration on its own
// clock, later than that; the difference covers a write in flight at the deadline.
type Table struct {
	n        int
	deadline time.Duration // RenewDeadline
	now      func() time.Time

	mu     sync.Mutex
	shards []shardState
	epochs uint64 // acquisitions so far: shardState.epoch
}

// shardState is one shard as this replica sees it. The states: free (not held, not
// stopping); held; releasing (held, stopping: no reconcile starts, the in-flight ones
// finish and may still write, then its Syncs are forgotten and released set); lost (not
// held, stopping until the in-flight reconciles finished and the Syncs are forgotten).
type shardState struct {
	held       bool
	stopping   bool
	released   bool      // releasing and drained: the coordinator may clear the Lease
	validUntil time.Time // last successful renew + deadline (monotonic)
	inflight   int
	epoch      uint64 // which acquisition of this process the holding is (0: not held)
}

// NewTable is the table of c's shards, none held.
func NewTable(c Config) *Table { return newTable(c.Shards, c.RenewDeadline) }

func newTable(n int, deadline time.Duration) *Table {
	return &Table{n: n, deadline: deadline, now: time.Now, shards: make([]shardState, n)}
}

// begin starts a reconcile of a Sync of shard i: ok is false when the shard is not held
// validly or is being released (the reconcile must return at once); otherwise done must
// be called when the reconcile ends.
func (t *Table) begin(i int) (done func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.shards[i]
	if !s.held || s.stopping || !t.now().Before(s.validUntil) {
		return nil, false
	}
	s.inflight++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			t.shards[i].inflight--
			t.mu.Unlock()
		})
	}, true
}

// writable reports whether a reconcile of shard i may still write: the shard is held (a
// shard being released still is, for its in-flight reconciles) and renewed within the
// deadline.
func (t *Table) writable(i int) bool { return t.validFor(i) > 0 }

// renewed records a successful acquire or renew of shard i whose request was sent at sent.
func (t *Table) renewed(i int, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.shards[i]
	if !s.held {
		t.epochs++
		s.epoch = t.epochs
	}
	s.held, s.validUntil = true, sent.Add(t.deadline)
}

// epoch names the current holding of shard i (0 when not held): it changes with every
// acquisition, so the reconciler knows the first reconcile of a Sync after its shard came
// (back) to this replica, which must not trust the cache (another holder wrote since).
func (t *Table) epoch(i int) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.shards[i].held {
		return 0
	}
	return t.shards[i].epoch
}

// renewAll records a successful renew of this replica's Lease sent at sent: every held
// shard still valid when it was sent is valid until the deadline from then. A shard whose
// validity had run out before (not yet swept) stays expired: another replica may have
// judged it free and taken it, and a renew cannot undo that.
func (t *Table) renewAll(sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	until := sent.Add(t.deadline)
	for i := range t.shards {
		if s := &t.shards[i]; s.held && sent.Before(s.validUntil) && until.After(s.validUntil) {
			s.validUntil = until
		}
	}
}

// snapshot lists the shards held and not being released, and counts those being released.
func (t *Table) snapshot() (held []int, releasing int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, s := range t.shards {
		switch {
		case s.held && !s.stopping:
			held = append(held, i)
		case s.held:
			releasing++
		}
	}
	return held, releasing
}

// isHeld reports whether shard i is held (being released or not).
func (t *Table) isHeld(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shards[i].held
}

// free reports whether shard i may be acquired: neither held nor still stopping.
func (t *Table) free(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shards[i]
	return !s.held && !s.stopping
}

// expired reports whether held shard i went past its deadline without a renew.
func (t *Table) expired(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shards[i]
	return s.held && !t.now().Before(s.validUntil)
}

// stop marks shard i releasing (lost false: the Lease is still held and renewed until the
// coordinator clears it) or lost (no longer held: the fence refuses its writes at once).
// drain reports that the caller must now drain the shard (wait for its reconciles, forget
// its Syncs, call drained): false when it was not held or is already being drained.
func (t *Table) stop(i int, lost bool) (drain bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.shards[i]
	if !s.held {
		return false
	}
	was := s.stopping
	s.stopping = true
	if lost {
		s.held = false
		if s.released { // drained already: nothing left to wait for
			s.released, s.stopping = false, false
		}
	}
	return !was
}

// drain waits until no reconcile of shard i runs (or ctx ends).
func (t *Table) drain(ctx context.Context, i int) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		t.mu.Lock()
		n := t.shards[i].inflight
		t.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shard %d: %d reconciles still running: %w", i, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// drained records that the stopped shard i has no reconcile running and its Syncs are
// forgotten: a lost shard becomes free, a releasing one waits for its Lease to be cleared.
func (t *Table) drained(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := &t.shards[i]
	if s.held {
		s.released = true
	} else {
		s.stopping = false
	}
}

// toClear lists the releasing shards whose Lease may be cleared now.
func (t *Table) toClear() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []int
	for i, s := range t.shards {
		if s.held && s.released {
			out = append(out, i)
		}
	}
	return out
}

// cleared records that the Lease of shard i was released (or lost while releasing).
func (t *Table) cleared(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shards[i] = shardState{inflight: t.shards[i].inflight}
}

// validFor is how long shard i stays held validly from now (0 when it is not writable).
func (t *Table) validFor(i int) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shards[i]
	if !s.held {
		return 0
	}
	return max(0, s.validUntil.Sub(t.now()))
}

// leftOfHeld is how long the held shard whose validity ends first stays valid from now: the
// longest a renewal of every held shard may take and still renew them all. ok is false when
// no shard is held validly (nothing a renewal could keep).
func (t *Table) leftOfHeld() (left time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, s := range t.shards {
		if d := s.validUntil.Sub(now); s.held && d > 0 && (!ok || d < left) {
			left, ok = d, true
		}
	}
	return left, ok
}

// heldSet says, per shard, whether it is held (being released or not).
func (t *Table) heldSet() []bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]bool, len(t.shards))
	for i, s := range t.shards {
		out[i] = s.held
	}
	return out
}

// states is the state of every shard, for decide.
func (t *Table) states() []state {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]state, len(t.shards))
	for i, s := range t.shards {
		out[i] = state{held: s.held, stopping: s.stopping}
	}
	return out
}
