package shard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"hash/fnv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Coordinator is the Runnable that moves shards between replicas with sharding on. It runs
// on every replica (no leader election) and, every RetryPeriod (step):
//
//  1. renews this replica's membership Lease (converge-replica-<name>): this one write is
//     the renewal of every shard it holds, so idle coordination costs one write and one list
//     per replica and RetryPeriod, whatever the number of shards;
//  2. lists the group's Leases and reviews them (review): the live replicas, those whose
//     Lease was seen to change within its lease duration, the fair share being
//     ceil(shards / live); the held shards whose Lease another holder took are lost (the
//     fence refuses their writes at once, their Syncs are forgotten once their reconciles
//     end); the Leases of the shards whose release finished are cleared;
//  3. decides the rest (decide): acquires free or expired shard Leases while it holds fewer
//     than its fair share, queueing every known Sync of an acquired shard; clears the shard
//     Leases naming its identity that it does not hold; deletes the free Leases of a larger
//     --shards; releases the shards above its fair share (no reconcile of them starts,
//     those running finish, their Syncs are forgotten, and a later step clears the Lease).
//
// A step sweeps the shards past their deadline before renewing. The renewal may take until
// the earliest renew deadline of the shards it renews; the list takes at most RetryPeriod,
// every other request at most budget.bound. A step sends no write once the next renewal
// could not be sent in time (budget.allows).
//
// The holder identity is the replica's name with a random suffix per process, and a new one
// whenever its replica Lease was deleted or taken: a restarted pod waits for its
// predecessor's Leases to expire like any other replica.
type Coordinator struct {
	cfg      Config
	table    *Table
	leases   leases
	syncs    client.Reader // the manager's cache: the Syncs of a shard
	hooks    Hooks
	metrics  *Metrics
	ownedMu  sync.Mutex // guards ownedN, the last count of owned, taken at ownedAt
	ownedN   int
	ownedAt  time.Time
	log      logr.Logger
	identity string
	now      func() time.Time

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request] // nil until the controller starts
	ctx   context.Context                                         // Start's: the drains of lost shards end with it

	// loop goroutine only:
	seen       seen
	replica    *coordinationv1.Lease
	steps      int
	registered bool // the replica Lease was created in this step: acquire nothing yet
	budget     budget
	offset     int // where this replica starts looking for shards to acquire
}

// Clients are what the coordinator reads and writes through.
type Clients struct {
	// API writes the Leases (uncached: every step lists them afresh).
	API client.Client
	// Syncs reads the Syncs of a shard (the manager's cache).
	Syncs client.Reader
}

// Hooks tell the daemon of a shard's Syncs changing hands.
type Hooks struct {
	// Forget hears every Sync of a shard released or lost, once its reconciles ended.
	Forget func(types.NamespacedName)
	// Drained, when set, hears that shard i's reconciles have ended after it was released or
	// lost, before the shard can be acquired again.
	Drained func(i int)
}

// NewCoordinator is the coordinator of t's shards.
func NewCoordinator(cfg Config, t *Table, cl Clients, h Hooks, m *Metrics, log logr.Logger) *Coordinator {
	id := newIdentity(cfg.Replica)
	hash := fnv.New32a()
	_, _ = hash.Write([]byte(id))
	c := &Coordinator{cfg: cfg, table: t, leases: leases{api: cl.API, cfg: cfg}, syncs: cl.Syncs, hooks: h,
		metrics: m, log: log, identity: id, now: time.Now,
		seen: seen{}, offset: int(hash.Sum32() % uint32(t.n))}
	count := c.owned
	m.countOwned.Store(&count)
	return c
}

// newIdentity is a holder identity for replica: its name with a random suffix.
func newIdentity(replica string) string {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	return replica + "_" + hex.EncodeToString(suffix)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica coordinates.
func (c *Coordinator) NeedLeaderElection() bool { return false }

// Source hands the coordinator the controller's queue, to queue the Syncs of an acquired
// shard.
func (c *Coordinator) Source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.queue = q
		return nil
	})
}

// Start implements manager.Runnable: it coordinates until ctx ends, then releases what it
// holds (see shutdown).
func (c *Coordinator) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.metrics.shards.Set(float64(c.table.n))
	t := time.NewTicker(c.cfg.RetryPeriod)
	defer t.Stop()
	for {
		c.step(ctx)
		select {
		case <-ctx.Done():
			c.shutdown()
			return nil
		case <-t.C:
		}
	}
}

