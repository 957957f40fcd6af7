package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// neverReady is a Deployment that never becomes Available: the API profile runs no
// controller-manager, so a readiness wait on it lasts until its timeout.
const neverReady = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: NS}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: example.invalid/web:1}]}
`

// TestDaemonDropsTheOutcomeOfAReplacedSync is I14: a reconcile whose readiness wait (on a
// Deployment that never becomes ready) is still running when the user deletes its Sync,
// strips the finalizer and creates another Sync of the same name with another spec. The old
// reconcile's outcome (HealthCheckFailed) must never show on the new Sync, which reaches
// observedGeneration == generation with conditions about itself.
func TestDaemonDropsTheOutcomeOfAReplacedSync(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"old/web.yaml": neverReady, "new/b.yaml": cmB})
	ctx := context.Background()
	held, release := make(chan *v1alpha1.Sync, 1), make(chan struct{})
	var once sync.Once
	releaseOnce := func() { once.Do(func() { close(release) }) }
	t.Cleanup(releaseOnce) // never leave the daemon blocked when the test fails early
	var calls atomic.Int32
	f.startDaemon(env.Config, func(o *Options) {
		// The first reconcile stays in its wait (held here, after the wait ended, for as
		// long as the test needs) while the Sync is replaced.
		o.test.crash.BeforeStatusWrite = func(s *v1alpha1.Sync) error {
			if calls.Add(1) == 1 {
				held <- s
				<-release
			}
			return nil
		}
	})
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Path, s.Spec.Timeout = "old", &metav1.Duration{Duration: 2 * time.Second}
	})
	var old *v1alpha1.Sync
	select {
	case old = <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("the first reconcile never reached its status write")
	}

	// Delete, strip the finalizer, re-create with another spec.
	cur := &v1alpha1.Sync{}
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKeyFromObject(old), cur); err != nil {
			return apierrors.IsNotFound(err), nil
		}
		cur.Finalizers = nil
		return false, client.IgnoreNotFound(ignoreConflict(f.c.Update(ctx, cur)))
	})
	if err != nil {
		t.Fatalf("the old Sync never went away: %v", err)
	}
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := wc.Watch(ctx, &v1alpha1.SyncList{}, client.InNamespace(f.ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	replacement := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "new" })
	if replacement.UID == old.UID {
		t.Fatalf("the re-created Sync has the old UID %s", old.UID)
	}
	releaseOnce()

	// Every state the new Sync goes through, up to Ready at its own generation.
	timeout := time.After(90 * time.Second)
	for {
		var ev watch.Event
		open := true
		select {
		case ev, open = <-w.ResultChan():
		case <-timeout:
			t.Fatal("the new Sync never became Ready at its generation")
		}
		if !open {
			t.Fatal("the watch of the Syncs ended")
		}
		s, ok := ev.Object.(*v1alpha1.Sync)
		if !ok || s.UID != replacement.UID {
			continue
		}
		readyCond := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if readyCond != nil && readyCond.Reason == reasonHealthCheck {
			t.Fatalf("I14: the old Sync's outcome was written onto the new one: %s %q", readyCond.Reason, readyCond.Message)
		}
		if readyAt(rev)(s) {
			break
		}
	}
	if _, err := f.configMap("b"); err != nil {
		t.Errorf("the new Sync's configmap b: %v", err)
	}
}

// TestDaemonRepairsAnImpossibleObservedGeneration is I14 and I4: a status whose
// observedGeneration (999) is above metadata.generation, written through the status
// subresource as a user or a buggy tool would, is repaired by the next reconcile: a
// reconcile-now request is handled and a spec change is observed.
func TestDaemonRepairsAnImpossibleObservedGeneration(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	s := f.createSync(time.Hour)
	f.waitSync("Ready", readyAt(rev))
	f.updateSyncStatus(s.Name, func(s *v1alpha1.Sync) { s.Status.ObservedGeneration = 999 })
	const request = "2026-11-23T14:00:00Z"
	f.updateSync(s.Name, func(s *v1alpha1.Sync) {
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, v1alpha1.RequestedAtAnnotation, request)
	})
	f.waitSync("handling the request", func(s *v1alpha1.Sync) bool {
		return s.Status.LastHandledRequest == request && readyAt(rev)(s)
	})

	f.updateSync(s.Name, func(s *v1alpha1.Sync) { s.Spec.Interval = metav1.Duration{Duration: 50 * time.Minute} })
	got := f.waitSync("observing the spec change", func(s *v1alpha1.Sync) bool {
		return s.Spec.Interval.Duration == 50*time.Minute && readyAt(rev)(s)
	})
	if got.Generation < 2 {
		t.Errorf("generation %d after a spec change", got.Generation)
	}
}

// TestDaemonSummaryTellsTheLastChange is I7 and "status tells the truth": a fresh daemon on
// a converged Sync (a restart) writes nothing and keeps "created: 2"; after a prune, the
// following no-op reconciles write nothing and keep "pruned: 1".
func TestDaemonSummaryTellsTheLastChange(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": cmA, "b.yaml": cmB})
	var reconciles atomic.Int64
	count := func(o *Options) {
		o.test.crash.AfterRender = func(*v1alpha1.Sync) error { reconciles.Add(1); return nil }
	}
	stop := f.startStoppableDaemon(env.Config, count)
	s := f.createSync(2 * time.Second) // a no-op reconcile about every 2 s once converged
	f.waitSync("Ready at the first commit", readyAt(rev1))
	stop()

	// quiet waits for one whole reconcile that started after now, then checks that the
	// Sync was not written and that its summary is want.
	ctx, key := context.Background(), client.ObjectKeyFromObject(s)
	quiet := func(what string, want v1alpha1.Summary) {
		t.Helper()
		before := &v1alpha1.Sync{}
		if err := f.c.Get(ctx, key, before); err != nil {
			t.Fatal(err)
		}
		n := reconciles.Load()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return reconciles.Load() >= n+2, nil // reconcile n+1 ended before n+2 began
		})
		if err != nil {
			t.Fatalf("%s: no reconcile ran", what)
		}
		after := &v1alpha1.Sync{}
		if err := f.c.Get(ctx, key, after); err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("I7: %s wrote the converged Sync (resourceVersion %s → %s)", what, before.ResourceVersion, after.ResourceVersion)
		}
		if diff := cmp.Diff(&want, after.Status.Summary); diff != "" {
			t.Errorf("%s: summary (-want +got):\n%s", what, diff)
		}
	}
	f.startDaemon(env.Config, count) // a restart: cold caches, a fresh Writer
	quiet("a restart", v1alpha1.Summary{Created: 2})

	rev2 := f.publish(map[string]string{"b.yaml": ""})
	got := f.waitSync("Ready after the prune", readyAt(rev2))
	if diff := cmp.Diff(&v1alpha1.Summary{Unchanged: 1, Pruned: 1}, got.Status.Summary); diff != "" {
		t.Errorf("the prune's summary (-want +got):\n%s", diff)
	}
	quiet("a no-op after the prune", v1alpha1.Summary{Unchanged: 1, Pruned: 1})
}
