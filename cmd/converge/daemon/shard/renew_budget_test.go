package shard

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
)

// TestShardFailedRenewalKeepsBudget: a step whose renewal failed (a 503) still holds shards
// valid until their deadline, and the next step's renewal can keep them; slow writes of that
// step (here deletes of the Leases of a larger --shards, 2 s each on an overloaded API
// server) must stop in time for it to be sent before that deadline. Were the step's budget
// lifted by a failed renewal ("nothing renewed, nothing to keep"), the step would delete
// all ten Leases, 20 s, and the replica would lose its four shards at the next sweep (the
// test then fails with "lost 4 shards").
func TestShardFailedRenewalKeepsBudget(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	var failRenew, slowDeletes atomic.Bool
	cl := fake.NewClientBuilder().WithScheme(scheme.New()).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Labels[labelLeaseKind] == leaseKindMember && failRenew.Load() {
				return errors.New("injected 503 on the renewal")
			}
			return c.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if _, ok := obj.(*coordinationv1.Lease); ok && slowDeletes.Load() {
				clk.Add(2 * time.Second)
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	ctx := context.Background()
	a := fakeCoordinator(t, cl, clk, "a", 4)
	for range 3 {
		a.step(ctx)
		clk.Add(2 * time.Second)
	}
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v, want all 4", h)
	}
	for i := 4; i < 14; i++ { // free Leases of a larger --shards: dropOrphans deletes them
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.ShardLeaseName(i), Namespace: "ns",
			Labels:      map[string]string{labelName: "converge", labelLeaseKind: leaseKindShard, labelLeaseGroup: a.cfg.labelGroup()},
			Annotations: map[string]string{annotationShards: strconv.Itoa(16)}}}
		if err := cl.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	failRenew.Store(true)
	slowDeletes.Store(true)
	a.step(ctx)
	failRenew.Store(false)
	a.step(ctx)
	settle(a)
	if lost := lostCount(t, a); lost > 0 {
		t.Fatalf("lost %v shards: the step after a failed renewal wrote past the time its next renewal needed", lost)
	}
	if h, _ := a.table.snapshot(); len(h) != 4 {
		t.Fatalf("a holds %v, want all 4", h)
	}
}
