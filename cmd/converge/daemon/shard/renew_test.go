package shard

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
)

// Timings of the renewal tests: a renewal answered after renewLatency is slower than a
// retry period (by more than a second) and faster than what is left of the renew deadline
// after a step (the deadline less one answer: by about three seconds, room for a slow API
// server).
const (
	renewRetry   = 250 * time.Millisecond
	renewLatency = 1500 * time.Millisecond
	renewRenew   = 6 * time.Second
	renewLease   = 8 * time.Second
)

// renewCoordinator is a coordinator of shards shards for replica name in its own namespace of
// the real API server, on the real clock, whose requests go through the returned fault
// transport.
func renewCoordinator(t *testing.T, name string, shards int) (*Coordinator, *fault.Transport) {
	t.Helper()
	cluster.Require(t, env)
	cfg, ft := fault.Config(env.Config)
	cl, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	sc := Config{Namespace: env.Namespace(t), Shards: shards, Replica: name,
		LeaseDuration: renewLease, RenewDeadline: renewRenew, RetryPeriod: renewRetry}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return NewCoordinator(sc, NewTable(sc), Clients{API: cl, Syncs: cl}, Hooks{Forget: func(types.NamespacedName) {}}, m, logr.Discard()), ft
}

// stepUntilHeld steps c until it holds every shard (bounded).
func stepUntilHeld(t *testing.T, ctx context.Context, c *Coordinator) {
	t.Helper()
	for k := 0; k < 20; k++ {
		c.step(ctx)
		if h, _ := c.table.snapshot(); len(h) == c.table.n {
			return
		}
		time.Sleep(renewRetry)
	}
	h, _ := c.table.snapshot()
	t.Fatalf("the only replica holds %v of %d shards after 20 steps", h, c.table.n)
}

// TestShardRenewalSlowerThanRetryPeriodKeepsShards (S14 on the Leases, I10): on an
// overloaded API server a renewal of the replica Lease is answered after more than a retry
// period but well before the renew deadline of the shards it renews: the replica keeps them
// (nobody else could take them: the Lease did change). Were every Lease request cut off
// after one retry period, every renewal would fail and the replica would lose all its
// shards at the renew deadline (the test then fails with "lost 2 shards").
func TestShardRenewalSlowerThanRetryPeriodKeepsShards(t *testing.T) {
	ctx := context.Background()
	c, ft := renewCoordinator(t, "slow", 2)
	stepUntilHeld(t, ctx, c)
	ft.SetRules(fault.Rule{Verb: "update", Resource: "leases", Name: c.cfg.ReplicaLeaseName(), Latency: renewLatency})
	// Step for two renew deadlines: long enough for every shard to run out unless
	// renewals that slow keep it.
	for end := time.Now().Add(2 * renewRenew); time.Now().Before(end); {
		c.step(ctx)
	}
	if lost := lostCount(t, c); lost > 0 {
		t.Fatalf("lost %v shards though every renewal landed before the renew deadline", lost)
	}
	if h, _ := c.table.snapshot(); len(h) != 2 {
		t.Fatalf("holds %v, want both shards", h)
	}
	if ft.CountResource("update", "leases", "") < 4 {
		t.Fatalf("only %d Lease updates in two renew deadlines", ft.CountResource("update", "leases", ""))
	}
}

// TestShardRenewalPastDeadlineLosesShards (I5, I1): a renewal not answered before the renew
// deadline of the shards it renews does not keep them: the replica loses them by then, and
// the shard fence refuses their writes, whatever the request does later. Passes before and
// after the fix (the fix must not extend a renewal past the deadline).
func TestShardRenewalPastDeadlineLosesShards(t *testing.T) {
	ctx := context.Background()
	c, ft := renewCoordinator(t, "stalled", 2)
	stepUntilHeld(t, ctx, c)
	ft.SetRules(fault.Rule{Verb: "update", Resource: "leases", Name: c.cfg.ReplicaLeaseName(), Latency: 2 * renewLease})
	for end := time.Now().Add(3 * renewRenew); time.Now().Before(end); {
		c.step(ctx)
		if h, _ := c.table.snapshot(); len(h) == 0 {
			break
		}
	}
	settle(c)
	if h, _ := c.table.snapshot(); len(h) != 0 {
		t.Fatalf("still holds %v after three renew deadlines without a renewal answered", h)
	}
	for i := 0; i < c.table.n; i++ {
		if c.table.writable(i) {
			t.Errorf("shard %d still writable", i)
		}
	}
	if lost := lostCount(t, c); lost != 2 {
		t.Errorf("lost %v shards, want 2", lost)
	}
}

// lostCount is how many shards c lost (its converge_shard_handovers_total{event="lost"}).
func lostCount(t *testing.T, c *Coordinator) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.metrics.handovers.WithLabelValues("lost").Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
