package main

// The scale scenario (-daemon -scale): -syncs Syncs sharing -objects objects, reconciled by 1
// and then by 3 replicas of `converge run --sharding=auto`. For each replica count
// it measures the time from creating the Syncs until all are Ready, the requests of every
// replica (and of all of them at the API server) over two quiet intervals, each replica's
// peak RSS, where the CPU went during the cold start (replicas against the control plane),
// and with more than one replica the recovery from a replica killed with SIGKILL.
// See docs/benchmarks.md.

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// scaleBench is the state of one run of the scale scenario.
type scaleBench struct {
	*daemonBench
	serverPids []int
	server     *http.Client // reads the API server's /metrics
	host       string
	src        string // the published workload, for the recovery commit
	publishTo  func(msg string) (string, error)
	commits    int
}

// runScaleBench starts the control plane and a git server holding the workload, then runs
// the scale scenario once per replica count of -replicas, each with fresh daemons.
func runScaleBench(ctx context.Context, f flags) error {
	if f.full {
		return fmt.Errorf("-daemon -scale runs on the API profile only: -full is not supported")
	}
	counts, err := splitInts(f.replicas)
	if err != nil || len(counts) == 0 {
		return fmt.Errorf("-replicas %q: want comma-separated counts such as 1,3", f.replicas)
	}
	for _, n := range counts {
		if n < 1 {
			return fmt.Errorf("-replicas %q: every count must be at least 1", f.replicas)
		}
	}
	if f.tenants < 1 || f.concurrent < 1 || f.interval <= 0 {
		return fmt.Errorf("need -syncs ≥ 1, -concurrent ≥ 1 and -interval > 0")
	}
	ctrllog.SetLogger(logr.Discard()) // the harness's own clients
	work, err := generateDaemon(f.objects, f.tenants, daemonWorkloadOptions{})
	if err != nil {
		return err
	}
	rep := &ScaleReport{Objects: f.objects, Syncs: f.tenants, Profile: string(cluster.API), Concurrent: f.concurrent,
		Sharding: f.sharding, ShardsFlag: f.shards, Leases: leaseTimings(f), IntervalSeconds: f.interval.Seconds(), SettleSeconds: f.settle.Seconds(),
		Machine: machine()}
	db, c, done, err := startDaemonBench(ctx, f, work, &rep.Machine, "converge-bench-scale-")
	if err != nil {
		return err
	}
	defer done()
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		return err
	}
	b := &scaleBench{daemonBench: db, serverPids: c.Pids(), server: hc, host: c.Config.Host}
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return err
	}
	srv, err := b.publish(filepath.Join(db.tmp, "git"))
	if err != nil {
		return err
	}
	defer srv.Close()
	b.src = filepath.Join(db.tmp, "workload")
	b.publishTo = func(msg string) (string, error) { return srv.Publish("bench", "main", b.src, msg) }

	specs := make([]syncSpec, len(work.Tenants))
	for t := range work.Tenants {
		specs[t] = syncSpec{name: "bench-" + tenantName(t, len(work.Tenants)), path: work.tenantPath(t)}
	}
	for i, n := range counts {
		row, err := b.measure(ctx, n, specs, i < len(counts)-1)
		if err != nil {
			return fmt.Errorf("%d replicas: %w", n, err)
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Date = time.Now().UTC().Format(time.RFC3339)
	rep.Machine.LoadAvgEnd = loadAvg()
	return rep.emit(os.Stdout, f.output, f.jsonFile)
}

// leaseTimings describes the replicas' lease timings, as given by the flags.
func leaseTimings(f flags) string {
	if f.leaseDuration == 0 && f.renewDeadline == 0 && f.retryPeriod == 0 {
		return "default (15s / 10s / 2s)"
	}
	d := func(d time.Duration) string {
		if d == 0 {
			return "default"
		}
		return d.String()
	}
	return d(f.leaseDuration) + " / " + d(f.renewDeadline) + " / " + d(f.retryPeriod)
}

// replicaName names the i-th replica (--replica-name).
func replicaName(i int) string { return "r" + strconv.Itoa(i) }

// startReplicas starts n daemons with the sharding flags, one after the other.
func (b *scaleBench) startReplicas(ctx context.Context, n int) ([]*daemon, error) {
	var ds []*daemon
	for i := range n {
		args := []string{"--replica-name", replicaName(i), "--leader-election-namespace", syncNamespace}
		if b.f.sharding != "" && b.f.sharding != "off" {
			args = append(args, "--sharding", b.f.sharding)
		}
		if b.f.shards > 0 {
			args = append(args, "--shards", strconv.Itoa(b.f.shards))
		}
		for _, t := range []struct {
			flag string
			d    time.Duration
		}{{"--leader-election-lease-duration", b.f.leaseDuration}, {"--leader-election-renew-deadline", b.f.renewDeadline},
			{"--leader-election-retry-period", b.f.retryPeriod}} {
			if t.d > 0 {
				args = append(args, t.flag, t.d.String())
			}
		}
		d, err := startDaemon(ctx, daemonOptions{bin: b.bin, kubeconfig: b.kubeconfig, concurrent: b.f.concurrent, electLeader: true, args: args,
			logFile:  filepath.Join(b.logDir, fmt.Sprintf("scale-%d-%s.log", n, replicaName(i))),
			cacheDir: filepath.Join(b.tmp, fmt.Sprintf("git-cache-%d-%d", n, i))})
		if err != nil {
			stopAll(ds)
			return nil, fmt.Errorf("replica %s: %w", replicaName(i), err)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// stopAll interrupts every daemon still running and waits for each.
func stopAll(ds []*daemon) {
	for _, d := range ds {
		if err := d.stop(); err != nil {
			log.Printf("%s", err)
		}
	}
}

// scrapeAll reads the metrics of every daemon that is still running (nil for the others).
func scrapeAll(ctx context.Context, ds []*daemon) ([]*daemonMetrics, error) {
	out := make([]*daemonMetrics, len(ds))
	for i, d := range ds {
		select {
		case <-d.done:
			continue
		default:
		}
		m, err := d.scrape(ctx)
		if err != nil {
			return nil, fmt.Errorf("replica %s: %w", replicaName(i), err)
		}
		out[i] = &m
	}
	return out, nil
}

// shardsSpread reports whether the live replicas hold every shard between them and each at
// least minShare. Without sharding metrics (--sharding=off) it reports true.
func shardsSpread(ms []*daemonMetrics) (bool, string) {
	total, held, live, least := -1, 0, 0, -1
	var parts []string
	for i, m := range ms {
		if m == nil {
			continue
		}
		if m.Shards < 0 || m.ShardsHeld < 0 {
			return true, "not sharded"
		}
		live++
		total = m.Shards
		held += m.ShardsHeld
		if least < 0 || m.ShardsHeld < least {
			least = m.ShardsHeld
		}
		parts = append(parts, fmt.Sprintf("%s=%d", replicaName(i), m.ShardsHeld))
	}
	desc := strings.Join(parts, " ")
	if live == 0 {
		return false, "no replica"
	}
	return held == total && least >= minShare(total, live), desc
}

// minShare is the fewest shards a live replica holds once the shards are spread: replicas
// take up to their fair share, ceil(shards / live), so the last one may hold less.
func minShare(shards, live int) int {
	fair := (shards + live - 1) / live
	return max(1, shards-(live-1)*fair)
}

// waitShards waits until the live replicas spread the shards between them (shardsSpread),
// returning how long that took and the spread; a timeout is logged, not fatal: the report
// shows the spread it ended with.
func (b *scaleBench) waitShards(ctx context.Context, ds []*daemon, timeout time.Duration) (time.Duration, string) {
	start := time.Now()
	desc := ""
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ms, err := scrapeAll(ctx, ds)
		if err != nil {
			return false, nil
		}
		var ok bool
		ok, desc = shardsSpread(ms)
		return ok, nil
	})
	if err != nil {
		log.Printf("shards not spread over the replicas after %s: %s", timeout, desc)
	}
	return time.Since(start), desc
}

// waitBase makes sure the base Sync is Ready at the revision and one of the replicas has
// reconciled it successfully, so that the start-up work is done before the clock starts.
func (b *scaleBench) waitBase(ctx context.Context, ds []*daemon) error {
	if err := ensureBaseSync(ctx, b.syncs, b.template()); err != nil {
		return fmt.Errorf("base Sync: %w", err)
	}
	sw, err := openSyncWatch(ctx, b.syncs, []string{baseSyncName}, b.revision, time.Now())
	if err != nil {
		return err
	}
	if err := sw.wait(ctx, b.timeout()); err != nil {
		return fmt.Errorf("base Sync: %w (daemon logs in %s)", err, b.logDir)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, b.timeout(), true, func(ctx context.Context) (bool, error) {
		ms, err := scrapeAll(ctx, ds)
		if err != nil {
			return false, nil
		}
		for _, m := range ms {
			if m != nil && m.Reconciles[baseSyncName]-m.Unsuccessful[baseSyncName] > 0 {
				return true, nil
			}
		}
		return false, nil
	})
}

// cpuOf returns the CPU seconds used so far by each daemon and by the control plane.
func (b *scaleBench) cpuOf(ds []*daemon) ([]float64, float64) {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = readCPU([]int{d.pid()}).ServerSeconds // of pid, despite the name
	}
	return out, readCPU(b.serverPids).ServerSeconds
}

// measure runs the scenario on n fresh replicas: shards spread, base Sync reconciled, Syncs
// created and timed until all are Ready, two quiet intervals, memory, with n > 1 a replica
// killed, then the Syncs deleted, the replicas stopped and the tenants swept.
func (b *scaleBench) measure(ctx context.Context, n int, specs []syncSpec, settle bool) (ScaleRow, error) {
	row := ScaleRow{Replicas: n}
	start := time.Now()
	ds, err := b.startReplicas(ctx, n)
	if err != nil {
		return row, err
	}
	defer stopAll(ds)
	if b.syncs == nil { // the Sync CRD exists once the first daemon is ready
		if b.syncs, err = newSyncClient(b.cfg); err != nil {
			return row, err
		}
	}
	took, spread := b.waitShards(ctx, ds, 2*time.Minute)
	row.ShardsSpreadSeconds, row.ShardsAtStart = time.Since(start).Seconds(), spread
	log.Printf("%d replicas: ready and shards spread in %.1fs (%.1fs waiting): %s", n, row.ShardsSpreadSeconds, took.Seconds(), spread)
	if err := b.waitBase(ctx, ds); err != nil {
		return row, err
	}

	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.name
	}
	before, err := scrapeAll(ctx, ds)
	if err != nil {
		return row, err
	}
	serverBefore, err := scrapeServerRequests(ctx, b.server, b.host)
	if err != nil {
		return row, err
	}
	cpuBefore, serverCPUBefore := b.cpuOf(ds)
	created := time.Now()
	sw, err := openSyncWatch(ctx, b.syncs, names, b.revision, created)
	if err != nil {
		return row, err
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sw.wait(waitCtx, b.timeout()) }()
	if err := createSyncs(ctx, b.syncs, specs, b.template()); err != nil {
		cancel()
		<-done
		return row, err
	}
	row.CreateSeconds = time.Since(created).Seconds()
	if err := <-done; err != nil {
		return row, fmt.Errorf("%w (daemon logs in %s)", err, b.logDir)
	}
	ready := sw.readySeconds()
	row.WallSeconds, row.Ready = ready[len(ready)-1], newSpread(ready)
	for _, nm := range names {
		if msg := sw.failed[nm]; msg != "" && len(row.Failures) < 5 {
			row.Failures = append(row.Failures, nm+": "+msg)
		}
	}
	cpuAfter, serverCPUAfter := b.cpuOf(ds)
	readyMetrics, err := scrapeAll(ctx, ds)
	if err != nil {
		return row, err
	}
	serverReady, err := scrapeServerRequests(ctx, b.server, b.host)
	if err != nil {
		return row, err
	}
	readyAt := time.Now()
	row.ColdStartServer = serverReady.since(serverBefore, readyAt.Sub(created))
	row.ServerCPUSeconds = serverCPUAfter - serverCPUBefore
	row.Replica = make([]ReplicaRow, n)
	for i := range ds {
		row.Replica[i] = ReplicaRow{Name: replicaName(i), CPUSeconds: cpuAfter[i] - cpuBefore[i],
			ColdStart: window(*before[i], *readyMetrics[i], readyAt.Sub(created))}
	}
	log.Printf("%d replicas: all %d Syncs Ready in %.1fs (created in %.1fs); CPU: replicas %s s, control plane %.1f s",
		n, len(specs), row.WallSeconds, row.CreateSeconds, row.replicaCPU(), row.ServerCPUSeconds)

	// Two quiet intervals: the first holds each Sync's first no-op reconcile, the second is
	// the steady state.
	mid, serverMid, midAt, err := b.quietScrape(ctx, ds, b.f.interval)
	if err != nil {
		return row, err
	}
	end, serverEnd, endAt, err := b.quietScrape(ctx, ds, b.f.interval)
	if err != nil {
		return row, err
	}
	row.IdleServer = serverEnd.since(serverMid, endAt.Sub(midAt))
	for i, d := range ds {
		r := &row.Replica[i]
		r.FirstInterval = window(*readyMetrics[i], *mid[i], midAt.Sub(readyAt))
		r.SecondInterval = window(*mid[i], *end[i], endAt.Sub(midAt))
		r.ShardsHeld, r.SyncsOwned = end[i].ShardsHeld, end[i].SyncsOwned
		for _, s := range specs {
			row.Unsuccessful += end[i].Unsuccessful[s.name]
		}
		if r.Memory, err = readProcMemory(d.pid()); err != nil {
			return row, err
		}
		// After the peak RSS is read: the profile's collection (gc=1) does not lower VmHWM.
		if err := d.saveHeapProfile(ctx, fmt.Sprintf("scale-%d-%s.heap.pprof", n, replicaName(i))); err != nil {
			return row, fmt.Errorf("replica %s: heap profile: %w", replicaName(i), err)
		}
	}
	log.Printf("%d replicas: quiet interval: %s; at the API server %d requests (%s; most: %s) and %d to Leases in %.0fs",
		n, row.idleSummary(), row.IdleServer.Requests.Total(), row.IdleServer.Requests, row.IdleServer.topResources(8),
		row.IdleServer.Leases, row.IdleServer.Seconds)

	if n > 1 {
		rec, err := b.recover(ctx, ds, end, names)
		if err != nil {
			return row, err
		}
		row.Recovery = rec
	}

	del := time.Now()
	if err := deleteSyncs(ctx, b.syncs, specs, b.timeout()); err != nil {
		return row, fmt.Errorf("%w (daemon logs in %s)", err, b.logDir)
	}
	row.DeleteSeconds = time.Since(del).Seconds()
	log.Printf("%d replicas: Syncs deleted with their objects in %.1fs", n, row.DeleteSeconds)
	stopAll(ds)
	for i, d := range ds {
		r := &row.Replica[i]
		r.Log = d.logPath
		if r.LogErrors, r.LogSample, err = logErrors(d.logPath); err != nil {
			return row, err
		}
	}
	namespaces := make([]string, len(b.work.Tenants))
	for t := range b.work.Tenants {
		namespaces[t] = tenantNamespace(t, len(b.work.Tenants))
	}
	if row.Leftover, err = b.admin.sweepTenants(ctx, namespaces, b.timeout()); err != nil {
		return row, err
	}
	if settle {
		return row, pause(ctx, b.f.settle)
	}
	return row, nil
}

