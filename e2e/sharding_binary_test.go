package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/checker"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// The sharding tests run several `converge run --sharding=auto` replicas of one namespace's
// Syncs, each replica through its own fault proxy (so every write is attributed to the replica
// that sent it), with one checker per Sync following the whole run (I1, I2, I5, I11).
const (
	fleetSyncs   = 8 // Syncs s0..s7, each its own folder of the repository
	fleetObjects = 3 // ConfigMaps per Sync: <sync>-cm-<i>
	fleetShards  = 8
	// The lease timings of the replicas: short, so that a takeover is quick.
	fleetLease, fleetRenew, fleetRetry = 4 * time.Second, 3 * time.Second, 500 * time.Millisecond
	// fleetWait bounds every wait for the fleet: generous, nothing here times the daemon.
	fleetWait = 90 * time.Second
)

// fleet is the Syncs of one namespace and the replicas that share them.
type fleet struct {
	t        *testing.T
	ns       string
	srv      *gitserver.Server
	dir      string
	c        client.Client
	replicas []*replica
	checkers []*checker.Checker
}

// replica is one `converge run --sharding=auto`.
type replica struct {
	name    string
	proc    *binary.Process
	proxy   *fault.Proxy
	metrics string // host:port of its /metrics
	gone    bool   // killed or paused: not live
}

// requireSharding skips the test when the built converge has no --sharding flag.
func requireSharding(t *testing.T) {
	t.Helper()
	out, _ := exec.Command(binary.Converge(t), "run", "--help").CombinedOutput()
	if !strings.Contains(string(out), "--sharding") {
		t.Skip("converge run has no --sharding flag: automatic sharding is not in this build")
	}
}

