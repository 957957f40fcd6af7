package shard

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestShardFirstReadAfterAcquireIsLive: the first reconcile of a Sync after its shard was
// acquired reads the Sync from the API server and goes on only once the cache shows what
// it read (the cache may predate the previous holder's writes: reconciling an old
// generation would apply an old revision and prune); the next ones use the cache alone; a
// new acquisition reads live again.
func TestShardFirstReadAfterAcquireIsLive(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newTable(1, 10*time.Second)
	tab.now = func() time.Time { return now }
	key := types.NamespacedName{Namespace: "ns", Name: "s"}
	liveSync := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1", Generation: 2}}
	var reads atomic.Int32
	live := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(liveSync).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads.Add(1)
			return c.Get(ctx, k, obj, opts...)
		},
	}).Build()
	cur := &v1alpha1.Sync{}
	if err := live.Get(context.Background(), key, cur); err != nil {
		t.Fatal(err)
	}
	reads.Store(0)
	var forgotten int
	g := NewGate(tab, live, func(types.NamespacedName) { forgotten++ })
	stale := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u1", Generation: 1, ResourceVersion: "1"}}
	read := func(cached *v1alpha1.Sync, wantSync bool, wantReads int32) {
		t.Helper()
		turn, err := g.Begin(context.Background(), cached)
		if err != nil {
			t.Fatal(err)
		}
		s, requeue := turn.Sync, turn.Requeue
		if s != nil {
			turn.Done()
		}
		if (s != nil) != wantSync || (requeue > 0) == wantSync || reads.Load() != wantReads {
			t.Fatalf("got Sync %v, requeue %v after %d live reads; want Sync %v after %d", s != nil, requeue, reads.Load(), wantSync, wantReads)
		}
		if s != nil && s.Generation != 2 {
			t.Fatalf("reconciling generation %d, the API server has 2", s.Generation)
		}
	}
	tab.renewed(0, now)
	read(stale, false, 1) // first after acquire, cache behind: requeued, not reconciled
	read(cur, true, 2)    // cache caught up: reconciled
	read(cur, true, 2)    // then the cache alone
	tab.stop(0, true)
	tab.drained(0)
	tab.renewed(0, now)
	read(cur, true, 3) // acquired again: read live again
	if forgotten != 2 {
		t.Errorf("the daemon was told of %d live reads taken, want 2", forgotten)
	}
}
