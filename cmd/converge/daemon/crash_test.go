package daemon

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// crashOnce returns a hook that "crashes" (returns an error on every call, as a dead process
// does nothing more) and a channel closed at the first call.
func crashOnce() (func() error, <-chan struct{}) {
	fired := make(chan struct{})
	var once sync.Once
	return func() error {
		once.Do(func() { close(fired) })
		return errors.New("crash")
	}, fired
}

// awaitCrash waits for a crash point to fire, then stops the daemon abruptly.
func (f *fixture) awaitCrash(fired <-chan struct{}, stop func()) {
	f.t.Helper()
	select {
	case <-fired:
	case <-time.After(2 * time.Minute):
		f.t.Fatal("the crash point never fired")
	}
	stop()
}

// ownedInventoried checks I2 with the uncached client: every ConfigMap of the namespace that
// carries the Sync's owner annotation is in the persisted inventory.
func (f *fixture) ownedInventoried(s *v1alpha1.Sync) {
	f.t.Helper()
	ctx := context.Background()
	ref := InventoryRef(s)
	inv, err := inventory.NewStore(f.c).Get(ctx, ref)
	if err != nil {
		f.t.Fatalf("read inventory: %v", err)
	}
	var cms corev1.ConfigMapList
	if err := f.c.List(ctx, &cms, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	tracked := map[string]bool{}
	for _, e := range inv.Entries() {
		tracked[e.Object.Name] = true
	}
	for _, cm := range cms.Items {
		if cm.Annotations[engine.OwnerAnnotation] == ref.ID && !tracked[cm.Name] {
			f.t.Errorf("I2: configmap %s carries our owner annotation but is not in the inventory", cm.Name)
		}
	}
}

// TestDaemonCrashPoints crashes the daemon at each crash point of a reconcile (after render,
// after the inventory write-ahead, after the first apply, before the status write), checks
// that no owned object escaped the inventory (I2) and that nothing claimed Ready for the
// crashed reconcile (I6), then starts a new daemon on a cold cache, which converges (I4, I7).
func TestDaemonCrashPoints(t *testing.T) {
	points := map[string]func(o *Options, hook func() error){
		"after render":          func(o *Options, h func() error) { o.test.crash.AfterRender = func(*v1alpha1.Sync) error { return h() } },
		"after the write-ahead": func(o *Options, h func() error) { o.test.crash.Engine.AfterWriteAhead = h },
		"after the first apply": func(o *Options, h func() error) {
			o.test.crash.Engine.AfterApply = func(int, string) error { return h() }
		},
		"before the status write": func(o *Options, h func() error) {
			o.test.crash.BeforeStatusWrite = func(*v1alpha1.Sync) error { return h() }
		},
	}
	for name, set := range points {
		t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
			f := newFixture(t)
			rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
			hook, fired := crashOnce()
			stop := f.startStoppableDaemon(env.Config, func(o *Options) { set(o, hook) })
			s := f.createSync(time.Hour)
			f.awaitCrash(fired, stop)
			f.ownedInventoried(s)
			cur := &v1alpha1.Sync{}
			if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(s), cur); err != nil {
				t.Fatal(err)
			}
			if readyAt(rev)(cur) {
				t.Errorf("I6: Ready at %s although the reconcile crashed before its status write", rev)
			}

			f.startDaemon(env.Config) // a new process: cold caches, empty memo
			f.waitSync("Ready after the restart", readyAt(rev))
			f.ownedInventoried(s)
			for _, n := range []string{"a", "b"} {
				if _, err := f.configMap(n); err != nil {
					t.Errorf("configmap %s after the restart: %v", n, err)
				}
			}
		})
	}
}

