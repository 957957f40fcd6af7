package daemon

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestShardingMetricsProvenByPrometheus runs two sharded replicas scraped by a real
// Prometheus and evaluates the dashboard's Sharding row and the ConvergeShardsUnheld
// expression: shards held and Syncs owned per replica add up, handovers are counted, no
// shard is unheld once the replicas balanced; a replica stopped without releasing its
// Leases (as SIGKILL) leaves its shards unheld until the other takes them over. Each Sync's
// status.owner names the replica holding its shard, before and after the takeover. Without
// the Sharding row and the unheld-shards alert, neither the dashboard nor the rules would
// show a shard held by nobody.
func TestShardingMetricsProvenByPrometheus(t *testing.T) {
	bin := prometheusBinary(t)
	f := newFixture(t)
	files := map[string]string{}
	var names []string
	for i := range 4 {
		name := fmt.Sprintf("m-%d", i)
		names = append(names, name)
		files[name+"/cm.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%s, namespace: NS}\ndata: {version: \"1\"}\n", name)
	}
	rev := f.publish(files)
	addrA, addrB := cluster.FreeAddr(), cluster.FreeAddr()
	// The default lease timings (15s): the window in which the stopped replica's shards are
	// unheld is wide enough for a 1s scrape to see on a loaded machine.
	timings := func(addr string) func(*Options) {
		return func(o *Options) {
			o.MetricsAddr = addr
			d := DefaultOptions()
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = d.LeaseDuration, d.RenewDeadline, d.RetryPeriod
		}
	}
	f.startShardDaemon("r-a", timings(addrA))
	b := f.startShardDaemon("r-b", timings(addrB), func(o *Options) { o.test.skipShardRelease = true })
	prom := startPrometheus(t, bin, addrA, addrB)
	m := loadMonitoring(t)
	holders := f.waitShares("split among two replicas", "r-a", "r-b")
	f.createShardSyncs(names)
	f.waitAllReady(names, rev, 90*time.Second)
	f.checkOwners(names, func(shard int) string { return holders[shard] })

	prom.waitRulesHealthy()
	perReplica := func(total float64) func([]sample) bool {
		return func(s []sample) bool { return len(s) == 2 && sum(s) == total }
	}
	prom.waitFor("shards held by both replicas", m.panel(t, "Shards held per pod", f.ns), perReplica(testShards))
	prom.waitFor("Syncs owned by both replicas", m.panel(t, "Syncs owned per pod", f.ns), perReplica(float64(len(names))))
	prom.waitFor("the handover counters of both replicas", `converge_shard_handovers_total{event="acquired"} > 0`, func(s []sample) bool { return len(s) == 2 })
	unheld := m.panel(t, "Unheld shards", f.ns)
	prom.waitFor("no unheld shard", unheld, func(s []sample) bool { return len(s) == 1 && value(s[0]) == 0 })
	prom.waitFor("ConvergeShardsUnheld silent", m.alert(t, "ConvergeShardsUnheld"), isEmpty)
	// rate() needs two scrapes of the counters: wait for them, then every panel has data.
	prom.waitFor("the handover series", m.panel(t, "Shard handovers by event", f.ns), nonEmpty)
	for source, n := range prom.evaluateAll(t, m, f.ns) {
		for _, title := range m.rowPanels("Sharding") {
			if source == fmt.Sprintf("panel %q target 0", title) && n == 0 {
				t.Errorf("%s returned no series with two sharded replicas", source)
			}
		}
	}

	b.stop() // no release: its Leases expire, its series go stale at the next scrape
	prom.waitFor("the stopped replica's shards unheld", m.alert(t, "ConvergeShardsUnheld"), nonEmpty)
	f.waitShares("taken over by the replica left", "r-a")
	// The acquisitions before Prometheus first scraped are no increase it can see; these are.
	prom.waitFor("shards acquired in the takeover", m.panel(t, "Shard handovers by event", f.ns), func(s []sample) bool {
		for _, x := range s {
			if x.Metric["event"] == "acquired" && value(x) > 0 {
				return true
			}
		}
		return false
	})
	prom.waitFor("no unheld shard after the takeover", unheld, func(s []sample) bool { return len(s) == 1 && value(s[0]) == 0 })
	prom.waitFor("ConvergeShardsUnheld silent after the takeover", m.alert(t, "ConvergeShardsUnheld"), isEmpty)
	rev2 := f.republish(names, "2")
	f.waitAllReady(names, rev2, 90*time.Second)
	f.checkOwners(names, func(int) string { return "r-a" })
}

// checkOwners checks each Sync's status.owner is the replica ownerOf names for its shard.
func (f *fixture) checkOwners(names []string, ownerOf func(shard int) string) {
	f.t.Helper()
	for _, name := range names {
		s := &v1alpha1.Sync{}
		if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, s); err != nil {
			f.t.Fatal(err)
		}
		shard := shard.Of(s.UID, testShards)
		if want := ownerOf(shard); s.Status.Owner != want {
			f.t.Errorf("Sync %s (shard %d): status.owner %q, want %q (the shard's holder)", name, shard, s.Status.Owner, want)
		}
	}
}

// value is a sample's value (NaN parses, and compares unequal to everything).
func value(s sample) float64 {
	str, _ := s.Value[1].(string)
	v, _ := strconv.ParseFloat(str, 64)
	return v
}

func sum(s []sample) float64 {
	var t float64
	for _, x := range s {
		t += value(x)
	}
	return t
}
