package shard

import (
	"context"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// leases sends the Lease requests of sharding, each with a deadline (within): a hung
// request cannot hold up the coordinator past the renew deadlines of the shards it holds.
type leases struct {
	api client.Client // uncached
	cfg Config
}

// callWithin runs f with a deadline d from now.
func callWithin(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// list lists the Leases of this replica's group, within RetryPeriod: its answer must be
// fresh (it is part of the lease margin).
func (ls leases) list(ctx context.Context) ([]coordinationv1.Lease, error) {
	list := &coordinationv1.LeaseList{}
	err := callWithin(ctx, ls.cfg.RetryPeriod, func(ctx context.Context) error {
		return ls.api.List(ctx, list, client.InNamespace(ls.cfg.Namespace),
			client.MatchingLabels{labelName: "converge", labelLeaseGroup: ls.cfg.labelGroup()})
	})
	return list.Items, err
}

// newLease is Lease name of kind held by identity from now.
func (ls leases) newLease(name, kind, identity string, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ls.cfg.Namespace,
			Labels:      map[string]string{labelName: "converge", labelLeaseKind: kind, labelLeaseGroup: ls.cfg.labelGroup()},
			Annotations: map[string]string{annotationShards: strconv.Itoa(ls.cfg.Shards)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(identity), LeaseDurationSeconds: ls.cfg.leaseSeconds(),
			AcquireTime: &t, RenewTime: &t},
	}
}

// register creates this replica's Lease for identity, or takes it over from a predecessor
// of its name (whose shards then wait for its lease duration), within d.
func (ls leases) register(ctx context.Context, d time.Duration, identity string, sent time.Time) (*coordinationv1.Lease, error) {
	l := ls.newLease(ls.cfg.ReplicaLeaseName(), leaseKindMember, identity, sent)
	err := callWithin(ctx, d, func(ctx context.Context) error {
		err := ls.api.Create(ctx, l)
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		cur := &coordinationv1.Lease{}
		if err := ls.api.Get(ctx, client.ObjectKeyFromObject(l), cur); err != nil {
			return err
		}
		cur.Labels, cur.Annotations, cur.Spec = l.Labels, l.Annotations, l.Spec
		err = ls.api.Update(ctx, cur)
		l = cur
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// renew renews this replica's Lease cur as sent, within d. gone is not empty when the Lease
// was deleted or another holder took it: another replica judged this one gone (or another
// process has its --replica-name), and every shard is lost.
func (ls leases) renew(ctx context.Context, d time.Duration, cur *coordinationv1.Lease, identity string, sent time.Time) (renewed *coordinationv1.Lease, gone string, err error) {
	err = callWithin(ctx, d, func(ctx context.Context) error {
		l := cur.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
		err := ls.api.Update(ctx, l)
		if apierrors.IsConflict(err) { // our own write whose answer was lost, another took the name, or it was deleted
			read := &coordinationv1.Lease{}
			if gerr := ls.api.Get(ctx, client.ObjectKeyFromObject(l), read); gerr != nil {
				err = gerr // NotFound: deleted, handled below
			} else if h := holder(read); h != identity {
				gone = "the replica Lease is held by " + h + " (another process with this --replica-name?)"
				return err
			} else {
				l = read
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
				err = ls.api.Update(ctx, l)
			}
		}
		if apierrors.IsNotFound(err) {
			gone = "the replica Lease was deleted: another replica judged this one gone"
			return err
		}
		renewed = l
		return err // an error: renewed again next step; the shards stay valid until the deadline
	})
	if err != nil {
		renewed = nil
	}
	return renewed, gone, err
}

// take acquires shard i for identity as sent, within d: creates its Lease, or takes cur over.
func (ls leases) take(ctx context.Context, d time.Duration, i int, cur *coordinationv1.Lease, identity string, sent time.Time) error {
	name := ls.cfg.ShardLeaseName(i)
	return callWithin(ctx, d, func(ctx context.Context) error {
		if cur == nil {
			return ls.api.Create(ctx, ls.newLease(name, leaseKindShard, identity, sent))
		}
		take := cur.DeepCopy()
		t := metav1.NewMicroTime(sent)
		fresh := ls.newLease(name, leaseKindShard, identity, sent)
		take.Labels, take.Annotations = fresh.Labels, fresh.Annotations
		take.Spec.HolderIdentity, take.Spec.LeaseDurationSeconds = ptr.To(identity), ls.cfg.leaseSeconds()
		take.Spec.AcquireTime, take.Spec.RenewTime = &t, &t
		take.Spec.LeaseTransitions = ptr.To(ptr.Deref(cur.Spec.LeaseTransitions, 0) + 1)
		return ls.api.Update(ctx, take)
	})
}

// clear writes l with no holder as of now, within d: another replica may take it at once.
func (ls leases) clear(ctx context.Context, d time.Duration, l *coordinationv1.Lease, now time.Time) error {
	l = l.DeepCopy()
	l.Spec.HolderIdentity = nil
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(now))
	return callWithin(ctx, d, func(ctx context.Context) error { return ls.api.Update(ctx, l) })
}

// remove deletes l if still at the version read, within d: one taken meanwhile stays.
func (ls leases) remove(ctx context.Context, d time.Duration, l *coordinationv1.Lease) error {
	return callWithin(ctx, d, func(ctx context.Context) error {
		return ls.api.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
	})
}

// removeOwn deletes this replica's Lease l, within d (gone already is fine).
func (ls leases) removeOwn(ctx context.Context, d time.Duration, l *coordinationv1.Lease) error {
	return callWithin(ctx, d, func(ctx context.Context) error { return client.IgnoreNotFound(ls.api.Delete(ctx, l)) })
}

// get reads the Lease of shard i, within d.
func (ls leases) get(ctx context.Context, d time.Duration, i int) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := callWithin(ctx, d, func(ctx context.Context) error {
		return ls.api.Get(ctx, client.ObjectKey{Namespace: ls.cfg.Namespace, Name: ls.cfg.ShardLeaseName(i)}, l)
	})
	return l, err
}
