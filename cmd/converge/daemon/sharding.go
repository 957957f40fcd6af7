package daemon

import (
	"context"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
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

// ShardLabel is the label the daemon sets, with sharding on, on every object it applies
// for a Sync acting as the daemon (shard.LabelKey).
const ShardLabel = shard.LabelKey

// sharded reports whether the daemon shares the Syncs with its replicas by shard Leases.
func (o Options) sharded() bool { return o.Sharding == ShardingAuto }

// shardCount is Options.Shards, defaulted.
func (o Options) shardCount() int {
	if o.Shards <= 0 {
		return defaultShards
	}
	return o.Shards
}

// shardConfig is what the shard package needs of the options: the Lease names (grouped, as
// leaderElectionID, by the hash of the --watch-label-selector) and the leader timings.
func (o Options) shardConfig() shard.Config {
	return shard.Config{
		Namespace:     o.LeaderNamespace,
		Group:         strings.TrimPrefix(strings.TrimPrefix(o.leaderElectionID(), "converge-leader"), "-"),
		Shards:        o.shardCount(),
		Replica:       o.Replica,
		LeaseDuration: o.LeaseDuration,
		RenewDeadline: o.RenewDeadline,
		RetryPeriod:   o.RetryPeriod,
		SkipRelease:   o.test.skipShardRelease,
	}
}

// shardGate is what the reconciler sees of sharding: shard.Off when it is off, a
// *shard.Gate when on.
type shardGate interface {
	// Begin starts the reconcile of the cached Sync under its shard (shard.Turn).
	Begin(ctx context.Context, cached *v1alpha1.Sync) (shard.Turn, error)
	// Refused reports whether the shard fence refused a write made with ctx, and its shard.
	Refused(ctx context.Context) (int, bool)
	// Forget drops what the gate keeps of the Sync of a key and UID gone.
	Forget(key types.NamespacedName, uid types.UID)
}

// sharding is what --sharding=auto adds to a daemon: the shard table, whose fence wraps the
// rest config before any client is built from it, and the coordinator.
type sharding struct {
	cfg     shard.Config
	table   *shard.Table
	metrics *shard.Metrics
}

// newSharding wraps cfg in the shard fence and adds the shard metrics to what reg serves.
func newSharding(cfg *rest.Config, reg prometheus.Gatherer, o Options) (*sharding, prometheus.Gatherer, error) {
	own := prometheus.NewRegistry()
	m, err := shard.NewMetrics(own)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	sc := o.shardConfig()
	t := shard.NewTable(sc)
	cfg.Wrap(t.Wrap)
	return &sharding{cfg: sc, table: t, metrics: m}, prometheus.Gatherers{reg, own}, nil
}

// setup gates r by the shard table, gives r's engines one per shard (with the watch cache),
// and adds the coordinator to the manager.
func (sh *sharding) setup(mgr ctrl.Manager, cfg *rest.Config, s *runtime.Scheme, r *reconciler, o Options) error {
	api, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	if o.WatchCache {
		r.engines.shards = newShardEngines(sh.cfg)
	}
	c := shard.NewCoordinator(sh.cfg, sh.table, shard.Clients{API: api, Syncs: mgr.GetCache()},
		shard.Hooks{Forget: r.forget, Drained: r.engines.dropShard}, sh.metrics, mgr.GetLogger().WithName("shards"))
	r.shards, r.shardSource = shard.NewGate(sh.table, r.live, r.writer.Forget), c.Source()
	return mgr.Add(c)
}
