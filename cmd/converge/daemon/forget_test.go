package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestFinalizeForgetsTheSync: once a deleted Sync's finalizer is dropped, the daemon keeps
// nothing of it: no retry count, no drift owner, no metric series, no engine of the service
// account it acted as. Deletions trigger no reconcile, so nothing else would forget them.
// Before, the retry count of a Sync deleted after a failure was kept for the life of the
// process, and so was the engine of every service account a Sync had acted as.
func TestFinalizeForgetsTheSync(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := installSyncCRD(ctx, f.c); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rec, err := newRecorder(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.deployer() // the Sync acts as it (--default-service-account deployer)
	r := &reconciler{client: f.c, live: f.c, engines: newEngineSet(ctx, env.Config, engine.Options{}, false, "deployer"),
		drift: newDriftTrigger(), writer: &status.Writer{Live: f.c, Client: f.c}, events: record.NewFakeRecorder(100),
		retries: &retryCounter{}, metrics: rec}
	s := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Finalizers = []string{v1alpha1.Finalizer} })
	key := client.ObjectKeyFromObject(s)
	r.retries.inc(key) // a failed reconcile
	r.drift.track("some-inventory", key)
	r.metrics.suspend(s)
	if err := f.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatalf("reconcile of the deleted Sync: %v", err)
	}
	if err := f.c.Get(ctx, key, &v1alpha1.Sync{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Sync is still there after its finalizer was to be dropped: %v", err)
	}
	if n, ok := r.retries.n[key]; ok {
		t.Errorf("the retry count of the deleted Sync is kept (%d)", n)
	}
	if _, ok := r.drift.owners["some-inventory"]; ok {
		t.Errorf("the drift trigger still names the deleted Sync as an owner")
	}
	if got := series(t, reg, "converge_sync_suspended"); len(got) != 0 {
		t.Errorf("metric series of the deleted Sync kept: %v", got)
	}
	if got := r.engines.heldUsers(); len(got) != 0 {
		t.Errorf("the engine of the deleted Sync's service account is kept: %q", got)
	}
}
