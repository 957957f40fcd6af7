package shard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
)

// These tests drive shard coordinators step by step on a fake clock against a fake client
// (with interceptors to lose, fail or order requests): what they check is the coordination
// logic, not the API server.

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func fakeCoordinator(t *testing.T, cl client.Client, clk *fakeClock, name string, shards int) *Coordinator {
	t.Helper()
	cfg := Config{Namespace: "ns", Shards: shards, Replica: name,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}
	tab := NewTable(cfg)
	tab.now = clk.Now
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := NewCoordinator(cfg, tab, Clients{API: cl, Syncs: cl}, Hooks{Forget: func(types.NamespacedName) {}}, m, logr.Discard())
	c.now = clk.Now
	return c
}

// settle lets the drain goroutines of released or lost shards (nothing in flight) finish.
func settle(cs ...*Coordinator) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		busy := false
		for _, c := range cs {
			c.table.mu.Lock()
			for _, s := range c.table.shards {
				if s.stopping && !s.released {
					busy = true
				}
			}
			c.table.mu.Unlock()
		}
		if !busy {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func heldBy(cs ...*Coordinator) (n int) {
	for _, c := range cs {
		h, _ := c.table.snapshot()
		n += len(h)
	}
	return n
}

func logLeases(t *testing.T, cl client.Client) {
	t.Helper()
	list := &coordinationv1.LeaseList{}
	_ = cl.List(context.Background(), list)
	for _, l := range list.Items {
		t.Logf("lease %s holder %q shards %s", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[annotationShards])
	}
}

// TestShardCountRaceReplicaLease: two replicas of different --shards whose acquiring steps
// list at the same time (both before either acquired) must not both acquire: shard k of 4
// and shard k' of 2 share Syncs. Were a replica Lease of another count ignored, both would
// acquire and a Sync would be reconciled by both.
func TestShardCountRaceReplicaLease(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var mu sync.Mutex
	barrier, lists := false, 0
	both, bDone := make(chan struct{}), make(chan struct{})
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if _, ok := list.(*coordinationv1.LeaseList); ok {
				mu.Lock()
				on := barrier
				if on {
					lists++
					if lists == 2 {
						close(both)
					}
				}
				mu.Unlock()
				if on {
					<-both // both lists answered before either acquires
				}
			}
			return err
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Labels[labelLeaseKind] == leaseKindShard && strings.HasPrefix(ptr.Deref(l.Spec.HolderIdentity, ""), "a_") {
				<-bDone // a's acquires land after b's step
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 4)
	b := fakeCoordinator(t, cl, clk, "b", 2)
	a.step(ctx) // registers
	b.step(ctx) // registers
	clk.Add(2 * time.Second)
	mu.Lock()
	barrier = true
	mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.step(ctx) }()
	go func() { defer wg.Done(); b.step(ctx); close(bDone) }()
	wg.Wait()
	mu.Lock()
	barrier = false
	mu.Unlock()
	for k := 0; k < 10; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
		b.step(ctx)
	}
	ha, _ := a.table.snapshot()
	hb, _ := b.table.snapshot()
	t.Logf("a (4 shards) holds %v, b (2 shards) holds %v", ha, hb)
	if len(ha) > 0 && len(hb) > 0 {
		t.Fatalf("replicas of --shards 4 and 2 both hold shards: a %v, b %v (a Sync has two writers)", ha, hb)
	}
}

// TestShardReplicaOfOtherCountStopsAcquiring: a live replica Lease of another --shards
// stops acquiring even when no shard Lease is held under that count; once it is gone
// (unchanged for the lease duration), acquiring resumes.
func TestShardReplicaOfOtherCountStopsAcquiring(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 4)
	b := fakeCoordinator(t, cl, clk, "b", 2)
	b.step(ctx) // b registers, then stops (never renews)
	a.step(ctx)
	clk.Add(2 * time.Second)
	a.step(ctx)
	if h, _ := a.table.snapshot(); len(h) != 0 {
		t.Fatalf("a acquired %v while a replica of another --shards lives", h)
	}
	for k := 0; k < 10; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
	}
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v after the other replica's Lease expired, want all 4", h)
	}
}

// TestShardStepBudget: one step sends no more writes once the next renewal could not be
// sent within the renew deadline: slow acquires stop instead of running the held shards
// out. Without the budget, a step would acquire every shard it wanted however long each
// took.
func TestShardStepBudget(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var creates atomic.Int32
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Labels[labelLeaseKind] == leaseKindShard {
				creates.Add(1)
				clk.Add(2 * time.Second) // each acquire takes a RetryPeriod
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 16)
	a.step(ctx)
	clk.Add(2 * time.Second)
	a.step(ctx)
	// Renewal sent at T; writes only while now < T + RenewDeadline (10 s) - RetryPeriod (2 s).
	if n := creates.Load(); n > 4 {
		t.Fatalf("one step sent %d acquires of 2 s each: past the renew deadline of the shards it holds", n)
	}
	for k := 0; k < 10; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
	}
	if h, _ := a.table.snapshot(); len(h) != 16 {
		t.Fatalf("a holds %v after 10 more steps, want all 16", h)
	}
}

