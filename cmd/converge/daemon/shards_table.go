package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errShardNotHeld refuses a write made for a Sync of a shard this replica does not hold
// validly: it was released or lost, or its Lease was not renewed within the renew deadline
// (another replica may own the shard by now).
var errShardNotHeld = errors.New("shard fence: this replica no longer holds the shard of this Sync")

// shardTable is what this replica knows of the shards it holds, shared by the coordinator
// (which acquires, renews and releases their Leases), the reconciler (which starts a
// reconcile only for a held shard and counts it while it runs) and the shard fence (which
// refuses a reconcile's writes once its shard is no longer held validly).
//
// Time is the monotonic clock of this process: a shard is valid until its last successful
// renew (measured from before the renew was sent) plus the renew deadline. Another replica
// takes the shard only after it saw the Lease unchanged for the lease duration on its own
// clock, later than that; the difference covers a write in flight at the deadline.
type shardTable struct {
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

func newShardTable(n int, deadline time.Duration) *shardTable {
	return &shardTable{n: n, deadline: deadline, now: time.Now, shards: make([]shardState, n)}
}

// begin starts a reconcile of a Sync of shard i: ok is false when the shard is not held
// validly or is being released (the reconcile must return at once); otherwise done must
// be called when the reconcile ends.
func (t *shardTable) begin(i int) (done func(), ok bool) {
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
func (t *shardTable) writable(i int) bool { return t.validFor(i) > 0 }

// renewed records a successful acquire or renew of shard i whose request was sent at sent.
func (t *shardTable) renewed(i int, sent time.Time) {
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
func (t *shardTable) epoch(i int) uint64 {
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
func (t *shardTable) renewAll(sent time.Time) {
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
func (t *shardTable) snapshot() (held []int, releasing int) {
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
func (t *shardTable) isHeld(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.shards[i].held
}

// free reports whether shard i may be acquired: neither held nor still stopping.
func (t *shardTable) free(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shards[i]
	return !s.held && !s.stopping
}

// expired reports whether held shard i went past its deadline without a renew.
func (t *shardTable) expired(i int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.shards[i]
	return s.held && !t.now().Before(s.validUntil)
}

// stop marks shard i releasing (lost false: the Lease is still held and renewed until the
// coordinator clears it) or lost (no longer held: the fence refuses its writes at once).
// drain reports that the caller must now drain the shard (wait for its reconciles, forget
// its Syncs, call drained): false when it was not held or is already being drained.
func (t *shardTable) stop(i int, lost bool) (drain bool) {
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
func (t *shardTable) drain(ctx context.Context, i int) error {
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
func (t *shardTable) drained(i int) {
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
func (t *shardTable) toClear() []int {
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
func (t *shardTable) cleared(i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shards[i] = shardState{inflight: t.shards[i].inflight}
}

// shardKey is the context key of the shard of the Sync a reconcile is for.
type shardKey struct{}

// shardCall is what a reconcile's context carries: its Sync's shard, and whether the shard
// fence refused one of its writes.
type shardCall struct {
	i       int
	refused atomic.Bool
}

// withShard returns ctx naming shard i: the shard fence checks every write made with it.
func withShard(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, shardKey{}, &shardCall{i: i})
}

// shardRefused reports whether the shard fence refused (or cancelled) a write made with ctx
// or a context derived from it: the reconcile's outcome is then not its own to record (its
// applies failed for want of the shard, not for anything in the Sync) and it must write no
// status, even if the shard is writable again by then (a renewal answered late).
func shardRefused(ctx context.Context) bool {
	c, ok := ctx.Value(shardKey{}).(*shardCall)
	return ok && c.refused.Load()
}

// wrap is the shard fence, for rest.Config.Wrap: a mutating request whose context names a
// shard (the reconcile of a Sync of it: apply, prune, status, finalizer) is refused before
// it is sent unless the shard is still held validly, and cancelled if still unanswered when
// that holding of the shard ends (not renewed within the renew deadline, lost, or given up
// and taken again: the other replicas wait the longer lease duration before taking it).
// Requests without a shard (the Leases themselves, the webhook's annotation, the CRD) pass;
// reads always pass.
func (t *shardTable) wrap(rt http.RoundTripper) http.RoundTripper {
	return writeGuard{next: rt, check: func(req *http.Request) (func() (time.Duration, error), error) {
		call, ok := req.Context().Value(shardKey{}).(*shardCall)
		if !ok {
			return nil, nil
		}
		i, epoch := call.i, t.epoch(call.i)
		return func() (time.Duration, error) {
			if left := t.validFor(i); left > 0 && t.epoch(i) == epoch {
				return left, nil
			}
			call.refused.Store(true)
			return 0, fmt.Errorf("%w (shard %d)", errShardNotHeld, i)
		}, nil
	}}
}

// validFor is how long shard i stays held validly from now (0 when it is not writable).
func (t *shardTable) validFor(i int) time.Duration {
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
func (t *shardTable) leftOfHeld() (left time.Duration, ok bool) {
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
