package shard

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// Turn is a reconcile begun by a gate. A nil Sync ends the reconcile at once, with no write
// (requeued after Requeue when it is not 0); otherwise the reconcile runs on Sync with Ctx
// (which names its shard: the fence checks every write made with it) and calls Done when it
// ends.
type Turn struct {
	Ctx     context.Context
	Sync    *v1alpha1.Sync
	Requeue time.Duration
	Done    func()
}

// Off is the gate of a daemon without sharding: every Sync is reconciled, from the cache.
type Off struct{}

// Begin returns the cached Sync to reconcile.
func (Off) Begin(ctx context.Context, cached *v1alpha1.Sync) (Turn, error) {
	return Turn{Ctx: ctx, Sync: cached, Done: func() {}}, nil
}

// Refused is always false: nothing is fenced by shard.
func (Off) Refused(context.Context) (int, bool) { return 0, false }

// Forget does nothing: nothing is kept per Sync.
func (Off) Forget(types.NamespacedName, types.UID) {}

// Gate starts a replica's reconciles only for the Syncs of the shards it holds, each under
// its shard (so the fence checks its writes), and reads a Sync live on its first reconcile
// since its shard was acquired.
type Gate struct {
	table *Table
	live  client.Reader // the API server
	// fresh hears that key was read live on the first reconcile of a holding: what the
	// daemon kept of the Sync from the cache (the status writer's base) must be forgotten.
	fresh func(key types.NamespacedName)
	reads reads
}

// NewGate is the gate of t's shards, reading Syncs live through live; fresh is called with
// a Sync read live on the first reconcile of its shard's holding.
func NewGate(t *Table, live client.Reader, fresh func(types.NamespacedName)) *Gate {
	return &Gate{table: t, live: live, fresh: fresh}
}

// Begin starts the reconcile of the cached Sync. Another replica's shard, or one being
// released: no write, no requeue (its holder reconciles it; an acquired shard queues its
// Syncs). The error is the live read's (a not-found one included: the Sync is gone).
func (g *Gate) Begin(ctx context.Context, cached *v1alpha1.Sync) (Turn, error) {
	i := Of(cached.UID, g.table.n)
	done, ok := g.table.begin(i)
	if !ok {
		return Turn{}, nil
	}
	ctx = withShard(ctx, i)
	s, requeue, err := g.firstReadOfHolding(ctx, cached, i)
	if s == nil {
		done()
		return Turn{Requeue: requeue}, err
	}
	return Turn{Ctx: ctx, Sync: s, Done: done}, nil
}

// Refused reports whether the fence refused a write made with ctx (shardRefused), and the
// shard it names.
func (g *Gate) Refused(ctx context.Context) (int, bool) {
	c, ok := ctx.Value(shardKey{}).(*shardCall)
	if !ok {
		return 0, false
	}
	return c.i, shardRefused(ctx)
}

// Forget drops what the gate keeps of the Sync key of UID uid (its live read): a record of
// another Sync of the name, read since, is kept. An empty uid drops any record.
func (g *Gate) Forget(key types.NamespacedName, uid types.UID) { g.reads.forget(key, uid) }

// firstReadOfHolding returns the Sync to reconcile: cached, unless this is its first
// reconcile since its shard i was acquired. Then the Sync is read from the API server too:
// the cache may predate the previous holder's writes, and everything the reconcile reads
// from it (the spec, the status writer's base) must not. Only once the cache shows the
// resourceVersion read live is the Sync reconciled (and fresh told); until then it is
// requeued, backing off. A nil Sync ends the reconcile with err, requeued after requeue
// when it is not 0.
func (g *Gate) firstReadOfHolding(ctx context.Context, cached *v1alpha1.Sync, i int) (s *v1alpha1.Sync, requeue time.Duration, err error) {
	key := types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}
	epoch := g.table.epoch(i)
	if !g.reads.stale(key, epoch) {
		return cached, 0, nil
	}
	fresh := &v1alpha1.Sync{}
	if err := g.live.Get(ctx, key, fresh); err != nil {
		return nil, 0, err
	}
	if fresh.UID != cached.UID || fresh.ResourceVersion != cached.ResourceVersion {
		// Another incarnation, or the cache is behind: reconcile from a newer read.
		after := g.reads.retryAfter(key)
		logr.FromContextOrDiscard(ctx).V(1).Info("first reconcile since the shard was acquired: the cache is behind the API server, requeued",
			"shard", i, "cached", cached.ResourceVersion, "live", fresh.ResourceVersion, "after", after)
		return nil, after, nil
	}
	g.fresh(key)
	g.reads.record(key, fresh.UID, epoch)
	return fresh, 0, nil
}

// reads remembers, per Sync, under which holding of its shard (Table.epoch) it was last
// read from the API server. A replica that just acquired a shard may have a cache older
// than the previous holder's last writes (its informer lags): reconciling from it could
// apply an old revision and prune what the previous holder applied since.
type reads struct {
	mu sync.Mutex
	m  map[types.NamespacedName]read
}

// read is one Sync's entry: the holding it was last read live under (0: none yet), the UID
// it had then, and how many times it was requeued since with its cache behind.
type read struct {
	epoch  uint64
	uid    types.UID
	behind int
}

// Requeues of a Sync whose cache is behind its live read back off from cacheBehindFirst,
// doubling up to cacheBehindMax: a cache that stays behind (a stalled watch, a Sync edited
// in a loop) costs a live read every few seconds, not ten a second.
const (
	cacheBehindFirst = 100 * time.Millisecond
	cacheBehindMax   = 5 * time.Second
)

// retryAfter counts one more requeue of key with its cache behind and says when to retry.
func (s *reads) retryAfter(key types.NamespacedName) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	n := r.behind
	r.behind++
	s.set(key, r)
	return min(cacheBehindFirst<<min(n, 16), cacheBehindMax)
}

// stale reports whether key was not yet read live under holding epoch.
func (s *reads) stale(key types.NamespacedName, epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key].epoch != epoch
}

// record notes that key, of UID uid, was read live, in step with the cache, under holding
// epoch.
func (s *reads) record(key types.NamespacedName, uid types.UID, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set(key, read{epoch: epoch, uid: uid})
}

// set stores key's entry; s.mu is held.
func (s *reads) set(key types.NamespacedName, r read) {
	if s.m == nil {
		s.m = map[types.NamespacedName]read{}
	}
	s.m[key] = r
}

// forget drops key's entry when it is of uid (any entry when uid is empty).
func (s *reads) forget(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.m[key]; ok && (uid == "" || r.uid == "" || r.uid == uid) {
		delete(s.m, key)
	}
}
