package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// Labels of the Leases of sharding: the app's name (RBAC and dashboards find them by it),
// what the Lease is, and which group of replicas (one per watch label selector) it belongs to.
const (
	labelName       = "app.kubernetes.io/name"
	labelLeaseKind  = "converge.dev/lease"
	labelLeaseGroup = "converge.dev/lease-group"
	leaseKindShard  = "shard"
	leaseKindMember = "replica"
	// annotationShards, on every Lease of sharding, is its writer's --shards.
	annotationShards = "converge.dev/shards"
)

// shardCoordinator is the Runnable that moves shards between replicas with sharding on. It
// runs on every replica (no leader election) and, every RetryPeriod:
//
//  1. renews this replica's membership Lease (converge-replica-<name>): this one write is
//     the renewal of every shard it holds, so idle coordination costs one write and one list
//     per replica and RetryPeriod, whatever the number of shards;
//  2. lists the group's Leases and counts the live replicas: those whose Lease was seen to
//     change within its lease duration (judged, as client-go's leader election does, on this
//     process's monotonic clock from when a record was first observed, never by comparing
//     clocks), the fair share being ceil(shards / live);
//  3. checks the shard Leases it holds: a shard whose Lease another holder took, or whose
//     replica Lease was not renewed within RenewDeadline, is lost: the fence refuses its
//     writes at once, its Syncs are forgotten once their reconciles end. A shard Lease is
//     taken from its holder only when neither it nor the holder's replica Lease changed for
//     the lease duration;
//  4. clears the Leases of the shards whose release finished (holder emptied: free at once;
//     a failed clear is retried next step);
//  5. acquires free or expired shard Leases while it holds fewer than its fair share, and
//     queues every known Sync of an acquired shard (nothing waits for its interval); but
//     none while a shard Lease is held, or a replica Lease lives, under another --shards (a
//     rollout changing it: the same shard number is other Syncs there), whose replicas it
//     does not count as live; nor in the step that created its replica Lease or whose
//     renewal failed;
//  6. clears the shard Leases naming its identity that it does not hold (an acquire whose
//     answer was lost, a lost shard): with its replica Lease renewed they would never expire;
//  7. releases the shards above its fair share: no reconcile of them starts, those running
//     finish (so no Sync is reconciled by two replicas at once; those still running after
//     RenewDeadline are fenced: the shard is lost instead), their Syncs are forgotten, and
//     step 4 clears the Lease.
//
// A step sweeps the shards past their deadline before renewing. The renewal may take until
// the earliest renew deadline of the shards it renews (renewCall); the Lease list takes at
// most RetryPeriod (its answer must be fresh: part of the lease margin), every other request
// at most bound() (RetryPeriod, or more when the last renewal took longer). A step sends no
// write later than bound() plus the last renewal's latency before the renew deadline from
// its renewal (a step whose renewal failed: before the earliest deadline still held), so the
// next renewal is sent in time to keep the held shards on an API server as slow as the last
// renewal found it.
//
// The holder identity is the replica's name with a random suffix per process, and a new one
// whenever its replica Lease was deleted or taken: a restarted pod waits for its
// predecessor's Leases to expire like any other replica.
type shardCoordinator struct {
	o        Options
	table    *shardTable
	api      client.Client // uncached: Leases
	syncs    client.Reader // the manager's cache: the Syncs of a shard
	forget   func(types.NamespacedName)
	metrics  *shardMetrics
	log      logr.Logger
	identity string
	group    string
	now      func() time.Time
	// drained, when set, hears that shard i's reconciles have ended after it was released
	// or lost, before the shard can be acquired again (its engine is dropped).
	drained func(i int)

	mu    sync.Mutex
	queue workqueue.TypedRateLimitingInterface[reconcile.Request] // nil until the controller starts
	ctx   context.Context                                         // Start's: the drains of lost shards end with it

	// loop goroutine only:
	seen       map[string]observedLease
	replica    *coordinationv1.Lease
	steps      int
	registered bool          // the replica Lease was created in this step: acquire nothing yet
	renewed    time.Time     // when this step's successful replica renewal was sent (zero: it failed)
	latency    time.Duration // how long the last successful renewal took
	offset     int           // where this replica starts looking for shards to acquire
}

