package daemon

import (
	"fmt"
	"hash/fnv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
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

// replicaLeaseName names the membership Lease of a replica: converge-replica-<name> (the
// selector's hash inserted, as for the shards, with a watch label selector).
func (o Options) replicaLeaseName() string {
	if g := o.leaseGroup(); g != "" {
		return "converge-replica-" + g + "-" + o.Replica
	}
	return replicaLeaseName(o.Replica)
}

func replicaLeaseName(replica string) string { return "converge-replica-" + replica }
