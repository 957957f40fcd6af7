package daemon

import (
	"strings"
	"testing"
	"time"
)

// TestShardingOptionsValidate: a bad --sharding or --shards stops the daemon at start,
// naming the flag.
func TestShardingOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		sharding string
		shards   int
		replica  string
		flag     string
	}{
		{"on", 0, "r", "--sharding"},
		{ShardingAuto, 257, "r", "--shards"},
		{ShardingAuto, -1, "r", "--shards"},
		{ShardingAuto, 64, "", "--replica-name"},
		{ShardingAuto, 64, "Bad_Name", "--replica-name"},
		{ShardingAuto, 64, "no-namespace", "--leader-election-namespace"},
	} {
		o := DefaultOptions()
		o.Sharding, o.Shards, o.Replica = c.sharding, c.shards, c.replica
		if c.replica == "no-namespace" {
			o.LeaderNamespace = ""
		}
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("Sharding %q Shards %d Replica %q: error %v, want one naming %s", c.sharding, c.shards, c.replica, err, c.flag)
		}
	}
	for _, s := range []string{"", ShardingOff, ShardingAuto} {
		o := DefaultOptions()
		o.Sharding, o.Replica = s, "converge-7d9f-abcde"
		if err := o.Validate(); err != nil {
			t.Errorf("Sharding %q: %v", s, err)
		}
	}
}

// TestShardLeaseNames: the names other areas rely on (deploy RBAC, dashboards).
func TestShardLeaseNames(t *testing.T) {
	o := DefaultOptions()
	o.Replica = "converge-0"
	if got := o.shardConfig().ShardLeaseName(7); got != "converge-shard-07" {
		t.Errorf("shard lease %q", got)
	}
	if got := o.shardConfig().ReplicaLeaseName(); got != "converge-replica-converge-0" {
		t.Errorf("replica lease %q", got)
	}
	o.WatchLabelSelector = "converge.dev/shard=a"
	g := strings.TrimPrefix(o.leaderElectionID(), "converge-leader-")
	if got := o.shardConfig().ShardLeaseName(63); got != "converge-shard-"+g+"-63" {
		t.Errorf("shard lease with selector %q", got)
	}
	if got := o.shardConfig().ReplicaLeaseName(); got != "converge-replica-"+g+"-converge-0" {
		t.Errorf("replica lease with selector %q", got)
	}
}

// TestShardingOptionsLeaseTimings: with --sharding=auto the lease duration must cover the
// renew deadline and two retry periods (a renewal in flight and the next one), or a shard
// could be taken over while its holder still writes; the error names the flags. Before the
// fix any timings were accepted.
func TestShardingOptionsLeaseTimings(t *testing.T) {
	o := DefaultOptions()
	o.Sharding, o.Replica = ShardingAuto, "r"
	o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 10*time.Second, 10*time.Second, 2*time.Second
	err := o.Validate()
	if err == nil || !strings.Contains(err.Error(), "--leader-election-lease-duration") || !strings.Contains(err.Error(), "--leader-election-renew-deadline") {
		t.Fatalf("lease 10s, renew 10s, retry 2s: error %v, want one naming the flags", err)
	}
	o.LeaseDuration = 14 * time.Second
	if err := o.Validate(); err != nil {
		t.Fatalf("lease 14s, renew 10s, retry 2s: %v", err)
	}
	o.Sharding, o.LeaseDuration = ShardingOff, time.Second // leader election has its own checks
	if err := o.Validate(); err != nil {
		t.Fatalf("sharding off: %v", err)
	}
}
