package e2e

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
)

// TestBinaryStartsThroughAPIErrors starts a sharded replica while the API server answers
// every request with 503 for 4 s, then half of them for 6 s more (an API server restarting, a
// flaky aggregated discovery): the daemon retries its start-up steps (the CRD, the Lease
// namespace, the quick start Sync, the Sync kind's REST mapping) instead of exiting, and once
// the errors stop the Sync is Ready and /healthz answers. Without it, the first 503 ended the
// process ("install CRD ...: the server is currently unable to handle the request"), and in
// the two-replica sweep a replica started during an API-errors round exited with "index
// converge.dev/dependsOn: failed to get restmapping", never to hold a shard again.
func TestBinaryStartsThroughAPIErrors(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	proxy, kubeconfig := startProxy(t)
	repo := newRepo(t, ns)
	c := directClient(t)
	rev := repo.publish(map[string]string{"a": "1"})

	binary.Converge(t) // built before the fault window opens
	proxy.Seed(7)
	proxy.SetRules(
		fault.Rule{Status: http.StatusServiceUnavailable, For: 4 * time.Second},
		fault.Rule{Status: http.StatusServiceUnavailable, Probability: 0.5, After: 4 * time.Second, For: 6 * time.Second},
	)
	health := cluster.FreeAddr()
	daemon := binary.Start(t, "run", "--kubeconfig", kubeconfig, "-n", ns, "--watch-namespace", ns,
		"--git-url", repo.srv.RepoURL("app"), "--ref", "main", "--path", ".", "--name", "app", "--interval", "2s",
		"--sharding", "auto", "--shards", strconv.Itoa(fleetShards), "--replica-name", "starting",
		"--leader-election-namespace", ns, "--leader-election-lease-duration", fleetLease.String(),
		"--leader-election-renew-deadline", fleetRenew.String(), "--leader-election-retry-period", fleetRetry.String(),
		"--metrics-addr", "0", "--health-addr", health, "--git-cache-dir", t.TempDir(), "--allow-local-git")
	select {
	case <-daemon.Done():
		t.Fatalf("the daemon exited while the API server failed (it must retry its start-up):\n%s", daemon.Log())
	case <-time.After(10 * time.Second): // the fault schedule's length, not a timing assertion
	}
	proxy.SetRules()
	if n := proxy.Faults()["status 503"]; n == 0 {
		t.Fatalf("no 503 was injected: %v", proxy.Faults())
	}
	waitSyncReady(t, c, ns, rev)
	select {
	case <-daemon.Done():
		t.Fatalf("the daemon exited:\n%s", daemon.Log())
	default:
	}
	checkHealthy(t, health)
}