// observedLease is a Lease's resourceVersion and when this process first saw it.
type observedLease struct {
	rv string
	at time.Time
}

func newShardCoordinator(o Options, table *shardTable, api client.Client, syncs client.Reader,
	forget func(types.NamespacedName), metrics *shardMetrics, log logr.Logger) *shardCoordinator {
	id := newIdentity(o.Replica)
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	group := o.leaseGroup()
	if group == "" {
		group = "all"
	}
	return &shardCoordinator{o: o, table: table, api: api, syncs: syncs, forget: forget, metrics: metrics,
		log: log, identity: id, group: group, now: time.Now,
		seen: map[string]observedLease{}, offset: int(h.Sum32() % uint32(table.n))}
}

// newIdentity is a holder identity for replica: its name with a random suffix.
func newIdentity(replica string) string {
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	return replica + "_" + hex.EncodeToString(suffix)
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica coordinates.
func (c *shardCoordinator) NeedLeaderElection() bool { return false }

// source hands the coordinator the controller's queue, to queue the Syncs of an acquired
// shard.
func (c *shardCoordinator) source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.queue = q
		return nil
	})
}

// Start implements manager.Runnable: it coordinates until ctx ends, then releases what it
// holds (see shutdown).
func (c *shardCoordinator) Start(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.metrics.shards.Set(float64(c.table.n))
	t := time.NewTicker(c.o.RetryPeriod)
	defer t.Stop()
	for {
		c.step(ctx)
		select {
		case <-ctx.Done():
			c.shutdown()
			return nil
		case <-t.C:
		}
	}
}

func (c *shardCoordinator) step(ctx context.Context) {
	defer func() { c.steps++ }()
	// Sweep first: a shard past its deadline is lost before the renewal, which must not
	// revive it (renewAll extends only the shards still valid when it was sent).
	c.sweep()
	c.registered, c.renewed = false, time.Time{}
	if err := c.renewMembership(ctx); err != nil {
		c.log.Error(err, "renewing the replica Lease", "identity", c.identity)
	}
	list := &coordinationv1.LeaseList{}
	err := callWithin(ctx, c.o.RetryPeriod, func(ctx context.Context) error { // RetryPeriod: part of the lease margin
		return c.api.List(ctx, list, client.InNamespace(c.o.LeaderNamespace),
			client.MatchingLabels{labelName: "converge", labelLeaseGroup: c.group})
	})
	// Observed once the List returned (as client-go's leader election does): a record is
	// never judged older than it is by the time the answer took.
	now := c.now()
	if err != nil {
		c.log.Error(err, "listing the shard Leases")
		c.sweep()
		return
	}
	shards := map[string]*coordinationv1.Lease{}
	members := map[string]*coordinationv1.Lease{} // holder identity → its replica Lease
	live := 1                                     // this replica
	var other []string                            // Leases live under another --shards
	names := map[string]bool{}
	for i := range list.Items {
		l := &list.Items[i]
		names[l.Name] = true
		c.observe(l.Name, l.ResourceVersion, now)
		switch l.Labels[labelLeaseKind] {
		case leaseKindShard:
			shards[l.Name] = l
		case leaseKindMember:
			if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
				members[h] = l
			}
			if l.Name == c.o.replicaLeaseName() {
				continue
			}
			if c.unchanged(l.Name, c.duration(l), now) {
				c.dropMember(ctx, l)
				continue
			}
			if c.sameShards(l) { // a replica of another --shards shares no shard with this one
				live++
			} else {
				// A live replica of another --shards: acquire nothing while it lives, as
				// for a shard Lease held under another count. With a replica's first step
				// (after creating its replica Lease) acquiring nothing and every later one
				// listing after its renewal, two replicas of different counts cannot both
				// acquire: each lists after registering, so whichever lists second sees
				// the other's registration.
				other = append(other, l.Name+"="+l.Annotations[annotationShards])
			}
		}
	}
	for _, l := range shards {
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		if h == "" {
			continue
		}
		key := "holder:" + h
		names[key] = true
		rv := "absent"
		if m := members[h]; m != nil {
			rv = m.ResourceVersion
		}
		c.observeHolder(key, rv, c.duration(l), now)
		if !c.sameShards(l) && !c.expired(l, now) {
			other = append(other, l.Name+"="+l.Annotations[annotationShards])
		}
	}
	for name := range c.seen {
		if !names[name] {
			delete(c.seen, name)
		}
	}
	fair := fairShare(c.table.n, live)
	c.checkShards(shards)
	c.clearReleased(ctx, shards)
	c.sweep()
	held, _ := c.table.snapshot()
	if len(other) > 0 {
		// A shard number means other Syncs under another --shards: taking any shard while
		// one is held, or a replica lives, under another count could make two replicas
		// write one Sync. Take nothing until those Leases are released or expire: a rollout
		// that changes --shards leaves the Syncs to the old replicas until the last of them
		// is gone.
		if c.steps%20 == 0 {
			c.log.Info("not acquiring shards: Leases are held under another --shards", "shards", c.table.n, "leases", other)
		}
	} else if c.steps > 0 && !c.registered && !c.renewed.IsZero() && len(held) < fair {
		// The first step after creating the replica Lease only registers (replicas starting
		// together see each other), and a step whose renewal failed takes nothing.
		c.acquire(ctx, shards, now, fair-len(held))
	}
	c.clearStray(ctx, shards)
	if len(other) == 0 {
		c.dropOrphans(ctx, shards, now)
	}
	if len(held) > fair {
		for _, i := range held[fair:] {
			if c.table.stop(i, false) {
				c.log.Info("releasing shard", "shard", i, "fair", fair, "live", live)
				go c.drain(ctx, i)
			}
		}
	}
	c.gauge(ctx)
}

