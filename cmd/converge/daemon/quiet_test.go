package daemon

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonQuietReconciles: once a reconcile changed nothing, the interval's reconciles are
// answered without decoding or applying the render (converge_quiet_reconciles_total) and
// write nothing; an object edited out of band is still corrected, and the reconciles after
// the correction are answered so again.
func TestDaemonQuietReconciles(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": varsCM("a", "  k: v\n"), "b.yaml": varsCM("b", "  k: v\n")})
	addr := cluster.FreeAddr()
	f.startDaemon(env.Config, func(o *Options) { o.MetricsAddr = addr })
	f.createSync(2 * time.Second)
	f.waitSync("Ready", readyAt(rev))
	const quiet = "converge_quiet_reconciles_total"
	f.waitMetric(addr, quiet, 1)
	before := f.waitSync("Ready", readyAt(rev))
	n := f.scrape(addr, quiet)
	f.waitMetric(addr, quiet, n+2)
	if after := f.waitSync("Ready", readyAt(rev)); after.ResourceVersion != before.ResourceVersion {
		t.Errorf("the Sync was written during quiet reconciles: resourceVersion %s, then %s", before.ResourceVersion, after.ResourceVersion)
	}

	cm, err := f.configMap("a")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "edited"
	if err := f.c.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		cm, err := f.configMap("a")
		return err == nil && cm.Data["k"] == "v", nil
	})
	if err != nil {
		t.Fatalf("the ConfigMap edited out of band was not corrected while the Sync's reconciles were quiet: %v", err)
	}
	n = f.scrape(addr, quiet)
	f.waitMetric(addr, quiet, n+2)
	s := &v1alpha1.Sync{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app"}, s); err != nil {
		t.Fatal(err)
	}
	if !readyAt(rev)(s) {
		t.Errorf("the Sync is not Ready at %s after the correction: %+v", rev, s.Status.Conditions)
	}
}
