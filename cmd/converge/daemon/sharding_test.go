package daemon

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/cmd/converge/daemon/webhook"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// Short timings for the sharding tests: a handover within seconds, with room left for a
// loaded machine (a renew may take a while under -race).
const (
	testLease, testRenew, testRetry = 4 * time.Second, 3 * time.Second, 500 * time.Millisecond
	testShards                      = 12
	testSyncs                       = 15
)

// sentWrite is one write that left a daemon (after its fences): when it was sent, when
// its answer came, and which Sync it was for ("" when none of the test's).
type sentWrite struct {
	start, end time.Time
	sync       string
}

// writeLog records the writes one daemon sends, as the API server receives them.
type writeLog struct {
	mu     sync.Mutex
	writes []sentWrite
}

// wrap is called for each client built from the config: one transport each.
func (l *writeLog) wrap(rt http.RoundTripper) http.RoundTripper { return writeLogTransport{l, rt} }

type writeLogTransport struct {
	l    *writeLog
	next http.RoundTripper
}

func (t writeLogTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead || strings.Contains(req.URL.RawQuery, "dryRun") {
		return t.next.RoundTrip(req)
	}
	l := t.l
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	l.mu.Lock()
	l.writes = append(l.writes, sentWrite{start: start, end: time.Now(), sync: syncOfPath(req.URL.Path)})
	l.mu.Unlock()
	return resp, err
}

// syncOfPath names the test Sync a write is for: the Sync itself (metadata, status) or its
// ConfigMap cm-<sync>.
func syncOfPath(p string) string {
	for _, marker := range []string{"/syncs/", "/configmaps/cm-"} {
		if i := strings.Index(p, marker); i >= 0 {
			return strings.SplitN(p[i+len(marker):], "/", 2)[0]
		}
	}
	return ""
}

func (l *writeLog) snapshot() []sentWrite {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sentWrite(nil), l.writes...)
}

// shardDaemon is one replica of a sharded test deployment.
type shardDaemon struct {
	name  string
	log   *writeLog
	fault *fault.Transport
	stop  func()
}

// startShardDaemon starts replica name with --sharding=auto, the test's timings, and its
// writes recorded.
func (f *fixture) startShardDaemon(name string, mutate ...func(*Options)) *shardDaemon {
	cfg, ft := fault.Config(env.Config)
	wl := &writeLog{}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(wl.wrap)
	stop := f.startStoppableDaemon(cfg, append([]func(*Options){f.shardOptions(name)}, mutate...)...)
	return &shardDaemon{name: name, log: wl, fault: ft, stop: stop}
}

// shardOptions are the options of a sharded replica name of the tests' timings.
func (f *fixture) shardOptions(name string) func(*Options) {
	return func(o *Options) {
		o.Sharding, o.Shards, o.Replica, o.LeaderNamespace = ShardingAuto, testShards, name, f.ns
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = testLease, testRenew, testRetry
		o.QuickStart = QuickStart{}
		o.Concurrency = 4
	}
}

// shardHolders reads the shard Leases: shard index → replica name ("" when free).
func (f *fixture) shardHolders() map[int]string {
	f.t.Helper()
	list := &coordinationv1.LeaseList{}
	if err := f.c.List(context.Background(), list, client.InNamespace(f.ns), client.MatchingLabels{"converge.dev/lease": "shard"}); err != nil {
		f.t.Fatal(err)
	}
	out := map[int]string{}
	for _, l := range list.Items {
		var i int
		if _, err := fmt.Sscanf(l.Name, "converge-shard-%d", &i); err != nil {
			continue
		}
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		out[i] = strings.SplitN(holder, "_", 2)[0]
	}
	return out
}

// waitShares waits until every shard is held and each of the replicas holds its fair share.
func (f *fixture) waitShares(what string, replicas ...string) map[int]string {
	f.t.Helper()
	var holders map[int]string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		holders = f.shardHolders()
		count := map[string]int{}
		for i := 0; i < testShards; i++ {
			count[holders[i]]++
		}
		if count[""] > 0 || len(count) != len(replicas) {
			return false, nil
		}
		for _, r := range replicas {
			if n := count[r]; n < testShards/len(replicas) || n > (testShards+len(replicas)-1)/len(replicas) /* the fair share, rounded up */ {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.t.Fatalf("shards never %s: holders %v", what, holders)
	}
	return holders
}

// shardSyncs creates testSyncs Syncs s-00.., each applying its own ConfigMap cm-s-NN.
func (f *fixture) shardSyncs(version string) (names []string, rev string) {
	files := map[string]string{}
	for i := 0; i < testSyncs; i++ {
		name := fmt.Sprintf("s-%02d", i)
		names = append(names, name)
		files[name+"/cm.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%s, namespace: NS}\ndata: {version: %q}\n", name, version)
	}
	return names, f.publish(files)
}

// republish commits version to every Sync's ConfigMap and asks each Sync for a reconcile
// (their interval is an hour: nothing else would notice the commit).
func (f *fixture) republish(names []string, version string) string {
	files := map[string]string{}
	for _, name := range names {
		files[name+"/cm.yaml"] = fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-%s, namespace: NS}\ndata: {version: %q}\n", name, version)
	}
	rev := f.publish(files)
	for _, name := range names {
		f.updateSync(name, func(s *v1alpha1.Sync) {
			if s.Annotations == nil {
				s.Annotations = map[string]string{}
			}
			s.Annotations[v1alpha1.RequestedAtAnnotation] = "v" + version
		})
	}
	return rev
}