// fairShare is how many of n shards each of live replicas may hold: ceil(n/live), so that
// the live replicas together can hold every shard, none holding more than one above another.
func fairShare(n, live int) int {
	if live < 1 {
		live = 1
	}
	return (n + live - 1) / live
}

// sameShards reports whether l was written by a replica of this one's --shards.
func (c *shardCoordinator) sameShards(l *coordinationv1.Lease) bool {
	return l.Annotations[annotationShards] == strconv.Itoa(c.table.n)
}

// call runs f, a request that renews nothing (an acquire, a clear, a delete), with a
// deadline of bound(), so a hung request cannot hold up the loop past the renew deadlines of
// the shards held (inBudget counts on it).
func (c *shardCoordinator) call(ctx context.Context, f func(context.Context) error) error {
	return callWithin(ctx, c.bound(), f)
}

// bound is how long a request other than the renewal and the list may take: one
// RetryPeriod, or as long as the last renewal took on a slower API server, at most half the
// renew deadline (a step that holds nothing has no budget to stop it, and a renewal of a
// replica holding nothing may take the whole deadline).
func (c *shardCoordinator) bound() time.Duration {
	return max(c.o.RetryPeriod, min(c.latency*6/5, c.o.RenewDeadline/2))
}

// renewCall runs f, the renewal of every shard held (the replica Lease), with a deadline at
// the earliest renew deadline of those shards rather than one RetryPeriod: an overloaded API
// server answers Lease writes in more than a RetryPeriod, and a renewal cut off while the
// shards were still valid loses them at their deadline, though nobody else could take them
// (their Leases did change), and every new owner reconciles their Syncs again. It never
// runs past that deadline: a renewal unanswered by then has failed, the shards are lost
// (their writes refused by the fence whatever this request does later), and the loop goes
// on to the next step. A replica holding nothing gets the whole renew deadline: it has
// nothing to keep, and on a slow API server it must still register to acquire anything.
func (c *shardCoordinator) renewCall(ctx context.Context, f func(context.Context) error) error {
	d := c.o.RenewDeadline // nothing held: nothing to keep
	if left, ok := c.table.leftOfHeld(); ok {
		d = left
	}
	return callWithin(ctx, d, f)
}