// newFleet starts the git server and the checkers of a namespace of fleetSyncs Syncs.
func newFleet(t *testing.T) *fleet {
	t.Helper()
	cluster.Require(t, env)
	requireSharding(t)
	ns := env.Namespace(t)
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	f := &fleet{t: t, ns: ns, srv: srv, dir: t.TempDir(), c: directClient(t)}
	for i := range fleetSyncs {
		chk, err := checker.Start(t.Context(), env.Config, checker.ForSync(ns, syncName(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.checkers = append(f.checkers, chk)
	}
	return f
}

func syncName(i int) string { return "s" + strconv.Itoa(i) }

// publish commits every Sync's ConfigMaps at data.version v and returns the revision.
func (f *fleet) publish(v string) string {
	f.t.Helper()
	for i := range fleetSyncs {
		dir := filepath.Join(f.dir, syncName(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			f.t.Fatal(err)
		}
		var b strings.Builder
		for j := range fleetObjects {
			fmt.Fprintf(&b, "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s-cm-%d, namespace: %s}\ndata: {version: %q}\n", syncName(i), j, f.ns, v)
		}
		if err := os.WriteFile(filepath.Join(dir, "cms.yaml"), []byte(b.String()), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	sha, err := f.srv.Publish("app", "main", f.dir, "version "+v)
	if err != nil {
		f.t.Fatal(err)
	}
	return "main@sha1:" + sha
}

// start runs a replica named name through a fault proxy of its own.
func (f *fleet) start(name string) *replica {
	f.t.Helper()
	proxy, kubeconfig := startProxy(f.t)
	r := &replica{name: name, proxy: proxy, metrics: cluster.FreeAddr()}
	r.proc = binary.Start(f.t, "run", "--kubeconfig", kubeconfig, "--watch-namespace", f.ns,
		"--sharding", "auto", "--shards", strconv.Itoa(fleetShards), "--replica-name", name,
		"--leader-election-namespace", f.ns, "--leader-election-lease-duration", fleetLease.String(),
		"--leader-election-renew-deadline", fleetRenew.String(), "--leader-election-retry-period", fleetRetry.String(),
		"--concurrent", "2", "--metrics-addr", r.metrics, "--health-addr", cluster.FreeAddr(),
		"--git-cache-dir", f.t.TempDir(), "--allow-local-git")
	f.replicas = append(f.replicas, r)
	return r
}

// createSyncs creates the Syncs once the first replica has installed the CRD.
func (f *fleet) createSyncs() {
	f.t.Helper()
	for i := range fleetSyncs {
		s := &v1alpha1.Sync{
			ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: syncName(i)},
			Spec: v1alpha1.SyncSpec{
				Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: f.srv.RepoURL("app"), Ref: v1alpha1.GitRef{Branch: "main"}}},
				Path:     syncName(i),
				Interval: metav1.Duration{Duration: 2 * time.Second},
				Prune:    true,
			},
		}
		var last error
		err := wait.PollUntilContextTimeout(f.t.Context(), 200*time.Millisecond, fleetWait, true, func(ctx context.Context) (bool, error) {
			last = f.c.Create(ctx, s)
			return last == nil, nil
		})
		if err != nil {
			f.t.Fatalf("create Sync %s: %v", s.Name, last)
		}
	}
}

// waitReady waits until every Sync is Ready at rev for its generation.
func (f *fleet) waitReady(rev string) {
	f.t.Helper()
	var pending []string
	err := wait.PollUntilContextTimeout(f.t.Context(), 250*time.Millisecond, fleetWait, true, func(ctx context.Context) (bool, error) {
		f.checkRunning()
		var list v1alpha1.SyncList
		if err := f.c.List(ctx, &list, client.InNamespace(f.ns)); err != nil {
			return false, nil
		}
		pending = pending[:0]
		for _, s := range list.Items {
			if s.Status.ObservedGeneration != s.Generation || s.Status.LastAppliedRevision != rev ||
				!meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
				pending = append(pending, fmt.Sprintf("%s (applied %q)", s.Name, s.Status.LastAppliedRevision))
			}
		}
		return len(list.Items) == fleetSyncs && len(pending) == 0, nil
	})
	if err != nil {
		f.t.Fatalf("Syncs not Ready at %s within %s: %v", rev, fleetWait, pending)
	}
}

// shardHolders returns the replica name holding each shard Lease of the namespace ("" when
// free), from the holder identity <replica name>_<suffix>.
func (f *fleet) shardHolders(ctx context.Context) (map[string]string, error) {
	leases, err := env.Clientset().CoordinationV1().Leases(f.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range leases.Items {
		if !strings.HasPrefix(l.Name, "converge-shard-") {
			continue
		}
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
			if i := strings.LastIndexByte(holder, '_'); i > 0 {
				holder = holder[:i]
			}
		}
		out[l.Name] = holder
	}
	return out, nil
}

// waitSpread waits until the shard Leases are all held by live replicas, each holding at
// least what is left when the others hold their fair share, and returns the holders.
func (f *fleet) waitSpread() map[string]string {
	f.t.Helper()
	var holders map[string]string
	err := wait.PollUntilContextTimeout(f.t.Context(), 250*time.Millisecond, fleetWait, true, func(ctx context.Context) (bool, error) {
		f.checkRunning()
		now, err := f.shardHolders(ctx)
		if err != nil {
			return false, nil
		}
		holders = now
		if len(holders) != fleetShards {
			return false, nil
		}
		count := map[string]int{}
		for _, h := range holders {
			count[h]++
		}
		total := 0
		for _, r := range f.live() {
			// Replicas take up to ceil(shards / live) each, so the last may hold less.
			fair := (fleetShards + len(f.live()) - 1) / len(f.live())
			if count[r.name] < max(1, fleetShards-(len(f.live())-1)*fair) {
				return false, nil
			}
			total += count[r.name]
		}
		return total == fleetShards, nil
	})
	if err != nil {
		f.t.Fatalf("shard Leases not spread over %d live replicas within %s: %v", len(f.live()), fleetWait, holders)
	}
	return holders
}

// checkVersion checks every Sync's ConfigMaps are at data.version v.
func (f *fleet) checkVersion(v string) {
	f.t.Helper()
	want := map[string]string{}
	for i := range fleetSyncs {
		for j := range fleetObjects {
			want[fmt.Sprintf("%s-cm-%d", syncName(i), j)] = v
		}
	}
	checkLive(f.t, f.c, f.ns, want)
}

// live returns the replicas neither killed nor paused.
// checkRunning fails the test at once when a live replica has exited on its own (a replica
// the test did not kill, or paused past its deadline): it would otherwise count as live for
// ever, and the test fail later on a spread that can never happen, far from the cause.
func (f *fleet) checkRunning() {
	for _, r := range f.live() {
		select {
		case <-r.proc.Done():
			f.t.Fatalf("replica %s exited on its own (its output follows)", r.name)
		default:
		}
	}
}

func (f *fleet) live() []*replica {
	var out []*replica
	for _, r := range f.replicas {
		if !r.gone {
			out = append(out, r)
		}
	}
	return out
}

// gauge reads one unlabelled gauge of a replica's /metrics (-1 when absent).
func (r *replica) gauge(name string) (int, error) {
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			return int(v), err
		}
	}
	return -1, sc.Err()
}