// quietScrape waits d and then reads every replica's metrics and the API server's counts.
func (b *scaleBench) quietScrape(ctx context.Context, ds []*daemon, d time.Duration) ([]*daemonMetrics, serverRequests, time.Time, error) {
	if err := pause(ctx, d); err != nil {
		return nil, serverRequests{}, time.Time{}, err
	}
	ms, err := scrapeAll(ctx, ds)
	if err != nil {
		return nil, serverRequests{}, time.Time{}, err
	}
	s, err := scrapeServerRequests(ctx, b.server, b.host)
	return ms, s, time.Now(), err
}

// victim is the replica the recovery kills: the one owning the most Syncs (with sharding),
// else the one that reconciled the most (the leader, without sharding).
func victim(ms []*daemonMetrics) int {
	best, score := 0, -1
	for i, m := range ms {
		s := m.SyncsOwned
		if s < 0 {
			s = m.reconciles()
		}
		if s > score {
			best, score = i, s
		}
	}
	return best
}

// recover kills one replica with SIGKILL and, at once, publishes a commit (a file outside
// every Sync's path) and asks every Sync for a reconcile (converge.dev/requestedAt). It times
// how long the survivors take to hold every shard, and until every Sync is Ready at the new
// commit: the killed replica's Syncs can only get there once a survivor took their shard.
func (b *scaleBench) recover(ctx context.Context, ds []*daemon, ms []*daemonMetrics, names []string) (*Recovery, error) {
	k := victim(ms)
	rec := &Recovery{Killed: replicaName(k), KilledShards: ms[k].ShardsHeld, KilledSyncs: ms[k].SyncsOwned}
	b.commits++
	readme := fmt.Sprintf("recovery commit %d\n", b.commits)
	if err := os.WriteFile(filepath.Join(b.src, "README.md"), []byte(readme), 0o644); err != nil {
		return nil, err
	}
	before, err := scrapeAll(ctx, ds)
	if err != nil {
		return nil, err
	}
	if err := ds[k].cmd.Process.Kill(); err != nil {
		return nil, err
	}
	<-ds[k].done
	killed := time.Now()
	sha, err := b.publishTo(strings.TrimSpace(readme))
	if err != nil {
		return nil, err
	}
	b.revision = "main@sha1:" + sha
	sw, err := openSyncWatch(ctx, b.syncs, names, b.revision, killed)
	if err != nil {
		return nil, err
	}
	// The survivors' shards, followed while the Syncs recover.
	takeover := make(chan time.Duration, 1)
	pollCtx, stopPoll := context.WithCancel(ctx)
	defer stopPoll()
	go func() {
		if ms[k].Shards < 0 { // not sharded: nothing to take over but the leader Lease
			close(takeover)
			return
		}
		err := wait.PollUntilContextCancel(pollCtx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			ms, err := scrapeAll(ctx, ds)
			if err != nil {
				return false, nil
			}
			ok, _ := shardsSpread(ms)
			return ok, nil
		})
		if err == nil {
			takeover <- time.Since(killed)
		}
		close(takeover)
	}()
	if err := requestReconciles(ctx, b.syncs, names); err != nil {
		return nil, err
	}
	rec.BumpSeconds = time.Since(killed).Seconds()
	if err := sw.wait(ctx, b.timeout()); err != nil {
		return nil, fmt.Errorf("recovery: %w (daemon logs in %s)", err, b.logDir)
	}
	ready := sw.readySeconds()
	rec.AllReadySeconds, rec.Ready = ready[len(ready)-1], newSpread(ready)
	select {
	case d, ok := <-takeover:
		if ok {
			rec.TakeoverSeconds = d.Seconds()
		}
	case <-time.After(30 * time.Second):
	}
	after, err := scrapeAll(ctx, ds)
	if err != nil {
		return nil, err
	}
	for i := range ds {
		if i == k {
			continue
		}
		rec.Survivors = append(rec.Survivors, SurvivorRow{Name: replicaName(i), ShardsHeld: after[i].ShardsHeld, SyncsOwned: after[i].SyncsOwned,
			Window: window(*before[i], *after[i], time.Since(killed))})
	}
	log.Printf("recovery: %s killed (%d shards, %d Syncs); survivors hold every shard after %.1fs; every Sync Ready at the new commit after %.1fs (requests sent in %.1fs; first %.1fs, median %.1fs)",
		rec.Killed, rec.KilledShards, rec.KilledSyncs, rec.TakeoverSeconds, rec.AllReadySeconds, rec.BumpSeconds, rec.Ready.First, rec.Ready.Median)
	return rec, nil
}

// requestReconciles sets converge.dev/requestedAt on every Sync, createParallelism at a time.
func requestReconciles(ctx context.Context, c client.Client, names []string) error {
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(createParallelism)
	for _, n := range names {
		g.Go(func() error {
			_, patch, err := v1alpha1.ReconcileRequest("", time.Now())
			if err != nil {
				return err
			}
			s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: syncNamespace, Name: n}}
			if err := c.Patch(ctx, s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
				return fmt.Errorf("request a reconcile of Sync %s: %w", n, err)
			}
			return nil
		})
	}
	return g.Wait()
}