// TestShardObservedAfterList: a Lease is observed when the List answered, not when it was
// sent: a slow List must not age what it returns.
func TestShardObservedAfterList(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	slow := atomic.Bool{}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			err := c.List(ctx, list, opts...)
			if _, ok := list.(*coordinationv1.LeaseList); ok && slow.Load() {
				clk.Add(1500 * time.Millisecond)
			}
			return err
		},
	}).Build()
	ctx := context.Background()
	b := fakeCoordinator(t, cl, clk, "b", 4)
	b.step(ctx)
	a := fakeCoordinator(t, cl, clk, "a", 4)
	slow.Store(true)
	a.step(ctx)
	o, ok := a.seen[b.cfg.ReplicaLeaseName()]
	if !ok {
		t.Fatal("b's replica Lease not observed")
	}
	if !o.at.Equal(clk.Now()) {
		t.Fatalf("b's Lease observed at %v, the List answered at %v", o.at, clk.Now())
	}
}

// TestShardClearRetriedAfterFailure: a release whose clear write failed is cleared again
// next step; the shards are not left naming a live replica that no longer holds them.
// Were the shards forgotten by the table at once, nobody would ever take them over.
func TestShardClearRetriedAfterFailure(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var fail atomic.Bool
	var released atomic.Int32
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Labels[labelLeaseKind] == leaseKindShard && l.Spec.HolderIdentity == nil {
				if fail.CompareAndSwap(true, false) {
					return errors.New("injected 503 on clear")
				}
				released.Add(1)
			}
			return c.Update(ctx, obj, opts...)
		}}).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 4)
	a.step(ctx)
	clk.Add(2 * time.Second)
	a.step(ctx)
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v", h)
	}
	b := fakeCoordinator(t, cl, clk, "b", 4)
	b.step(ctx)
	fail.Store(true)
	for k := 0; k < 40; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
		settle(a, b)
		b.step(ctx)
	}
	if heldBy(a, b) < 4 {
		logLeases(t, cl)
		t.Fatalf("shards orphaned: a and b hold %d of 4", heldBy(a, b))
	}
	if got := released.Load(); got < 2 {
		t.Errorf("%d successful clears, want 2", got)
	}
}

// TestShardLostAcquireAnswerCleared: an acquire whose answer was lost leaves a Lease naming
// this replica, which the table shows free; once above its fair share the replica clears
// it rather than leave it held by nobody forever. Without the clear, it would stay so.
func TestShardLostAcquireAnswerCleared(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var lose atomic.Bool
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			err := c.Create(ctx, obj, opts...)
			if l, ok := obj.(*coordinationv1.Lease); ok && err == nil && l.Labels[labelLeaseKind] == leaseKindShard && lose.Load() {
				return context.DeadlineExceeded // created, but the answer never came
			}
			return err
		},
	}).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 2)
	a.step(ctx)
	clk.Add(2 * time.Second)
	lose.Store(true)
	a.step(ctx) // creates both shard Leases, believes it holds none
	lose.Store(false)
	if h, _ := a.table.snapshot(); len(h) != 0 {
		t.Fatalf("a holds %v", h)
	}
	b := fakeCoordinator(t, cl, clk, "b", 2)
	b.step(ctx)
	for k := 0; k < 20; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
		settle(a, b)
		b.step(ctx)
	}
	if heldBy(a, b) != 2 {
		logLeases(t, cl)
		t.Fatalf("a and b hold %d of 2 shards", heldBy(a, b))
	}
}

// TestShardNewIdentityAfterLoseAll: a replica whose replica Lease another deleted loses its
// shards and registers under a new identity, so its old shard Leases are taken over. Before
// the fix it re-registered under the old identity, which kept those Leases alive unheld.
func TestShardNewIdentityAfterLoseAll(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 4)
	a.step(ctx)
	clk.Add(2 * time.Second)
	a.step(ctx)
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v", h)
	}
	b := fakeCoordinator(t, cl, clk, "b", 4)
	b.step(ctx)
	old := a.identity
	if err := cl.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: a.cfg.ReplicaLeaseName()}}); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 30; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
		settle(a, b)
		b.step(ctx)
	}
	if a.identity == old {
		t.Errorf("a kept its identity %s after losing its replica Lease", old)
	}
	if heldBy(a, b) != 4 {
		logLeases(t, cl)
		t.Fatalf("a and b hold %d of 4 shards", heldBy(a, b))
	}
}