// busiest returns the live replica owning the most Syncs (converge_syncs_owned), waiting
// until the live replicas together report every Sync.
func (f *fleet) busiest() *replica {
	f.t.Helper()
	var best *replica
	owned := map[string]int{}
	err := wait.PollUntilContextTimeout(f.t.Context(), 250*time.Millisecond, fleetWait, true, func(context.Context) (bool, error) {
		total := 0
		for _, r := range f.live() {
			n, err := r.gauge("converge_syncs_owned")
			if err != nil {
				return false, nil
			}
			owned[r.name] = n
			total += n
		}
		return total == fleetSyncs, nil
	})
	if err != nil {
		f.t.Fatalf("the live replicas do not report owning the %d Syncs (converge_syncs_owned): %v", fleetSyncs, owned)
	}
	for _, r := range f.live() {
		if best == nil || owned[r.name] > owned[best.name] {
			best = r
		}
	}
	f.t.Logf("Syncs owned: %v", owned)
	return best
}

// stopCheckers stops every checker and reports its violations.
func (f *fleet) stopCheckers() {
	f.t.Helper()
	for _, chk := range f.checkers {
		report, err := chk.Stop(f.t.Context())
		if err != nil {
			f.t.Errorf("checker: %v", err)
		}
		for _, v := range report.Violations {
			f.t.Errorf("checker: %s", v)
		}
	}
}

// syncOfWrite returns the Sync a write belongs to: the Sync itself (its status, its
// finalizer), its inventory <sync>-inventory or one of its ConfigMaps <sync>-cm-<i>.
func syncOfWrite(request string) string {
	_, path, _ := strings.Cut(request, " ")
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+1 < len(segs); i++ {
		switch segs[i] {
		case "syncs":
			return segs[i+1]
		case "configmaps":
			name := segs[i+1]
			for _, suffix := range []string{"-inventory", "-cm-"} {
				if j := strings.Index(name, suffix); j > 0 {
					return name[:j]
				}
			}
		}
	}
	return ""
}

// attributedWrite is a successful write of a Sync's objects or status, with the replica
// that sent it.
type attributedWrite struct {
	replica string
	fault.TimedWrite
}

// checkOneWriter checks that no Sync was written by two replicas at once (I1, I5): no two
// successful writes of one Sync's objects or status, sent by different replicas, overlap in
// time. It returns the writes by Sync, in the order they were sent, and logs each Sync's
// writers in turn.
func (f *fleet) checkOneWriter() map[string][]attributedWrite {
	f.t.Helper()
	bySync := map[string][]attributedWrite{}
	for _, r := range f.replicas {
		for _, w := range r.proxy.TimedWrites() {
			s := syncOfWrite(w.Request)
			if s == "" || !strings.HasPrefix(w.Result, "2") {
				continue
			}
			bySync[s] = append(bySync[s], attributedWrite{replica: r.name, TimedWrite: w})
		}
	}
	for s, ws := range bySync {
		sort.Slice(ws, func(i, j int) bool { return ws[i].Start.Before(ws[j].Start) })
		var turns []string
		for i, w := range ws {
			if len(turns) == 0 || turns[len(turns)-1] != w.replica {
				turns = append(turns, w.replica)
			}
			for _, o := range ws[:i] {
				if o.replica != w.replica && (o.End.IsZero() || o.End.After(w.Start)) {
					f.t.Errorf("Sync %s written by two replicas at once: %s sent %s at %s, before %s's %s (sent %s) was answered",
						s, w.replica, w.Request, w.Start.Format("15:04:05.000"), o.replica, o.Request, o.Start.Format("15:04:05.000"))
				}
			}
		}
		f.t.Logf("Sync %s: %d writes, by %s", s, len(ws), strings.Join(turns, " → "))
	}
	return bySync
}

