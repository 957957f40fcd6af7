package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources/varsubst"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestFinalizeForgetsTheSync: once a deleted Sync's finalizer is dropped, the daemon keeps
// nothing of it: no retry count, no drift owner, no metric series, no engine of the service
// account it acted as. Deletions trigger no reconcile, so nothing else would forget them.
// Without it, the retry count of a Sync deleted after a failure was kept for the life of the
// process, and so was the engine of every service account a Sync had acted as.
func TestFinalizeForgetsTheSync(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := installSyncCRD(ctx, env.Config, f.c); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rec, err := newRecorder(reg)
	if err != nil {
		t.Fatal(err)
	}
	f.deployer() // the Sync acts as it (--default-service-account deployer)
	r := forgetting(ctx, f, rec)
	s := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Finalizers = []string{v1alpha1.Finalizer} })
	key := client.ObjectKeyFromObject(s)
	r.next(s, true) // a failed reconcile
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
	if r.states.known(key) {
		t.Errorf("the state of the deleted Sync (its retry count) is kept")
	}
	if r.states.owner("some-inventory", func(types.NamespacedName, *syncState) {}) {
		t.Errorf("the drift trigger still names the deleted Sync as an owner")
	}
	if got := series(t, reg, "converge_sync_suspended"); len(got) != 0 {
		t.Errorf("metric series of the deleted Sync kept: %v", got)
	}
	if got := r.engines.heldUsers(); len(got) != 0 {
		t.Errorf("the engine of the deleted Sync's service account is kept: %q", got)
	}
}

// TestFinalizeForgetsASyncAlreadyGone: a finalize whose re-read on the API server finds the
// Sync gone (its finalizer dropped by someone else, the cache lagging) forgets it too, its
// substitution and redactor included: no reconcile would come to forget it later. Without it, only
// a reconcile that found no Sync, or the finalizer patch, forgot it.
func TestFinalizeForgetsASyncAlreadyGone(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := installSyncCRD(ctx, env.Config, f.c); err != nil {
		t.Fatal(err)
	}
	rec, err := newRecorder(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r := forgetting(ctx, f, rec)
	s := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Finalizers = []string{v1alpha1.Finalizer} })
	key := client.ObjectKeyFromObject(s)
	r.next(s, true)
	r.drift.track("some-inventory", key)
	r.setRedactor(key, varsubst.NewRedactor([]string{"a-secret-value"}))
	// What a lagging cache shows: the Sync being deleted, with our finalizer, while the API
	// server has it gone already.
	if err := f.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	gone := s.DeepCopy()
	if err := f.c.Get(ctx, key, gone); err != nil {
		t.Fatal(err)
	}
	cached := gone.DeepCopy()
	if err := f.c.Patch(ctx, gone, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Get(ctx, key, &v1alpha1.Sync{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Sync is still there after its finalizer was dropped: %v", err)
	}
	if _, err := r.finalize(ctx, cached); err != nil {
		t.Fatalf("finalize of a Sync already gone: %v", err)
	}
	if r.states.known(key) {
		t.Errorf("the state of the gone Sync (its retry count) is kept")
	}
	if r.states.owner("some-inventory", func(types.NamespacedName, *syncState) {}) {
		t.Errorf("the drift trigger still names the gone Sync as an owner")
	}
	if got := r.redact(s, "a-secret-value"); got != "a-secret-value" {
		t.Errorf("the redactor of the gone Sync is kept: %q", got)
	}
}

// forgetting is a reconciler with what a Sync's forgetting concerns, acting as
// --default-service-account deployer.
func forgetting(ctx context.Context, f *fixture, rec *recorder) *reconciler {
	states := newSyncStates()
	r := &reconciler{client: f.c, live: f.c, shards: shard.Off{}, engines: newEngineSet(ctx, env.Config, engine.Options{}, false, "deployer", states),
		drift: newDriftTrigger(states), writer: &status.Writer{Live: f.c, Client: f.c}, events: record.NewFakeRecorder(100),
		states: states, metrics: rec}
	r.forgetOutside()
	return r
}

// cacheEntries returns the git cache entries (one folder per URL and credentials) in dir.
func cacheEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestDaemonDeletedSyncRemovesItsGitCache: once a Sync is deleted, the git cache entry only
// it fetched into is removed from the daemon's disk. Without it, cache entries were never
// removed: every URL and credentials a Sync ever used stayed on the volume.
func TestDaemonDeletedSyncRemovesItsGitCache(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	cacheDir := t.TempDir()
	f.startDaemon(env.Config, func(o *Options) { o.CacheDir, o.GitCacheQuota = cacheDir, defaultGitCacheQuota })
	f.createSync(time.Hour)
	f.waitSync("Ready", readyAt(rev))
	if got := cacheEntries(t, cacheDir); len(got) != 1 {
		t.Fatalf("git cache entries of the Sync: %v, want one", got)
	}
	f.deleteSync("app", time.Minute)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(cacheEntries(t, cacheDir)) == 0, nil
	})
	if err != nil {
		t.Errorf("git cache entries 10s after the Sync was deleted: %v, want none", cacheEntries(t, cacheDir))
	}
}
