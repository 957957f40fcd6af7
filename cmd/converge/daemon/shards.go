package daemon

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// The values of Options.Sharding.
const (
	// ShardingOff is one elected leader reconciling every Sync (the default).
	ShardingOff = "off"
	// ShardingAuto is every replica reconciling the Syncs of the shards whose Leases it
	// holds, the replicas balancing the shards among themselves.
	ShardingAuto = "auto"
)

const (
	// defaultShards is Options.Shards when zero: enough for 64 replicas to hold one each,
	// few enough that a coordinator renews its share in a handful of requests.
	defaultShards = 64
	// maxShards bounds Options.Shards: every shard is a Lease renewed every RetryPeriod.
	maxShards = 256
)

// sharded reports whether the daemon shares the Syncs with its replicas by shard Leases.
func (o Options) sharded() bool { return o.Sharding == ShardingAuto }

// shardCount is Options.Shards, defaulted.
func (o Options) shardCount() int {
	if o.Shards <= 0 {
		return defaultShards
	}
	return o.Shards
}

// shardOf is the shard of the Sync of this UID: FNV-1a (32 bits) of the UID modulo n. The
// UID, not the name: a Sync deleted and re-created under its name is another Sync, which may
// belong to another shard; the old one is finalized by its own shard's holder before the
// API server lets the name be reused.
func shardOf(uid types.UID, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum32() % uint32(n))
}

// ShardLabel is the label the daemon sets, with sharding on, on every object it applies
// for a Sync acting as the daemon: the Sync's shard, as "<shard>-of-<shards>" (with a watch
// label selector, "<group>.<shard>-of-<shards>"). A replica's watch cache lists and watches
// only the objects of the shards it holds (shardEngines).
const ShardLabel = "converge.dev/shard"

// shardLabel is ShardLabel's value for shard i: the shard count is part of it, so that
// after --shards changes an object is re-labelled by its Sync's new shard rather than cached
// by whichever replica holds the same number under the other count.
func (o Options) shardLabel(i int) engine.Label {
	v := fmt.Sprintf("%d-of-%d", i, o.shardCount())
	if g := o.leaseGroup(); g != "" {
		v = g + "." + v
	}
	return engine.Label{Key: ShardLabel, Value: v}
}

// leaseGroup is what the Lease names of one Deployment share: "" for all Syncs, or the hash
// of the --watch-label-selector (as leaderElectionID), so that Deployments of different
// selectors neither share shards nor count each other's replicas.
func (o Options) leaseGroup() string {
	return strings.TrimPrefix(strings.TrimPrefix(o.leaderElectionID(), "converge-leader"), "-")
}

// shardLeaseName names the Lease of shard i: converge-shard-NN, or converge-shard-<hash>-NN
// with a watch label selector.
func (o Options) shardLeaseName(i int) string {
	if g := o.leaseGroup(); g != "" {
		return fmt.Sprintf("converge-shard-%s-%02d", g, i)
	}
	return fmt.Sprintf("converge-shard-%02d", i)
}

// shardOfLeaseName is the shard number of a shard Lease's name of this replica's group,
// whatever --shards wrote it (ok is false for another group's name or a replica Lease).
func (o Options) shardOfLeaseName(name string) (int, bool) {
	digits, found := strings.CutPrefix(name, strings.TrimSuffix(o.shardLeaseName(0), "00"))
	i, err := strconv.Atoi(digits)
	if !found || err != nil || i < 0 || fmt.Sprintf("%02d", i) != digits {
		return 0, false
	}
	return i, true
}

// replicaLeaseName names the membership Lease of a replica: converge-replica-<name> (the
// selector's hash inserted, as for the shards, with a watch label selector).
func (o Options) replicaLeaseName() string {
	if g := o.leaseGroup(); g != "" {
		return "converge-replica-" + g + "-" + o.Replica
	}
	return replicaLeaseName(o.Replica)
}

func replicaLeaseName(replica string) string { return "converge-replica-" + replica }

// sharding is what --sharding=auto adds to a daemon: the shard table, whose fence wraps the
// rest config before any client is built from it, and the coordinator.
type sharding struct {
	table   *shardTable
	metrics *shardMetrics
}