// TestBinaryShardsKilledReplicaTakenOver: three replicas share eight Syncs; the one owning the
// most is killed with SIGKILL and a commit is published at once. Every Sync becomes Ready at
// the new commit (the killed replica's after the survivors take its shard Leases, within the
// lease duration and a reconcile: a bounded wait, no timing assert), the survivors hold every
// shard, no Sync is written by two replicas at once, and the checkers see no violation.
func TestBinaryShardsKilledReplicaTakenOver(t *testing.T) {
	f := newFleet(t)
	rev1 := f.publish("1")
	for _, n := range []string{"replica-a", "replica-b", "replica-c"} {
		f.start(n)
	}
	f.waitSpread()
	f.createSyncs()
	f.waitReady(rev1)

	victim := f.busiest()
	if err := victim.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	victim.gone = true
	killed := time.Now()
	rev2 := f.publish("2")
	f.waitReady(rev2)
	t.Logf("every Sync Ready at the commit published at the kill after %s (lease duration %s)", time.Since(killed).Round(time.Millisecond), fleetLease)
	holders := f.waitSpread()
	for lease, h := range holders {
		if h == victim.name {
			t.Errorf("shard Lease %s still held by the killed replica %s", lease, victim.name)
		}
	}
	f.checkVersion("2")
	f.checkOneWriter()
	f.stopCheckers()
}

// TestBinaryShardsRebalanceOnReplicaAdded: two replicas share eight Syncs; a third joins.
// The shard Leases rebalance (the new replica holds its share), a new commit becomes Ready on
// every Sync, the new replica wrote the Syncs of its shards, no Sync is written by two
// replicas at once, and the checkers see no violation.
func TestBinaryShardsRebalanceOnReplicaAdded(t *testing.T) {
	f := newFleet(t)
	rev1 := f.publish("1")
	f.start("replica-a")
	f.start("replica-b")
	f.waitSpread()
	f.createSyncs()
	f.waitReady(rev1)

	added := f.start("replica-c")
	holders := f.waitSpread()
	t.Logf("shard Leases after replica-c joined: %v", holders)
	rev2 := f.publish("2")
	f.waitReady(rev2)
	f.checkVersion("2")

	owned, err := added.gauge("converge_syncs_owned")
	if err != nil {
		t.Fatal(err)
	}
	writes := f.checkOneWriter()
	wrote := 0
	for _, ws := range writes {
		for _, w := range ws {
			if w.replica == added.name {
				wrote++
			}
		}
	}
	if owned > 0 && wrote == 0 {
		t.Errorf("replica-c owns %d Syncs but wrote none of them after a new commit", owned)
	}
	f.stopCheckers()
}