// TestShardDrainBounded: a shard being released whose reconcile does not end is lost after
// the renew deadline (its writes refused) instead of being held, renewed, forever. Before
// the fix the drain waited without limit, the shard writable all along.
func TestShardDrainBounded(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	c := fakeCoordinator(t, cl, clk, "a", 2)
	c.cfg.RenewDeadline = 200 * time.Millisecond
	c.table.renewed(0, clk.Now().Add(time.Hour)) // stays valid on the fake clock
	done, ok := c.table.begin(0)
	if !ok {
		t.Fatal("begin refused")
	}
	if !c.table.stop(0, false) {
		t.Fatal("stop asked for no drain")
	}
	finished := make(chan struct{})
	go func() { c.drain(context.Background(), 0); close(finished) }()
	deadline := time.Now().Add(10 * time.Second)
	for c.table.writable(0) {
		if time.Now().After(deadline) {
			done()
			t.Fatal("a releasing shard with a hung reconcile is still writable after 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.table.free(0) {
		t.Error("the lost shard is free while its reconcile still runs")
	}
	done()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not end after the reconcile did")
	}
	if !c.table.free(0) {
		t.Error("the shard is not free once drained")
	}
}

// TestShardReplicaLeaseDeletedAnswersConflict: the API server answers the renewal of a
// deleted replica Lease (an update with a resourceVersion) with a conflict, and the re-read
// with not found. The replica must treat that as a deletion (lose its shards, take a new
// identity, re-create its Lease) and rejoin. Were the re-read's not found returned as a
// plain error, the replica would renew nothing for ever and never hold a shard again
// (TestBinaryShardsReplicaRecoversFromAPIErrors holds this against the real API server).
func TestShardReplicaLeaseDeletedAnswersConflict(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	ctx := context.Background()
	var base client.WithWatch
	base = fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), &coordinationv1.Lease{}); apierrors.IsNotFound(err) {
				return apierrors.NewConflict(coordinationv1.Resource("leases"), obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	a := fakeCoordinator(t, base, clk, "a", 4)
	a.step(ctx)
	clk.Add(2 * time.Second)
	a.step(ctx)
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v", h)
	}
	old := a.identity
	if err := base.Delete(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: a.cfg.ReplicaLeaseName()}}); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 30; k++ {
		clk.Add(2 * time.Second)
		a.step(ctx)
		settle(a)
	}
	if a.identity == old {
		t.Errorf("a kept its identity %s after its replica Lease was deleted", old)
	}
	if h, _ := a.table.snapshot(); len(h) != 4 {
		logLeases(t, base)
		t.Fatalf("a holds %v after its replica Lease was deleted; want all 4 again", h)
	}
}

// TestShardOrphansOfLargerCountDeleted: after --shards went down (8 → 4), the shard Leases
// numbered 4..7 are deleted once no replica of the old count lives and they are free or
// expired; while the old replica lives nothing is deleted (the rollout may go back).
// Without the deletion, they would stay in the namespace for ever.
func TestShardOrphansOfLargerCountDeleted(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	ctx := context.Background()
	old := fakeCoordinator(t, cl, clk, "old", 8)
	for range 3 {
		old.step(ctx)
		clk.Add(2 * time.Second)
	}
	if h, _ := old.table.snapshot(); len(h) != 8 {
		t.Fatalf("the old replica holds %v, want all 8", h)
	}
	// Its shard 6 is released cleanly (cleared), the others expire with it (killed).
	l6 := &coordinationv1.Lease{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: old.cfg.ShardLeaseName(6)}, l6); err != nil {
		t.Fatal(err)
	}
	if err := old.clear(ctx, l6); err != nil {
		t.Fatal(err)
	}
	n := fakeCoordinator(t, cl, clk, "new", 4)
	n.step(ctx)
	exists := func(i int) bool {
		err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: n.cfg.ShardLeaseName(i)}, &coordinationv1.Lease{})
		return err == nil
	}
	if !exists(6) || !exists(7) {
		t.Fatal("a shard Lease of the larger count was deleted while a replica of that count lives")
	}
	for range 15 { // the old replica is gone: its Leases expire after the lease duration
		clk.Add(2 * time.Second)
		n.step(ctx)
	}
	for i := 4; i < 8; i++ {
		if exists(i) {
			t.Errorf("shard Lease %d of the larger count still exists after its holder expired", i)
		}
	}
	if h, _ := n.table.snapshot(); len(h) != 4 {
		logLeases(t, cl)
		t.Errorf("the new replica holds %v, want all 4", h)
	}
}