// newSharding wraps cfg in the shard fence and adds the shard metrics to what reg serves.
func newSharding(cfg *rest.Config, reg prometheus.Gatherer, o Options) (*sharding, prometheus.Gatherer, error) {
	own := prometheus.NewRegistry()
	m, err := newShardMetrics(own)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	t := newShardTable(o.shardCount(), o.RenewDeadline)
	cfg.Wrap(t.wrap)
	return &sharding{table: t, metrics: m}, prometheus.Gatherers{reg, own}, nil
}

// setup gates r by the shard table and adds the coordinator to the manager.
func (sh *sharding) setup(mgr ctrl.Manager, cfg *rest.Config, s *runtime.Scheme, r *reconciler, o Options) error {
	api, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	c := newShardCoordinator(o, sh.table, api, mgr.GetCache(), r.forget, sh.metrics, mgr.GetLogger().WithName("shards"))
	c.drained = r.engines.dropShard
	r.shards, r.shardSource = sh.table, c.source()
	return mgr.Add(c)
}

// shardReads remembers, per Sync, under which holding of its shard (shardTable.epoch) it
// was last read from the API server. A replica that just acquired a shard may have a cache
// older than the previous holder's last writes (its informer lags): reconciling from it
// could apply an old revision and prune what the previous holder applied since.
type shardReads struct {
	mu sync.Mutex
	m  map[types.NamespacedName]shardRead
}

// shardRead is one Sync's entry: the holding it was last read live under (0: none yet) and
// how many times it was requeued since with its cache behind.
type shardRead struct {
	epoch  uint64
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
func (s *shardReads) retryAfter(key types.NamespacedName) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.m[key]
	n := r.behind
	r.behind++
	s.set(key, r)
	return min(cacheBehindFirst<<min(n, 16), cacheBehindMax)
}

// stale reports whether key was not yet read live under holding epoch.
func (s *shardReads) stale(key types.NamespacedName, epoch uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key].epoch != epoch
}

// record notes that key was read live, in step with the cache, under holding epoch.
func (s *shardReads) record(key types.NamespacedName, epoch uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.set(key, shardRead{epoch: epoch})
}

// set stores key's entry; s.mu is held.
func (s *shardReads) set(key types.NamespacedName, r shardRead) {
	if s.m == nil {
		s.m = map[types.NamespacedName]shardRead{}
	}
	s.m[key] = r
}

func (s *shardReads) forget(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
}

// firstReadOfHolding returns the Sync to reconcile: cached, read by the reconcile, unless
// this is its first reconcile since its shard i was acquired. Then the Sync is read from
// the API server too: the cache may predate the previous holder's writes, and everything
// the reconcile reads from it (the spec, the status writer's base) must not. Only once the
// cache shows the resourceVersion read live is the Sync reconciled (and the status writer's
// record of it forgotten); until then it is requeued, backing off. A nil Sync ends the
// reconcile with err (nil: the Sync is gone), requeued after requeue when it is not 0.
func (r *reconciler) firstReadOfHolding(ctx context.Context, key types.NamespacedName, cached *v1alpha1.Sync, i int) (s *v1alpha1.Sync, requeue time.Duration, err error) {
	epoch := r.shards.epoch(i)
	if !r.shardReads.stale(key, epoch) {
		return cached, 0, nil
	}
	fresh := &v1alpha1.Sync{}
	if err := r.live.Get(ctx, key, fresh); err != nil {
		return nil, 0, r.forgetIfGone(key, err)
	}
	if fresh.UID != cached.UID || fresh.ResourceVersion != cached.ResourceVersion {
		// Another incarnation, or the cache is behind: reconcile from a newer read.
		after := r.shardReads.retryAfter(key)
		logr.FromContextOrDiscard(ctx).V(1).Info("first reconcile since the shard was acquired: the cache is behind the API server, requeued",
			"shard", i, "cached", cached.ResourceVersion, "live", fresh.ResourceVersion, "after", after)
		return nil, after, nil
	}
	r.writer.Forget(key)
	r.shardReads.record(key, epoch)
	return fresh, 0, nil
}
