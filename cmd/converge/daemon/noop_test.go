package daemon

import (
	"strings"
	"testing"
	"time"
)

// TestDaemonNoOpReadsNoInventory: once a Sync is converged, its no-op reconciles send no
// request at all, not even the read of its inventory: the daemon watches the inventory
// heads (engine.Options.Heads), with one engine or one per shard. Without it: one GET of
// the inventory ConfigMap per reconcile.
func TestDaemonNoOpReadsNoInventory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sharded bool
	}{{"one daemon", false}, {"sharded", true}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
			n := &noOpCounter{}
			opts := []func(*Options){n.options}
			if tc.sharded {
				opts = append(opts, f.shardOptions("r-a"))
			}
			f.startDaemon(n.config(), opts...)
			if tc.sharded {
				f.waitShares("held by the one replica", "r-a")
			}
			f.createSync(2 * time.Second)
			f.waitSync("Ready", readyAt(rev))
			all, _ := n.requests(t, 3)
			var sent []string
			for _, r := range all {
				if !strings.Contains(r, "/leases") { // a sharded replica's renewals
					sent = append(sent, r)
				}
			}
			if len(sent) > 0 {
				t.Errorf("3 no-op reconciles sent %d requests, want none: %v", len(sent), sent)
			}
		})
	}
}