// TestBinaryShardsPausedReplicaFenced is S03 for a sharded replica: three replicas share
// eight Syncs; the one owning the most applies a commit slowly (its ConfigMap patches delayed
// at its proxy) and is paused with SIGSTOP in the middle of it, past its renew deadline. The
// others take its shards and make every Sync Ready at a later commit; then it resumes with
// the rest of its reconciles planned and its Lease reads slowed (it learns late that it lost
// its shards). No write of it may land after it resumes (it exits, fenced, or stays silent;
// Lease requests are allowed): none answered 2xx or left pending, and no ConfigMap changed
// or deleted meanwhile (a write the fence cut at the body never landed); a later commit
// still becomes Ready on every Sync, no Sync is written by two replicas at once, and the
// checkers see no violation (I1, I2, I5).
func TestBinaryShardsPausedReplicaFenced(t *testing.T) {
	f := newFleet(t)
	rev1 := f.publish("1")
	for _, n := range []string{"replica-a", "replica-b", "replica-c"} {
		f.start(n)
	}
	f.waitSpread()
	f.createSyncs()
	f.waitReady(rev1)

	paused := f.busiest()
	paused.proxy.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Latency: 300 * time.Millisecond})
	sent := len(paused.proxy.TimedWrites())
	f.publish("2")
	err := wait.PollUntilContextTimeout(t.Context(), 20*time.Millisecond, fleetWait, true, func(context.Context) (bool, error) {
		n := 0
		for _, w := range paused.proxy.TimedWrites()[sent:] {
			if strings.Contains(w.Request, "/configmaps/") && strings.Contains(w.Request, "-cm-") {
				n++
			}
		}
		return n >= 2, nil
	})
	if err != nil {
		t.Fatalf("never caught %s applying the second commit", paused.name)
	}
	if err := paused.proc.Pause(); err != nil {
		t.Fatal(err)
	}
	paused.gone = true
	rev3 := f.publish("3")
	f.waitReady(rev3) // the others took its shards
	f.waitSpread()

	mark := len(paused.proxy.TimedWrites()) // its writes before the pause stay for checkOneWriter
	paused.proxy.SetRules(fault.Rule{Resource: "leases", Latency: 3 * time.Second})
	before := configMapVersions(t.Context(), t, f.c, f.ns) // the others converged: they write nothing more (I7)
	if err := paused.proc.Resume(); err != nil {
		t.Fatal(err)
	}
	exited := false
	select {
	case <-paused.proc.Done():
		exited = true
	case <-time.After(4 * fleetLease): // long enough for a stale worker to write
	}
	// A write counts if it landed or may land yet; one the fence cut at the body never
	// landed (landed logs it), and the API server's resourceVersions say whether any
	// committed all the same.
	leases := func(req string) bool { return strings.Contains(req, "/leases/") }
	if w := landed(t, paused.proxy, landedOptions{From: mark, Ignore: leases}); len(w) != 0 {
		t.Errorf("writes of the paused replica %s landed after it resumed (exited: %v): %v", paused.name, exited, w)
	}
	unchangedConfigMaps(t.Context(), t, f.c, f.ns, before)
	t.Logf("the paused replica exited after resuming: %v", exited)
	f.waitReady(rev3)
	f.checkVersion("3")
	rev4 := f.publish("4")
	f.waitReady(rev4)
	f.checkVersion("4")
	f.checkOneWriter()
	f.stopCheckers()
}

// TestBinaryShardsReplicaRecoversFromAPIErrors: two replicas share eight Syncs; the API
// server answers every request of the one owning the most with 503 for twice its renew
// deadline, so it loses its shard Leases (or at least stops writing under them). Once the
// errors stop, a new commit must become Ready on every Sync: whichever replica holds a shard
// now reconciles its Syncs (the two-replica fault sweep, seeds 1 and 2).
func TestBinaryShardsReplicaRecoversFromAPIErrors(t *testing.T) {
	f := newFleet(t)
	rev1 := f.publish("1")
	f.start("replica-a")
	f.start("replica-b")
	f.waitSpread()
	f.createSyncs()
	f.waitReady(rev1)

	failing := f.busiest()
	failing.proxy.SetRules(fault.Rule{Status: http.StatusServiceUnavailable, For: 2 * fleetRenew})
	time.Sleep(2*fleetRenew + time.Second) // the fault's length, not a timing assertion
	rev2 := f.publish("2")
	f.waitReady(rev2)
	f.checkVersion("2")
	f.waitSpread()
	f.checkOneWriter()
	f.stopCheckers()
}