// callWithin runs f with a deadline d from now.
func callWithin(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// observe notes when this process first saw the record key (a Lease's name, or a holder)
// at version rv.
func (c *shardCoordinator) observe(key, rv string, now time.Time) {
	if o, ok := c.seen[key]; !ok || o.rv != rv {
		c.seen[key] = observedLease{rv: rv, at: now}
	}
}

// observeHolder observes the replica Lease of a shard holder (rv "absent" when it has none).
// A Lease deleted after it had expired stays expired: the replica that deleted it (dropMember)
// does not make the others wait a second lease duration for its shards.
func (c *shardCoordinator) observeHolder(key, rv string, d time.Duration, now time.Time) {
	if o, ok := c.seen[key]; ok && o.rv != rv && rv == "absent" && now.Sub(o.at) >= d {
		c.seen[key] = observedLease{rv: rv, at: o.at}
		return
	}
	c.observe(key, rv, now)
}

// unchanged reports whether the record key was seen at one version for d or longer.
func (c *shardCoordinator) unchanged(key string, d time.Duration, now time.Time) bool {
	o, ok := c.seen[key]
	return ok && now.Sub(o.at) >= d
}

// duration is l's lease duration, else this replica's.
func (c *shardCoordinator) duration(l *coordinationv1.Lease) time.Duration {
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return c.o.LeaseDuration
}

// expired reports whether shard Lease l is free: no holder, or neither it nor its holder's
// replica Lease (which the holder renews for all its shards) changed for the lease duration.
func (c *shardCoordinator) expired(l *coordinationv1.Lease, now time.Time) bool {
	h := ptr.Deref(l.Spec.HolderIdentity, "")
	if h == "" {
		return true
	}
	d := c.duration(l)
	return c.unchanged(l.Name, d, now) && c.unchanged("holder:"+h, d, now)
}

func (c *shardCoordinator) leaseSeconds() *int32 {
	s := int32((c.o.LeaseDuration + time.Second - 1) / time.Second)
	return &s
}

func (c *shardCoordinator) newLease(name, kind string, now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	annotations := map[string]string{annotationShards: strconv.Itoa(c.table.n)}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.o.LeaderNamespace,
			Labels: map[string]string{labelName: "converge", labelLeaseKind: kind, labelLeaseGroup: c.group}, Annotations: annotations},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(c.identity), LeaseDurationSeconds: c.leaseSeconds(),
			AcquireTime: &t, RenewTime: &t},
	}
}

// renewMembership creates or renews this replica's Lease. Its renewal is the renewal of
// every shard this replica holds (one write per RetryPeriod, not one per shard): on success
// they are valid until the renew deadline from when it was sent. A replica Lease deleted or
// taken over means another replica judged this one gone: every shard is lost.
func (c *shardCoordinator) renewMembership(ctx context.Context) error {
	sent := c.now()
	err := c.renewCall(ctx, func(ctx context.Context) error {
		if c.replica == nil {
			l := c.newLease(c.o.replicaLeaseName(), leaseKindMember, sent)
			err := c.api.Create(ctx, l)
			if apierrors.IsAlreadyExists(err) { // a predecessor of this name: its shards wait for its Lease duration
				cur := &coordinationv1.Lease{}
				if err := c.api.Get(ctx, client.ObjectKeyFromObject(l), cur); err != nil {
					return err
				}
				cur.Labels, cur.Annotations, cur.Spec = l.Labels, l.Annotations, l.Spec
				err = c.api.Update(ctx, cur)
				l = cur
			}
			if err != nil {
				return err
			}
			c.replica, c.registered = l, true
			return nil
		}
		l := c.replica.DeepCopy()
		l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
		err := c.api.Update(ctx, l)
		if apierrors.IsConflict(err) { // our own write whose answer was lost, another took the name, or it was deleted
			cur := &coordinationv1.Lease{}
			if gerr := c.api.Get(ctx, client.ObjectKeyFromObject(l), cur); gerr != nil {
				err = gerr // NotFound: deleted, handled below
			} else if ptr.Deref(cur.Spec.HolderIdentity, "") != c.identity {
				c.replica = nil
				c.loseAll("the replica Lease is held by " + ptr.Deref(cur.Spec.HolderIdentity, "") + " (another process with this --replica-name?)")
				return err
			} else {
				l = cur
				l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(sent))
				err = c.api.Update(ctx, l)
			}
		}
		if apierrors.IsNotFound(err) {
			c.replica = nil
			c.loseAll("the replica Lease was deleted: another replica judged this one gone")
			return err
		}
		if err != nil {
			return err // renewed again next step; the shards stay valid until the deadline
		}
		c.replica = l
		return nil
	})
	if err == nil {
		c.table.renewAll(sent)
		c.renewed = sent
		c.latency = c.now().Sub(sent)
	}
	return err
}