func (f *fixture) createShardSyncs(names []string) {
	for _, name := range names {
		synctest.Create(f.t, f.c, synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) {
			s.Name, s.Spec.Path, s.Spec.TargetNamespace = name, name, f.ns
		}))
	}
}

func (f *fixture) waitAllReady(names []string, rev string, within time.Duration) {
	f.t.Helper()
	deadline := time.Now().Add(within)
	for _, name := range names {
		key := client.ObjectKey{Namespace: f.ns, Name: name}
		s := &v1alpha1.Sync{}
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
			if err := f.c.Get(ctx, key, s); err != nil {
				return false, nil
			}
			return readyAt(rev)(s), nil
		})
		if err != nil {
			f.t.Fatalf("Sync %s not Ready at %s within %s: %+v", name, rev, within, s.Status)
		}
	}
}

// writersOf maps each Sync to the replicas that wrote for it.
func writersOf(ds ...*shardDaemon) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, d := range ds {
		for _, w := range d.log.snapshot() {
			if w.sync == "" {
				continue
			}
			if out[w.sync] == nil {
				out[w.sync] = map[string]bool{}
			}
			out[w.sync][d.name] = true
		}
	}
	return out
}

// checkOneWriterAtATime fails when a Sync's writes, in the order they were sent, go back to
// a replica that wrote before another one (A B A), or when the first write of a new writer
// was sent before the last write of the previous one was answered: two writers at once.
func checkOneWriterAtATime(t *testing.T, ds ...*shardDaemon) {
	t.Helper()
	type w struct {
		sentWrite
		by string
	}
	per := map[string][]w{}
	for _, d := range ds {
		for _, x := range d.log.snapshot() {
			if x.sync != "" {
				per[x.sync] = append(per[x.sync], w{x, d.name})
			}
		}
	}
	for name, ws := range per {
		sort.Slice(ws, func(i, j int) bool { return ws[i].start.Before(ws[j].start) })
		done := map[string]bool{}
		for i := 1; i < len(ws); i++ {
			prev, cur := ws[i-1], ws[i]
			if prev.by == cur.by {
				continue
			}
			done[prev.by] = true
			if done[cur.by] {
				t.Errorf("Sync %s: %s wrote again after %s had written (two owners at once)", name, cur.by, prev.by)
			}
			var lastPrev time.Time
			for _, x := range ws[:i] {
				if x.by == prev.by && x.end.After(lastPrev) {
					lastPrev = x.end
				}
			}
			if cur.start.Before(lastPrev) {
				t.Errorf("Sync %s: %s sent a write at %s while a write of %s was in flight until %s",
					name, cur.by, cur.start.Format(time.StampMilli), prev.by, lastPrev.Format(time.StampMilli))
			}
		}
	}
}

