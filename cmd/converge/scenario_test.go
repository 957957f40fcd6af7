package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/converge-dev/converge/e2e/fault"
)

// TestS13WatchesClosedAndRelistFails closes the daemon's watches with 410 Gone again and
// again and fails its first Sync relists with 503: the daemon still converges (I7), reports
// through status (I10), and a bad window never prunes (I8: the ConfigMap survives).
func TestS13WatchesClosedAndRelistFails(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	cfg, ft := fault.Config(env.Config)
	ft.SetRules(
		fault.Rule{Verb: "watch", Times: 20, Status: http.StatusGone},
		fault.Rule{Verb: "list", Resource: "syncs", Times: 3, Status: http.StatusServiceUnavailable},
	)
	f.startDaemon(cfg)
	f.createSync(2 * time.Second)
	f.waitSync("Ready despite closed watches", readyAt(rev))
	if ft.Injected() == 0 {
		t.Fatal("no fault was injected: the scenario did not run")
	}
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("configmap b: %v", err)
	}
}