// step is one round: renew, list, review, decide, and carry the plan out.
func (c *Coordinator) step(ctx context.Context) {
	defer func() { c.steps++ }()
	// Sweep first: a shard past its deadline is lost before the renewal, which must not
	// revive it (renewAll extends only the shards still valid when it was sent).
	c.sweep()
	c.registered, c.budget.renewed = false, time.Time{}
	if err := c.renewMembership(ctx); err != nil {
		c.log.Error(err, "renewing the replica Lease", "identity", c.identity)
	}
	list, err := c.leases.list(ctx)
	// Observed once the List returned (as client-go's leader election does): a record is
	// never judged older than it is by the time the answer took.
	now := c.now()
	if err != nil {
		c.log.Error(err, "listing the shard Leases")
		c.sweep()
		return
	}
	c.seen.observe(list, now, c.cfg)
	r := review(list, c.seen, now, c.cfg, mine{identity: c.identity, held: c.table.heldSet(), toClear: c.table.toClear()})
	c.dropMembers(ctx, r.drop)
	for _, l := range r.lose {
		c.lose(l.shard, l.reason)
	}
	c.clearReleased(ctx, r.clear)
	c.sweep()
	p := decide(r, c.table.states(), c.turn(now), c.seen, c.cfg)
	if p.waiting && c.steps%20 == 0 {
		// A shard number means other Syncs under another --shards: taking any shard while
		// one is held, or a replica lives, under another count could make two replicas write
		// one Sync. A rollout that changes --shards leaves the Syncs to the old replicas
		// until the last of them is gone.
		c.log.Info("not acquiring shards: Leases are held under another --shards", "shards", c.table.n, "leases", r.other)
	}
	c.acquire(ctx, p.acquire, p.want)
	c.clearStray(ctx, p.stray)
	c.dropOrphans(ctx, p.orphans)
	c.release(ctx, p.release, r)
	c.gauge()
}

// turn is what decide needs to know of this step.
func (c *Coordinator) turn(now time.Time) turn {
	return turn{identity: c.identity, steps: c.steps, registered: c.registered,
		renewed: !c.budget.renewed.IsZero(), offset: c.offset, now: now}
}

// inBudget reports whether this step may still send a write (budget.allows).
func (c *Coordinator) inBudget() bool {
	left, ok := c.table.leftOfHeld()
	return c.budget.allows(c.now(), left, ok, c.cfg)
}

// bound is how long a request other than the renewal and the list may take (budget.bound).
func (c *Coordinator) bound() time.Duration { return c.budget.bound(c.cfg) }

// renewMembership creates or renews this replica's Lease. Its renewal is the renewal of
// every shard this replica holds (one write per RetryPeriod, not one per shard): on success
// they are valid until the renew deadline from when it was sent. It may take until the
// earliest renew deadline of the shards held, rather than one RetryPeriod: an overloaded
// API server answers Lease writes in more than a RetryPeriod, and a renewal cut off while
// the shards were still valid loses them though nobody else could take them. A replica
// holding nothing gets the whole renew deadline: it must still register to acquire
// anything. A replica Lease deleted or taken over means another replica judged this one
// gone: every shard is lost.
func (c *Coordinator) renewMembership(ctx context.Context) error {
	sent := c.now()
	d := c.cfg.RenewDeadline // nothing held: nothing to keep
	if left, ok := c.table.leftOfHeld(); ok {
		d = left
	}
	var err error
	if c.replica == nil {
		var l *coordinationv1.Lease
		if l, err = c.leases.register(ctx, d, c.identity, sent); err == nil {
			c.replica, c.registered = l, true
		}
	} else {
		l, gone, rerr := c.leases.renew(ctx, d, c.replica, c.identity, sent)
		switch err = rerr; {
		case gone != "":
			c.replica = nil
			c.loseAll(gone)
		case err == nil:
			c.replica = l
		}
	}
	if err == nil {
		c.table.renewAll(sent)
		c.budget.renewed = sent
		c.budget.latency = c.now().Sub(sent)
	}
	return err
}

// loseAll loses every held shard, and takes a new holder identity: the replica Lease it
// re-creates must not make the shard Leases still naming the old identity look held by a
// live replica (nobody would ever take them over).
func (c *Coordinator) loseAll(why string) {
	for i := 0; i < c.table.n; i++ {
		if c.table.isHeld(i) {
			c.lose(i, why)
		}
	}
	old := c.identity
	c.identity = newIdentity(c.cfg.Replica)
	c.log.Info("new holder identity", "old", old, "identity", c.identity)
}

// dropMembers deletes the Leases of replicas gone without deleting them (killed), so the
// namespace does not collect one per pod ever run.
func (c *Coordinator) dropMembers(ctx context.Context, drop []*coordinationv1.Lease) {
	for _, l := range drop {
		if c.inBudget() {
			_ = c.leases.remove(ctx, c.bound(), l)
		}
	}
}

// clearReleased empties the holder of the shards whose release finished. A shard whose
// clear failed stays releasing (held, renewed) and is cleared again next step: its Lease
// must not keep naming this live replica, which would never be taken over.
func (c *Coordinator) clearReleased(ctx context.Context, releases []shardLease) {
	for _, r := range releases {
		if !c.inBudget() {
			return
		}
		if r.lease != nil {
			if err := c.clear(ctx, r.lease); err != nil && !apierrors.IsNotFound(err) {
				c.log.Error(err, "clearing a released shard Lease (retried next step)", "lease", r.lease.Name)
				continue
			}
			c.metrics.handovers.WithLabelValues("released").Inc()
		}
		c.table.cleared(r.shard)
		c.log.Info("released shard", "shard", r.shard)
	}
}

// clear writes l with no holder, within bound.
func (c *Coordinator) clear(ctx context.Context, l *coordinationv1.Lease) error {
	return c.leases.clear(ctx, c.bound(), l, c.now())
}