// TestDaemonCrashInFinalizer is S18 at the daemon's own crash point: the Sync is deleted
// with the Delete policy, the daemon crashes after the deletes were confirmed but before the
// finalizer is dropped; a new daemon finishes the job: objects gone, inventory gone, Sync gone
// (I12), and nothing else deleted (I1: a look-alike without our annotation survives).
func TestDaemonCrashInFinalizer(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	ctx := context.Background()
	lookalike := &corev1.ConfigMap{}
	lookalike.Namespace, lookalike.Name = f.ns, "lookalike"
	if err := f.c.Create(ctx, lookalike); err != nil {
		t.Fatal(err)
	}
	hook, fired := crashOnce()
	stop := f.startStoppableDaemon(env.Config, func(o *Options) {
		o.test.crash.BeforeFinalizerRemoval = func(*v1alpha1.Sync) error { return hook() }
	})
	s := f.createSync(time.Hour)
	f.waitSync("Ready", readyAt(rev))
	cur := &v1alpha1.Sync{}
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(s), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
	if err := f.c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(ctx, cur); err != nil {
		t.Fatal(err)
	}
	f.awaitCrash(fired, stop)
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{}); err != nil {
		t.Fatalf("the Sync is gone although the finalizer was never dropped: %v", err)
	}

	f.startDaemon(env.Config)
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("I12: the Sync was never finalized after the restart: %v", err)
	}
	for _, n := range []string{"a", "b", InventoryRef(s).Name} {
		if _, err := f.configMap(n); !apierrors.IsNotFound(err) {
			t.Errorf("I12: configmap %s still there after the Sync was deleted: %v", n, err)
		}
	}
	if _, err := f.configMap("lookalike"); err != nil {
		t.Errorf("I1: the look-alike was touched: %v", err)
	}
}

// TestS17SpecChangesBetweenRenderAndStatusWrite changes the Sync's path (a new generation
// with another render) right after the daemon rendered the old one. The status written by
// that reconcile must describe what it applied: the old generation and the old render (I5,
// I6), never the new generation; the next reconcile then reaches the new one (I4).
func TestS17SpecChangesBetweenRenderAndStatusWrite(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{
		"v1/a.yaml": strings.Replace(cmA, "VERSION", "1", 1),
		"v2/a.yaml": strings.Replace(cmA, "VERSION", "2", 1),
	})
	ctx := context.Background()
	second, release := make(chan struct{}), make(chan struct{})
	calls := 0
	var gen int64
	f.startDaemon(env.Config, func(o *Options) {
		o.test.crash.AfterRender = func(s *v1alpha1.Sync) error {
			calls++ // reconciles of one Sync never run concurrently
			switch calls {
			case 1: // the spec changes under the running reconcile
				gen = s.Generation
				cur := &v1alpha1.Sync{}
				if err := f.c.Get(ctx, client.ObjectKeyFromObject(s), cur); err != nil {
					return err
				}
				cur.Spec.Path = "v2"
				return f.c.Update(ctx, cur)
			case 2: // hold the next reconcile until the test has read the first status
				close(second)
				<-release
			}
			return nil
		}
	})
	s := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "v1" })
	select {
	case <-second:
	case <-time.After(2 * time.Minute):
		t.Fatal("no second reconcile after the spec change")
	}
	// The second reconcile is held until the first one's status and objects are read: it
	// applies v2 as soon as it is released.
	var once sync.Once
	releaseSecond := func() { once.Do(func() { close(release) }) }
	defer releaseSecond()
	cur := &v1alpha1.Sync{}
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(s), cur); err != nil {
		t.Fatal(err)
	}
	if cur.Generation != gen+1 {
		t.Fatalf("generation %d, want %d after the spec change", cur.Generation, gen+1)
	}
	if cur.Status.ObservedGeneration != gen {
		t.Errorf("I5/I6: the reconcile of generation %d wrote observedGeneration %d", gen, cur.Status.ObservedGeneration)
	}
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "1" {
		t.Fatalf("configmap a after the first reconcile: %v, %v; want version 1", cm.Data, err)
	}
	releaseSecond()
	s = f.waitSync("Ready at the new generation", readyAt(rev))
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "2" {
		t.Errorf("I6: Ready at generation %d but configmap a = %v, %v; want version 2", s.Generation, cm.Data, err)
	}
}