// TestDaemonShardingSplitsAndTakesOver runs three sharded replicas on 15 Syncs: the 12
// shards are split 4/4/4, every Sync is Ready and written by exactly one replica. Then one
// replica stops without releasing anything (as SIGKILL): its Syncs are reconciled by the
// others at a new commit within the lease duration plus a reconcile, one writer at a time.
// Without --sharding, every replica reconciles (or only one leader does).
func TestDaemonShardingSplitsAndTakesOver(t *testing.T) {
	f := newFixture(t)
	names, rev1 := f.shardSyncs("1")
	a := f.startShardDaemon("r-a")
	b := f.startShardDaemon("r-b")
	c := f.startShardDaemon("r-c", func(o *Options) { o.test.skipShardRelease = true })
	holders := f.waitShares("split among three replicas", "r-a", "r-b", "r-c")
	f.createShardSyncs(names)
	f.waitAllReady(names, rev1, 90*time.Second)

	uids := map[string]int{}
	for _, name := range names {
		s := &v1alpha1.Sync{}
		if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, s); err != nil {
			t.Fatal(err)
		}
		uids[name] = shard.Of(s.UID, testShards)
	}
	for name, by := range writersOf(a, b, c) {
		if len(by) != 1 || !by[holders[uids[name]]] {
			t.Errorf("Sync %s (shard %d, held by %s) written by %v", name, uids[name], holders[uids[name]], by)
		}
	}
	checkShardLabels(f, uids)

	// Idle, a replica renews its shards with one write per retry period, not one per shard.
	before := a.fault.CountResource("update", "leases", "")
	time.Sleep(6 * testRetry)
	if n := a.fault.CountResource("update", "leases", "") - before; n > 6+2 {
		t.Errorf("a replica holding %d shards sent %d Lease updates in 6 retry periods", testShards/3, n)
	}

	c.stop() // no release: its Leases expire
	killed := time.Now()
	rev2 := f.republish(names, "2")
	f.waitAllReady(names, rev2, testLease+30*time.Second)
	t.Logf("all Syncs Ready at the new commit %s after the kill", time.Since(killed).Round(time.Millisecond))
	f.waitShares("taken over by the two left", "r-a", "r-b")
	checkOneWriterAtATime(t, a, b, c)
	checkShardLabels(f, uids)
	for _, w := range c.log.snapshot() {
		if w.sync != "" && w.start.After(killed) {
			t.Errorf("the stopped replica wrote for %s after it stopped", w.sync)
		}
	}
}

// checkShardLabels checks that every Sync's ConfigMap carries its shard's label, by which
// the replica holding the shard caches it (shardEngines), whoever applied it.
func checkShardLabels(f *fixture, shards map[string]int) {
	f.t.Helper()
	for name, i := range shards {
		cm, err := f.configMap("cm-" + name)
		if err != nil {
			f.t.Fatal(err)
		}
		if got, want := cm.Labels[ShardLabel], fmt.Sprintf("%d-of-%d", i, testShards); got != want {
			f.t.Errorf("Sync %s's ConfigMap: label %s = %q, want %q", name, ShardLabel, got, want)
		}
	}
}

// TestDaemonShardingRebalances adds a replica to two: shards move to it, commits published
// all along are applied, and no Sync sees two writers at once.
func TestDaemonShardingRebalances(t *testing.T) {
	f := newFixture(t)
	names, rev := f.shardSyncs("0")
	a := f.startShardDaemon("r-a")
	b := f.startShardDaemon("r-b")
	f.waitShares("split among two replicas", "r-a", "r-b")
	f.createShardSyncs(names)
	f.waitAllReady(names, rev, 90*time.Second)

	c := f.startShardDaemon("r-c")
	ctx, cancel := context.WithCancel(context.Background())
	published := make(chan string, 1)
	go func() { // keep every Sync busy while shards move
		defer close(published)
		last := ""
		for v := 1; ctx.Err() == nil; v++ {
			last = f.republish(names, fmt.Sprint(v))
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
		published <- last
	}()
	holders := f.waitShares("rebalanced to three replicas", "r-a", "r-b", "r-c")
	time.Sleep(2 * time.Second) // a few more commits after the move
	cancel()
	last := <-published
	f.waitAllReady(names, last, 90*time.Second)
	checkOneWriterAtATime(t, a, b, c)
	moved := 0
	for _, h := range holders {
		if h == "r-c" {
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no shard moved to the new replica: %v", holders)
	}
	wrote := writersOf(c)
	if len(wrote) == 0 {
		t.Errorf("the new replica holds %d shards but wrote for no Sync", moved)
	}
}

// TestDaemonShardingRenewBlocked blocks one replica's Lease writes (a partition between it
// and the API server for Leases only): it loses its shards at its renew deadline, the others
// take them after the lease duration, and it sends no write for their Syncs from its
// deadline on, though its other requests still go through.
func TestDaemonShardingRenewBlocked(t *testing.T) {
	f := newFixture(t)
	names, rev1 := f.shardSyncs("1")
	a := f.startShardDaemon("r-a")
	b := f.startShardDaemon("r-b")
	f.waitShares("split among two replicas", "r-a", "r-b")
	f.createShardSyncs(names)
	f.waitAllReady(names, rev1, 90*time.Second)

	blocked := time.Now()
	b.fault.SetRules(fault.Rule{Verb: "update", Resource: "leases", Blackhole: true},
		fault.Rule{Verb: "create", Resource: "leases", Blackhole: true})
	f.waitShares("all taken by the replica left", "r-a")
	rev2 := f.republish(names, "2")
	f.waitAllReady(names, rev2, 90*time.Second)
	// Its renew before the block was sent at most one retry period before it.
	fenced := blocked.Add(testRenew)
	for _, w := range b.log.snapshot() {
		if w.sync != "" && w.start.After(fenced) {
			t.Errorf("the replica cut off from its Leases wrote for %s at %s, past its renew deadline %s",
				w.sync, w.start.Format(time.StampMilli), fenced.Format(time.StampMilli))
		}
	}
	checkOneWriterAtATime(t, a, b)
}

// TestDaemonShardingWebhookOnAnyReplica: the push webhook reaches any replica (a Service
// picks one); a replica that does not own the Sync still annotates it, and the owner applies
// the pushed commit. The other replica applies nothing.
func TestDaemonShardingWebhookOnAnyReplica(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"b.yaml": cmB})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-webhook", Namespace: f.ns},
		StringData: map[string]string{webhook.TokenKey: "s3cret\n"}}
	if err := f.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	addrs := map[string]string{"r-a": cluster.FreeAddr(), "r-b": cluster.FreeAddr()}
	ds := map[string]*shardDaemon{}
	for name, addr := range addrs {
		ds[name] = f.startShardDaemon(name, func(o *Options) { o.WebhookAddr = addr })
	}
	holders := f.waitShares("split among two replicas", "r-a", "r-b")
	s := f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Webhook = &v1alpha1.Webhook{SecretRef: v1alpha1.LocalObjectReference{Name: secret.Name}}
		s.Spec.TargetNamespace = f.ns
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	owner := holders[shard.Of(s.UID, testShards)]
	other := "r-a"
	if owner == "r-a" {
		other = "r-b"
	}

	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	body := []byte(`{"ref":"refs/heads/main"}`)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addrs[other]+"/hooks/"+f.ns+"/app", bytes.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", "sha256="+sign([]byte("s3cret"), body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			return false, fmt.Errorf("webhook of %s: status %d", other, resp.StatusCode)
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitSync("Ready at the commit pushed to the replica that does not own it", readyAt(rev2))
	applied := func(d *shardDaemon) bool {
		for _, w := range d.fault.Writes() {
			if strings.Contains(w, "/configmaps/a") {
				return true
			}
		}
		return false
	}
	if !applied(ds[owner]) || applied(ds[other]) {
		t.Errorf("ConfigMap a applied by owner %s: %v, by %s: %v", owner, applied(ds[owner]), other, applied(ds[other]))
	}
}

