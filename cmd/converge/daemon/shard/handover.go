package shard

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// acquire tries the shards of candidates in order until want are acquired, and queues the
// known Syncs of each.
func (c *Coordinator) acquire(ctx context.Context, candidates []shardLease, want int) {
	for _, cand := range candidates {
		i := cand.shard
		if want == 0 || !c.inBudget() {
			return
		}
		sent := c.now()
		err := c.leases.take(ctx, c.bound(), i, cand.lease, c.identity, sent)
		if err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
				c.log.Error(err, "acquiring a shard Lease", "shard", i)
			}
			continue
		}
		c.table.renewed(i, sent)
		want--
		c.metrics.handovers.WithLabelValues("acquired").Inc()
		c.log.Info("acquired shard", "shard", i, "identity", c.identity)
		c.enqueue(i)
	}
}

// clearStray clears the shard Leases naming this replica's identity that it does not hold
// (those acquired by this step excepted).
func (c *Coordinator) clearStray(ctx context.Context, strays []shardLease) {
	for _, s := range strays {
		if c.table.isHeld(s.shard) {
			continue
		}
		if !c.inBudget() {
			return
		}
		if err := c.clear(ctx, s.lease); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Error(err, "clearing a shard Lease this replica does not hold (retried next step)", "lease", s.lease.Name)
			continue
		}
		c.log.Info("cleared a shard Lease naming this replica, which does not hold it", "shard", s.shard)
	}
}

// dropOrphans deletes the free shard Leases of a larger --shards (left by a rollout that
// lowered it): no replica of this count ever takes them.
func (c *Coordinator) dropOrphans(ctx context.Context, orphans []*coordinationv1.Lease) {
	for _, l := range orphans {
		if !c.inBudget() {
			return
		}
		err := c.leases.remove(ctx, c.bound(), l)
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Error(err, "deleting a shard Lease of a larger --shards (retried next step)", "lease", l.Name)
			continue
		}
		c.log.Info("deleted a shard Lease of a larger --shards", "lease", l.Name, "shards", l.Annotations[annotationShards])
	}
}

// release stops the shards above the fair share: no reconcile of them starts, those running
// finish (so no Sync is reconciled by two replicas at once), their Syncs are forgotten, and
// a later step clears the Lease.
func (c *Coordinator) release(ctx context.Context, shards []int, r reading) {
	for _, i := range shards {
		if c.table.stop(i, false) {
			c.log.Info("releasing shard", "shard", i, "fair", r.fair, "live", r.live)
			go c.drain(ctx, i)
		}
	}
}

// sweep loses the held shards not renewed within the renew deadline.
func (c *Coordinator) sweep() {
	for i := 0; i < c.table.n; i++ {
		if c.table.expired(i) {
			c.lose(i, "not renewed within the renew deadline")
		}
	}
}

// lose gives shard i up without a Lease write: its writes are refused from now on.
func (c *Coordinator) lose(i int, why string) {
	drain := c.table.stop(i, true)
	c.metrics.handovers.WithLabelValues("lost").Inc()
	c.log.Info("lost shard", "shard", i, "reason", why, "identity", c.identity)
	if drain {
		go c.drain(c.runCtx(), i)
	}
}

// runCtx is Start's context (Background before Start, in tests).
func (c *Coordinator) runCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// drain waits for the reconciles of stopped shard i to end, then forgets its Syncs. A shard
// being released whose reconciles do not end within the renew deadline is lost instead:
// the fence refuses their writes from then on and clearStray hands its Lease over, while
// the shard stays unacquirable here until they end.
func (c *Coordinator) drain(ctx context.Context, i int) {
	bounded, cancel := context.WithTimeout(ctx, c.cfg.RenewDeadline)
	err := c.table.drain(bounded, i)
	cancel()
	if err != nil && ctx.Err() == nil {
		if c.table.isHeld(i) {
			c.table.stop(i, true)
			c.metrics.handovers.WithLabelValues("lost").Inc()
			c.log.Info("lost shard: its reconciles did not end within the renew deadline; their writes are refused", "shard", i, "reason", err.Error())
		}
		err = c.table.drain(ctx, i)
	}
	if err != nil {
		c.log.Error(err, "draining a shard")
	}
	c.eachSync(context.Background(), i, c.hooks.Forget)
	if c.hooks.Drained != nil {
		c.hooks.Drained(i)
	}
	c.table.drained(i)
}

// enqueue queues every known Sync of shard i: a handover waits for no interval.
func (c *Coordinator) enqueue(i int) {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q == nil {
		return // the controller has not started: its first list queues every Sync
	}
	c.eachSync(context.Background(), i, func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) })
}

// eachSync calls f with every cached Sync of shard i.
func (c *Coordinator) eachSync(ctx context.Context, i int, f func(types.NamespacedName)) {
	list := &v1alpha1.SyncList{}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.syncs.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		c.log.Error(err, "listing the Syncs of a shard", "shard", i)
		return
	}
	for _, s := range list.Items {
		if Of(s.UID, c.table.n) == i {
			f(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		}
	}
}

// gauge sets the held-shards gauge; converge_syncs_owned counts when collected (owned).
func (c *Coordinator) gauge() {
	held, releasing := c.table.snapshot()
	c.metrics.held.Set(float64(len(held) + releasing))
}

// owned counts the cached Syncs of the shards held, at most once per retry period (a
// scrape in between reads the last count, as one when the cache cannot be read within a
// second): each count copies every cached Sync, and anyone reaching /metrics can scrape.
func (c *Coordinator) owned() int {
	c.ownedMu.Lock()
	defer c.ownedMu.Unlock()
	now := c.now()
	if !c.ownedAt.IsZero() && now.Sub(c.ownedAt) < c.cfg.RetryPeriod {
		return c.ownedN
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	list := &v1alpha1.SyncList{}
	c.ownedAt = now // a failed list too: tried again a retry period later
	if err := c.syncs.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return c.ownedN
	}
	n := 0
	for _, s := range list.Items {
		if c.table.isHeld(Of(s.UID, c.table.n)) {
			n++
		}
	}
	c.ownedN = n
	return n
}

// shutdown, once the daemon stops, releases what it holds so the other replicas take over at
// once rather than after the lease duration: no reconcile starts, those running end (within
// the renew deadline, after which the fence refuses their writes anyway), then the shard
// Leases are cleared and the replica Lease deleted.
func (c *Coordinator) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RenewDeadline)
	defer cancel()
	var held []int
	for i := 0; i < c.table.n; i++ {
		if c.table.isHeld(i) {
			c.table.stop(i, false)
			held = append(held, i)
		}
	}
	if c.cfg.SkipRelease { // test-only: a SIGKILL releases nothing
		return
	}
	for _, i := range held {
		if err := c.table.drain(ctx, i); err != nil || !c.table.writable(i) {
			continue // it expires instead
		}
		l, err := c.leases.get(ctx, c.bound(), i)
		if err == nil && holder(l) == c.identity {
			if err := c.clear(ctx, l); err != nil {
				c.log.Error(err, "clearing a shard Lease (it expires instead)", "lease", l.Name)
			} else {
				c.metrics.handovers.WithLabelValues("released").Inc()
			}
		}
		c.table.cleared(i)
	}
	if c.replica != nil {
		_ = c.leases.removeOwn(ctx, c.bound(), c.replica)
	}
	c.log.Info("released shards", "count", len(held))
}