// loseAll loses every held shard, and takes a new holder identity: the replica Lease it
// re-creates must not make the shard Leases still naming the old identity look held by a
// live replica (nobody would ever take them over).
func (c *shardCoordinator) loseAll(why string) {
	for i := 0; i < c.table.n; i++ {
		if c.table.isHeld(i) {
			c.lose(i, why)
		}
	}
	old := c.identity
	c.identity = newIdentity(c.o.Replica)
	c.log.Info("new holder identity", "old", old, "identity", c.identity)
}

// dropMember deletes the Lease of a replica gone without deleting it (killed), so the
// namespace does not collect one per pod ever run.
func (c *shardCoordinator) dropMember(ctx context.Context, l *coordinationv1.Lease) {
	if !c.inBudget() {
		return // next step
	}
	_ = c.call(ctx, func(ctx context.Context) error {
		return c.api.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
	})
}

// checkShards loses the held shards whose Lease is gone or held by another.
func (c *shardCoordinator) checkShards(leases map[string]*coordinationv1.Lease) {
	for i := 0; i < c.table.n; i++ {
		if !c.table.isHeld(i) {
			continue
		}
		if l := leases[c.o.shardLeaseName(i)]; l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != c.identity {
			holder := "nobody"
			if l != nil {
				holder = ptr.Deref(l.Spec.HolderIdentity, "")
			}
			c.lose(i, "the Lease is held by "+holder)
		}
	}
}

// clearReleased empties the holder of the shards whose release finished. A shard whose
// clear failed stays releasing (held, renewed) and is cleared again next step: its Lease
// must not keep naming this live replica, which would never be taken over.
func (c *shardCoordinator) clearReleased(ctx context.Context, leases map[string]*coordinationv1.Lease) {
	for _, i := range c.table.toClear() {
		if !c.inBudget() {
			return
		}
		if l := leases[c.o.shardLeaseName(i)]; l != nil && ptr.Deref(l.Spec.HolderIdentity, "") == c.identity {
			if err := c.clear(ctx, l); err != nil && !apierrors.IsNotFound(err) {
				c.log.Error(err, "clearing a released shard Lease (retried next step)", "lease", l.Name)
				continue
			}
			c.metrics.handovers.WithLabelValues("released").Inc()
		}
		c.table.cleared(i)
		c.log.Info("released shard", "shard", i)
	}
}

// clearStray clears the shard Leases naming this replica's identity that it does not hold
// (an acquire whose answer was lost, a shard lost by its deadline or a drain that took too
// long): with this replica's Lease renewed they would never expire, so nobody would take
// them over. A free one under the fair share was re-taken by acquire already.
func (c *shardCoordinator) clearStray(ctx context.Context, leases map[string]*coordinationv1.Lease) {
	for i := 0; i < c.table.n; i++ {
		l := leases[c.o.shardLeaseName(i)]
		if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") != c.identity || c.table.isHeld(i) {
			continue
		}
		if !c.inBudget() {
			return
		}
		if err := c.clear(ctx, l); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Error(err, "clearing a shard Lease this replica does not hold (retried next step)", "lease", l.Name)
			continue
		}
		c.log.Info("cleared a shard Lease naming this replica, which does not hold it", "shard", i)
	}
}

