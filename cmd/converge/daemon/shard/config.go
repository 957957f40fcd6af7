package shard

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/engine"
)

// LabelKey is the label the daemon sets, with sharding on, on every object it applies for a
// Sync acting as the daemon: the Sync's shard, as "<shard>-of-<shards>" (with a watch label
// selector, "<group>.<shard>-of-<shards>"). A replica's watch cache lists and watches only
// the objects of the shards it holds.
const LabelKey = "converge.dev/shard"

// Labels of the Leases of sharding: the app's name (RBAC and dashboards find them by it),
// what the Lease is, and which group of replicas (one per watch label selector) it belongs to.
const (
	labelName       = "app.kubernetes.io/name"
	labelLeaseKind  = "converge.dev/lease"
	labelLeaseGroup = "converge.dev/lease-group"
	leaseKindShard  = "shard"
	leaseKindMember = "replica"
	// annotationShards, on every Lease of sharding, is its writer's --shards.
	annotationShards = "converge.dev/shards"
)

// Config is what sharding needs to know of the daemon: the names of its Leases and their
// timings. The daemon builds it once from its flags.
type Config struct {
	// Namespace holds the Leases (--leader-election-namespace).
	Namespace string
	// Group is what the Lease names of one Deployment share: "" for all Syncs, or the hash
	// of the --watch-label-selector, so Deployments of different selectors neither share
	// shards nor count each other's replicas.
	Group string
	// Shards is the number of shards (--shards, defaulted).
	Shards int
	// Replica names this replica's Lease (--replica-name).
	Replica string
	// LeaseDuration is how long a Lease must stay unchanged before another replica takes it.
	LeaseDuration time.Duration
	// RenewDeadline is how long after its last renewal a shard is written for.
	RenewDeadline time.Duration
	// RetryPeriod is the interval of the coordinator's steps.
	RetryPeriod time.Duration
	// SkipRelease (test-only) stops without releasing the Leases, as a SIGKILL does.
	SkipRelease bool
}

// Of is the shard of the Sync of this UID: FNV-1a (32 bits) of the UID modulo n. The UID,
// not the name: a Sync deleted and re-created under its name is another Sync, which may
// belong to another shard; the old one is finalized by its own shard's holder before the
// API server lets the name be reused.
func Of(uid types.UID, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(uid))
	return int(h.Sum32() % uint32(n))
}

// Of is the shard of the Sync of this UID under c.Shards.
func (c Config) Of(uid types.UID) int { return Of(uid, c.Shards) }

// Label is LabelKey's value for shard i: the shard count is part of it, so that after
// --shards changes an object is re-labelled by its Sync's new shard rather than cached by
// whichever replica holds the same number under the other count.
func (c Config) Label(i int) engine.Label {
	v := fmt.Sprintf("%d-of-%d", i, c.Shards)
	if c.Group != "" {
		v = c.Group + "." + v
	}
	return engine.Label{Key: LabelKey, Value: v}
}

// ShardLeaseName names the Lease of shard i: converge-shard-NN, or converge-shard-<group>-NN
// with a watch label selector.
func (c Config) ShardLeaseName(i int) string {
	if c.Group != "" {
		return fmt.Sprintf("converge-shard-%s-%02d", c.Group, i)
	}
	return fmt.Sprintf("converge-shard-%02d", i)
}

// shardOfLeaseName is the shard number of a shard Lease's name of this replica's group,
// whatever --shards wrote it (ok is false for another group's name or a replica Lease).
func (c Config) shardOfLeaseName(name string) (int, bool) {
	digits, found := strings.CutPrefix(name, strings.TrimSuffix(c.ShardLeaseName(0), "00"))
	i, err := strconv.Atoi(digits)
	if !found || err != nil || i < 0 || fmt.Sprintf("%02d", i) != digits {
		return 0, false
	}
	return i, true
}

// ReplicaLeaseName names the membership Lease of this replica: converge-replica-<name> (the
// group inserted, as for the shards, with a watch label selector).
func (c Config) ReplicaLeaseName() string {
	if c.Group != "" {
		return "converge-replica-" + c.Group + "-" + c.Replica
	}
	return "converge-replica-" + c.Replica
}

// labelGroup is the value of the Leases' group label: the group, "all" for none.
func (c Config) labelGroup() string {
	if c.Group == "" {
		return "all"
	}
	return c.Group
}

// leaseSeconds is LeaseDuration in whole seconds, rounded up, as a Lease states it.
func (c Config) leaseSeconds() *int32 {
	s := int32((c.LeaseDuration + time.Second - 1) / time.Second)
	return &s
}