// TestDaemonShardingOtherShardCount: a replica started with another --shards (a rollout
// changing it) takes no shard while shard Leases are held under the old count, since its
// shard numbers name other Syncs; and, while it lives, the replicas of the old count take
// no more shards either (two replicas of different counts listing at once could otherwise
// both acquire): the shards of an old replica that stops wait for the rollout to end. Once
// the old replicas are gone it takes over.
func TestDaemonShardingOtherShardCount(t *testing.T) {
	f := newFixture(t)
	names, rev1 := f.shardSyncs("1")
	a := f.startShardDaemon("r-a")
	a2 := f.startShardDaemon("r-a2")
	before := f.waitShares("split among the two old replicas", "r-a", "r-a2")
	f.createShardSyncs(names)
	f.waitAllReady(names, rev1, 90*time.Second)

	b := f.startShardDaemon("r-b", func(o *Options) { o.Shards = testShards / 2 })
	time.Sleep(6 * testRetry) // r-b registered: r-a2 has seen it
	a.stop()                  // releases its shards: nobody takes them while r-b lives
	time.Sleep(6 * testRetry)
	after := f.shardHolders()
	for i := 0; i < testShards; i++ {
		if before[i] == "r-a2" && after[i] != "r-a2" {
			t.Errorf("shard %d: r-a2 lost it (holder now %q)", i, after[i])
		}
		if before[i] == "r-a" && after[i] != "" {
			t.Errorf("shard %d of the stopped r-a taken by %q while a replica of another --shards lives", i, after[i])
		}
	}
	shardWrites := func() int {
		n := 0
		for _, w := range b.fault.Writes() {
			if strings.Contains(w, "/leases/converge-shard-") {
				n++
			}
		}
		return n
	}
	if n := shardWrites(); n != 0 {
		t.Errorf("the replica of another --shards wrote %d shard Leases while the old count held them", n)
	}
	if w := writersOf(b); len(w) != 0 {
		t.Errorf("the replica of another --shards wrote for Syncs while the old count held them: %v", w)
	}

	a2.stop()
	rev3 := f.republish(names, "3")
	f.waitAllReady(names, rev3, 90*time.Second)
	checkOneWriterAtATime(t, a, a2, b)
}