// dropOrphans deletes the shard Leases numbered beyond this replica's --shards (left by a
// larger count: a rollout that lowered it) once they are free or expired: no replica of
// this count ever takes them, so they would stay in the namespace for ever. It runs only
// once no replica of another count lives and no shard is held under one (step): until the
// rollout ends it may still go back. The delete is conditional on the version read: one
// taken meanwhile stays.
func (c *shardCoordinator) dropOrphans(ctx context.Context, leases map[string]*coordinationv1.Lease, now time.Time) {
	for name, l := range leases {
		if i, ok := c.o.shardOfLeaseName(name); !ok || i < c.table.n || c.sameShards(l) || !c.expired(l, now) {
			continue
		}
		if !c.inBudget() {
			return
		}
		err := c.call(ctx, func(ctx context.Context) error {
			return c.api.Delete(ctx, l, client.Preconditions{ResourceVersion: &l.ResourceVersion})
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			c.log.Error(err, "deleting a shard Lease of a larger --shards (retried next step)", "lease", name)
			continue
		}
		c.log.Info("deleted a shard Lease of a larger --shards", "lease", name, "shards", l.Annotations[annotationShards])
	}
}

// inBudget reports whether this step may still send a write: only until one more write
// (bound()) and the next renewal (as long as the last one took) still fit before the renew
// deadline from its renewal, so the next renewal is sent while the held shards are still
// valid. A step whose renewal failed counts back from the earliest deadline of the shards
// still held: they stay valid until then, and the next step's renewal may still keep them.
func (c *shardCoordinator) inBudget() bool {
	reserve := c.bound() + c.latency // the last write, then the next renewal
	if c.renewed.IsZero() {
		left, ok := c.table.leftOfHeld()
		return !ok || left > reserve // nothing held: nothing to keep
	}
	return c.now().Before(c.renewed.Add(c.o.RenewDeadline - reserve))
}

// clear writes l with no holder: another replica may take it at once.
func (c *shardCoordinator) clear(ctx context.Context, l *coordinationv1.Lease) error {
	l = l.DeepCopy()
	l.Spec.HolderIdentity = nil
	l.Spec.RenewTime = ptr.To(metav1.NewMicroTime(c.now()))
	return c.call(ctx, func(ctx context.Context) error { return c.api.Update(ctx, l) })
}

// sweep loses the held shards not renewed within the renew deadline.
func (c *shardCoordinator) sweep() {
	for i := 0; i < c.table.n; i++ {
		if c.table.expired(i) {
			c.lose(i, "not renewed within the renew deadline")
		}
	}
}

// lose gives shard i up without a Lease write: its writes are refused from now on.
func (c *shardCoordinator) lose(i int, why string) {
	drain := c.table.stop(i, true)
	c.metrics.handovers.WithLabelValues("lost").Inc()
	c.log.Info("lost shard", "shard", i, "reason", why, "identity", c.identity)
	if drain {
		go c.drain(c.runCtx(), i)
	}
}

// runCtx is Start's context (Background before Start, in tests).
func (c *shardCoordinator) runCtx() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil {
		return context.Background()
	}
	return c.ctx
}

// drain waits for the reconciles of stopped shard i to end, then forgets its Syncs. A shard
// being released whose reconciles do not end within the renew deadline is lost instead:
// the fence refuses their writes from then on and clearStray hands its Lease over, while
// the shard stays unacquirable here until they end.
func (c *shardCoordinator) drain(ctx context.Context, i int) {
	bounded, cancel := context.WithTimeout(ctx, c.o.RenewDeadline)
	err := c.table.drain(bounded, i)
	cancel()
	if err != nil && ctx.Err() == nil {
		if c.table.isHeld(i) {
			c.table.stop(i, true)
			c.metrics.handovers.WithLabelValues("lost").Inc()
			c.log.Info("lost shard: its reconciles did not end within the renew deadline; their writes are refused", "shard", i, "reason", err.Error())
		}
		err = c.table.drain(ctx, i)
	}
	if err != nil {
		c.log.Error(err, "draining a shard")
	}
	c.eachSync(context.Background(), i, c.forget)
	if c.drained != nil {
		c.drained(i)
	}
	c.table.drained(i)
}

