package shard

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
)

// slowLeases makes every Lease write of a coordinator (a request with a deadline) take
// latency on the fake clock; a write whose deadline comes first fails at its deadline and
// does not land (an API server that queues it, then drops it once the client gave up).
type slowLeases struct {
	clk     *fakeClock
	latency atomic.Int64
	cut     atomic.Int64 // writes cut by their deadline
}

func (s *slowLeases) delay(ctx context.Context, obj client.Object) error {
	l := time.Duration(s.latency.Load())
	if _, ok := obj.(*coordinationv1.Lease); !ok || l == 0 {
		return nil
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return nil // the test's own writes
	}
	if rem := time.Until(dl); rem < l {
		s.clk.Add(max(rem, 0))
		s.cut.Add(1)
		return context.DeadlineExceeded
	}
	s.clk.Add(l)
	return nil
}

func slowClient(s *slowLeases) client.Client {
	return fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := s.delay(ctx, obj); err != nil {
				return err
			}
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := s.delay(ctx, obj); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := s.delay(ctx, obj); err != nil {
				return err
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
}

// newSlowLeases is a fake clock and a client whose Lease writes take sl's latency on it
// (none until set).
func newSlowLeases() (*fakeClock, *slowLeases, client.Client) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	sl := &slowLeases{clk: clk}
	return clk, sl, slowClient(sl)
}

// tickFor steps c as its ticker would for d of the fake clock.
func tickFor(ctx context.Context, c *Coordinator, clk *fakeClock, d time.Duration, each func()) {
	for end := clk.Now().Add(d); clk.Now().Before(end); {
		tick(ctx, c, clk, each)
	}
}

// tick steps c as its ticker would: a step starts RetryPeriod after the previous one
// started, or at once if that one took longer.
func tick(ctx context.Context, c *Coordinator, clk *fakeClock, each func()) {
	start := clk.Now()
	c.step(ctx)
	settle(c)
	if each != nil {
		each()
	}
	if el := clk.Now().Sub(start); el < c.cfg.RetryPeriod {
		clk.Add(c.cfg.RetryPeriod - el)
	}
}

// Every Lease write takes 3 s (RetryPeriod 2 s, renew deadline 10 s): renewals succeed
// (renewCall), but a replica below its fair share spends its step on acquisitions cut at
// one RetryPeriod each, until RetryPeriod before the deadline; the next renewal then has
// about a second and fails, and the replica loses the shards it held.
func TestShardSlowLeasesAcquisitionsKeepRenewal(t *testing.T) {
	clk, sl, cl := newSlowLeases()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 8)
	// Four shards held by a replica that is gone (no replica Lease): they expire after the
	// lease duration, and a wants them (fair share 8).
	for _, i := range []int{0, 2, 4, 6} {
		now := metav1.NewMicroTime(clk.Now())
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.ShardLeaseName(i), Namespace: "ns",
			Labels:      map[string]string{labelName: "converge", labelLeaseKind: leaseKindShard, labelLeaseGroup: a.cfg.labelGroup()},
			Annotations: map[string]string{annotationShards: strconv.Itoa(8)}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost_00000000"), LeaseDurationSeconds: ptr.To(int32(15)),
				AcquireTime: &now, RenewTime: &now}}
		if err := cl.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		tick(ctx, a, clk, nil)
	}
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v, want the 4 free shards", h)
	}
	sl.latency.Store(int64(3 * time.Second))
	tickFor(ctx, a, clk, 60*time.Second, nil)
	h, _ := a.table.snapshot()
	t.Logf("after 60 s of 3 s Lease writes: holds %v, lost %v, writes cut %d", h, lostCount(t, a), sl.cut.Load())
	if lost := lostCount(t, a); lost > 0 {
		t.Errorf("lost %v shards although every renewal alone fits in the renew deadline", lost)
	}
}

// Every Lease write takes 3 s: renewals succeed, the clear of a released shard (one
// RetryPeriod) never does. The shard stays held and releasing (no reconcile starts, its
// Syncs forgotten), and the live replica that should get it cannot (its Lease names a live
// replica) for as long as the API server is slow.
func TestShardSlowLeasesReleaseCleared(t *testing.T) {
	clk, sl, cl := newSlowLeases()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 2)
	for range 3 {
		tick(ctx, a, clk, nil)
	}
	if h, _ := a.table.snapshot(); len(h) != 2 {
		t.Fatalf("a holds %v, want both", h)
	}
	// A live replica b (its Lease renewed every step, by the test).
	b := fakeCoordinator(t, cl, clk, "b", 2)
	bl := b.leases.newLease(b.cfg.ReplicaLeaseName(), leaseKindMember, b.identity, clk.Now())
	if err := cl.Create(ctx, bl); err != nil {
		t.Fatal(err)
	}
	renewB := func() {
		bl.Spec.RenewTime = ptr.To(metav1.NewMicroTime(clk.Now()))
		if err := cl.Update(ctx, bl); err != nil {
			t.Fatal(err)
		}
	}
	sl.latency.Store(int64(3 * time.Second))
	tickFor(ctx, a, clk, 60*time.Second, renewB)
	held, releasing := a.table.snapshot()
	var names []string
	for i := 0; i < 2; i++ {
		l := &coordinationv1.Lease{}
		if err := cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: a.cfg.ShardLeaseName(i)}, l); err != nil {
			t.Fatal(err)
		}
		names = append(names, ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	t.Logf("after 60 s: a holds %v, releasing %d, shard Leases held by %v, lost %v, writes cut %d", held, releasing, names, lostCount(t, a), sl.cut.Load())
	if releasing > 0 {
		t.Errorf("a shard stayed releasing for 60 s (its clear cut at RetryPeriod every step while the renewal succeeds)")
	}
}

// A replica that holds nothing gets one RetryPeriod for its replica Lease: with 3 s writes
// it never registers, so it never acquires anything.
func TestShardSlowLeasesNewReplicaRegisters(t *testing.T) {
	clk, sl, cl := newSlowLeases()
	sl.latency.Store(int64(3 * time.Second))
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 2)
	tickFor(ctx, a, clk, 60*time.Second, nil)
	h, _ := a.table.snapshot()
	t.Logf("after 60 s: holds %v, registered replica Lease: %v, writes cut %d", h, a.replica != nil, sl.cut.Load())
	if len(h) == 0 {
		t.Errorf("a replica starting on a slow API server never acquires anything")
	}
}

// Control: the same slow Lease writes with nothing to acquire keep the shards.
func TestShardSlowLeasesRenewalAlone(t *testing.T) {
	clk, sl, cl := newSlowLeases()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 8)
	for range 3 {
		tick(ctx, a, clk, nil)
	}
	sl.latency.Store(int64(3 * time.Second))
	tickFor(ctx, a, clk, 60*time.Second, nil)
	h, _ := a.table.snapshot()
	t.Logf("control: holds %v, lost %v, writes cut %d", h, lostCount(t, a), sl.cut.Load())
	if lostCount(t, a) > 0 {
		t.Errorf("control lost shards")
	}
}