// acquire takes up to want free or expired shards, starting at this replica's offset so
// replicas starting together contend less.
func (c *shardCoordinator) acquire(ctx context.Context, leases map[string]*coordinationv1.Lease, now time.Time, want int) {
	for j := 0; j < c.table.n && want > 0 && c.inBudget(); j++ {
		i := (c.offset + j) % c.table.n
		if !c.table.free(i) {
			continue
		}
		name := c.o.shardLeaseName(i)
		l := leases[name]
		if l != nil && !c.expired(l, now) && ptr.Deref(l.Spec.HolderIdentity, "") != c.identity {
			continue
		}
		sent := c.now()
		err := c.call(ctx, func(ctx context.Context) error {
			if l == nil {
				return c.api.Create(ctx, c.newLease(name, leaseKindShard, sent))
			}
			take := l.DeepCopy()
			t := metav1.NewMicroTime(sent)
			fresh := c.newLease(name, leaseKindShard, sent)
			take.Labels, take.Annotations = fresh.Labels, fresh.Annotations
			take.Spec.HolderIdentity, take.Spec.LeaseDurationSeconds = ptr.To(c.identity), c.leaseSeconds()
			take.Spec.AcquireTime, take.Spec.RenewTime = &t, &t
			take.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
			return c.api.Update(ctx, take)
		})
		if err != nil {
			if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
				c.log.Error(err, "acquiring a shard Lease", "shard", i)
			}
			continue
		}
		c.table.renewed(i, sent)
		want--
		c.metrics.handovers.WithLabelValues("acquired").Inc()
		c.log.Info("acquired shard", "shard", i, "identity", c.identity)
		c.enqueue(i)
	}
}

// enqueue queues every known Sync of shard i: a handover waits for no interval.
func (c *shardCoordinator) enqueue(i int) {
	c.mu.Lock()
	q := c.queue
	c.mu.Unlock()
	if q == nil {
		return // the controller has not started: its first list queues every Sync
	}
	c.eachSync(context.Background(), i, func(key types.NamespacedName) { q.Add(reconcile.Request{NamespacedName: key}) })
}

// eachSync calls f with every cached Sync of shard i.
func (c *shardCoordinator) eachSync(ctx context.Context, i int, f func(types.NamespacedName)) {
	list := &v1alpha1.SyncList{}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.syncs.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		c.log.Error(err, "listing the Syncs of a shard", "shard", i)
		return
	}
	for _, s := range list.Items {
		if shardOf(s.UID, c.table.n) == i {
			f(types.NamespacedName{Namespace: s.Namespace, Name: s.Name})
		}
	}
}

// gauge sets the held-shards and owned-Syncs gauges.
func (c *shardCoordinator) gauge(ctx context.Context) {
	held, releasing := c.table.snapshot()
	c.metrics.held.Set(float64(len(held) + releasing))
	list := &v1alpha1.SyncList{}
	if err := c.syncs.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return
	}
	owned := 0
	for _, s := range list.Items {
		if c.table.isHeld(shardOf(s.UID, c.table.n)) {
			owned++
		}
	}
	c.metrics.owned.Set(float64(owned))
}

// shutdown, once the daemon stops, releases what it holds so the other replicas take over at
// once rather than after the lease duration: no reconcile starts, those running end (within
// the renew deadline, after which the fence refuses their writes anyway), then the shard
// Leases are cleared and the replica Lease deleted.
func (c *shardCoordinator) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.RenewDeadline)
	defer cancel()
	var held []int
	for i := 0; i < c.table.n; i++ {
		if c.table.isHeld(i) {
			c.table.stop(i, false)
			held = append(held, i)
		}
	}
	if c.o.skipShardRelease { // test-only: a SIGKILL releases nothing
		return
	}
	for _, i := range held {
		if err := c.table.drain(ctx, i); err != nil || !c.table.writable(i) {
			continue // it expires instead
		}
		l := &coordinationv1.Lease{}
		err := c.call(ctx, func(ctx context.Context) error {
			return c.api.Get(ctx, client.ObjectKey{Namespace: c.o.LeaderNamespace, Name: c.o.shardLeaseName(i)}, l)
		})
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == c.identity {
			if err := c.clear(ctx, l); err != nil {
				c.log.Error(err, "clearing a shard Lease (it expires instead)", "lease", l.Name)
			} else {
				c.metrics.handovers.WithLabelValues("released").Inc()
			}
		}
		c.table.cleared(i)
	}
	if c.replica != nil {
		_ = c.call(ctx, func(ctx context.Context) error { return client.IgnoreNotFound(c.api.Delete(ctx, c.replica)) })
	}
	c.log.Info(fmt.Sprintf("released %d shards", len(held)))
}
