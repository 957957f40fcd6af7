package main

// The daemon mode (-daemon): the built `converge run` against the local control plane and a
// local git server, measuring the "100 Syncs × 100 objects, one daemon" target.
// See docs/benchmarks.md.

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
)

// daemonBench is the state of one run of the daemon mode.
type daemonBench struct {
	f          flags
	bin        string
	kubeconfig string
	cfg        *rest.Config // the admin config
	admin      *admin
	syncs      client.WithWatch
	work       daemonWorkload
	repoURL    string
	revision   string
	tmp        string // git caches of the daemons
	logDir     string
	srv        *gitserver.Server
	// full is false after a -prune step committed the pruned workload: the next scenario
	// commits the whole workload again first.
	full bool
	// chart: the repository also holds the chart of the tenant objects (chart.go), for
	// the chart scenario.
	chart bool
}

// daemonScenario is one way of splitting the workload into Syncs.
type daemonScenario struct {
	name  string
	specs []syncSpec
	// file names the scenario in the names of its daemons' logs, heap profiles and git
	// caches: "<S>-syncs", or "chart".
	file string
}

// fileName is the scenario's file name for run (from 0) with suffix: each daemon its own.
func (sc daemonScenario) fileName(prefix string, run int, suffix string) string {
	file := sc.file
	if file == "" {
		file = fmt.Sprintf("%d-syncs", len(sc.specs))
	}
	return fmt.Sprintf("%s-%d-%s%s", prefix, run+1, file, suffix)
}

// runDaemonBench starts the control plane and a git server holding the generated workload,
// builds converge, and measures the scenarios -runs times each, alternating, each with a
// fresh daemon.
func runDaemonBench(ctx context.Context, f flags) error {
	if f.full {
		return fmt.Errorf("-daemon runs on the API profile only: -full is not supported")
	}
	if f.runs < 1 || f.tenants < 1 || f.concurrent < 1 || f.interval <= 0 {
		return fmt.Errorf("need -runs ≥ 1, -syncs ≥ 1, -concurrent ≥ 1 and -interval > 0")
	}
	wanted, err := parseScenarios(f.scenarios)
	if err != nil {
		return err
	}
	if f.prune < 0 || f.prune >= 1 {
		return fmt.Errorf("-prune %g: want a fraction from 0 (no prune step) to below 1", f.prune)
	}
	mix, err := parseMix(f.mix)
	if err != nil {
		return err
	}
	work, err := generateDaemon(f.objects, f.tenants, daemonWorkloadOptions{Parity: f.parity, Mix: mix})
	if err != nil {
		return err
	}
	rep := &DaemonReport{Objects: f.objects, Tenants: f.tenants, Runs: f.runs, Profile: string(cluster.API),
		Concurrent: f.concurrent, Parity: f.parity, Day2: f.day2, Mix: mix.String(), Prune: f.prune, GoMemLimit: f.memLimit,
		IntervalSeconds: f.interval.Seconds(), SettleSeconds: f.settle.Seconds(), Machine: machine()}
	b, _, done, err := startDaemonBench(ctx, f, work, &rep.Machine, "converge-bench-daemon-")
	if err != nil {
		return err
	}
	defer done()
	tmp := b.tmp
	b.chart = slices.Contains(wanted, scenarioChart)
	if err := os.MkdirAll(b.logDir, 0o755); err != nil {
		return err
	}
	if b.srv, err = b.publish(filepath.Join(tmp, "git")); err != nil {
		return err
	}
	defer b.srv.Close()

	scenarios := b.scenarios(wanted)
	samples := make([][]DaemonSample, len(scenarios))
	for run := range f.runs {
		for i, sc := range scenarios {
			last := run == f.runs-1 && i == len(scenarios)-1
			s, err := b.measure(ctx, sc, run, !last)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", sc.name, run+1, err)
			}
			samples[i] = append(samples[i], s)
		}
	}
	for i, sc := range scenarios {
		rep.Rows = append(rep.Rows, medianDaemonRow(sc.name, work.tenantObjects(), len(sc.specs), samples[i]))
	}
	rep.Ratio = manyOverOne(rep.Rows)
	rep.Date = time.Now().UTC().Format(time.RFC3339)
	rep.Machine.LoadAvgEnd = loadAvg()
	return rep.emit(os.Stdout, f.output, f.jsonFile)
}

// publish writes the workload, serves it from a git server under root and records the
// repository URL and the revision the daemon will report.
func (b *daemonBench) publish(root string) (*gitserver.Server, error) {
	src := filepath.Join(b.tmp, "workload")
	if err := b.writeSource(src, b.work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	srv, err := gitserver.Start(root, "")
	if err != nil {
		return nil, err
	}
	sha, err := srv.Publish("bench", "main", src, "bench workload")
	if err != nil {
		srv.Close()
		return nil, err
	}
	b.repoURL, b.revision, b.full = srv.RepoURL("bench"), "main@sha1:"+sha, true
	log.Printf("git server %s: %d objects at %s", b.repoURL, b.f.objects, b.revision)
	return srv, nil
}

// The scenarios of -scenarios: one Sync of every tenant object (the parent folder), one
// Sync per tenant folder, and one Sync rendering the chart of every tenant object.
const (
	scenarioOne   = "one"
	scenarioMany  = "many"
	scenarioChart = "chart"
)

// parseScenarios reads -scenarios: a comma-separated list of one, many and chart, in
// that order whatever the order given; both is one,many.
func parseScenarios(s string) ([]string, error) {
	want := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		switch part = strings.TrimSpace(part); part {
		case scenarioOne, scenarioMany, scenarioChart:
			want[part] = true
		case "both":
			want[scenarioOne], want[scenarioMany] = true, true
		default:
			return nil, fmt.Errorf("-scenarios %q: %q is not one of one, many, chart, both", s, part)
		}
	}
	var out []string
	for _, sc := range []string{scenarioOne, scenarioMany, scenarioChart} {
		if want[sc] {
			out = append(out, sc)
		}
	}
	return out, nil
}

// scenarios returns the wanted scenarios (parseScenarios), in that order.
func (b *daemonBench) scenarios(wanted []string) []daemonScenario {
	tenants := make([]syncSpec, len(b.work.Tenants))
	for t := range b.work.Tenants {
		tenants[t] = syncSpec{name: "bench-" + tenantName(t, len(b.work.Tenants)), path: b.work.tenantPath(t)}
	}
	all := map[string]daemonScenario{
		scenarioOne:   {name: oneSyncScenario, specs: []syncSpec{{name: "bench-all", path: syncsFolder}}},
		scenarioMany:  {name: strconv.Itoa(len(tenants)) + " Syncs", specs: tenants},
		scenarioChart: {name: "one Sync, chart", specs: []syncSpec{{name: chartSyncName, path: chartFolder, chart: true}}, file: "chart"},
	}
	out := make([]daemonScenario, len(wanted))
	for i, w := range wanted {
		out[i] = all[w]
	}
	return out
}

// oneSyncScenario names the single Sync of every tenant object from plain YAML.
const oneSyncScenario = "one Sync"

// manyOverOne is the many-Syncs scenario's median wall time over the single Sync's, or 0
// without both.
func manyOverOne(rows []DaemonRow) float64 {
	var one, many float64
	for _, r := range rows {
		switch {
		case r.Scenario == oneSyncScenario:
			one = r.WallSeconds
		case r.Syncs > 1:
			many = r.WallSeconds
		}
	}
	if one <= 0 || many <= 0 {
		return 0
	}
	return many / one
}

// writeSource writes the repository's files for w under dir: the workload, and the chart
// of its tenant objects when the chart scenario runs.
func (b *daemonBench) writeSource(dir string, w daemonWorkload) error {
	if err := w.write(dir); err != nil {
		return err
	}
	if !b.chart {
		return nil
	}
	return writeChart(filepath.Join(dir, chartFolder), w, b.f.parity)
}

// template is what the run's Syncs share.
func (b *daemonBench) template() syncTemplate {
	return syncTemplate{repoURL: b.repoURL, interval: b.f.interval, parity: b.f.parity, day2: b.f.day2}
}

// timeout bounds every wait of a scenario: generous, the timings are printed, not asserted.
func (b *daemonBench) timeout() time.Duration {
	return 2*time.Minute + time.Duration(b.f.objects)*100*time.Millisecond
}

// measure runs one scenario with a fresh daemon: the base Sync reconciled, the Syncs
// created and timed until all are Ready, two quiet intervals counted, peak RSS read, the
// Syncs deleted and timed until gone; then the daemon is stopped and, with settle, the
// benchmark waits out the API server's namespace live-lookup window.
func (b *daemonBench) measure(ctx context.Context, sc daemonScenario, run int, settle bool) (DaemonSample, error) {
	var s DaemonSample
	if !b.full { // the last scenario's -prune step committed the pruned workload
		revision, err := b.commit(b.work, "bench workload")
		if err != nil {
			return s, err
		}
		b.revision, b.full = revision, true
	}
	s.Log = filepath.Join(b.logDir, sc.fileName("daemon", run, ".log"))
	d, err := startDaemon(ctx, daemonOptions{bin: b.bin, kubeconfig: b.kubeconfig, concurrent: b.f.concurrent,
		logFile: s.Log, memLimit: b.f.memLimit, cacheDir: filepath.Join(b.tmp, sc.fileName("git-cache", run, ""))})
	if err != nil {
		return s, err
	}
	defer func() { _ = d.stop() }()
	s.DaemonReadySeconds = d.readyAfterS
	if b.syncs == nil { // the Sync CRD exists once the first daemon is ready
		if b.syncs, err = newSyncClient(b.cfg); err != nil {
			return s, err
		}
	}
	if err := b.waitBase(ctx, d); err != nil {
		return s, err
	}
	ready, readyAt, err := b.coldStart(ctx, d, sc, &s)
	if err != nil {
		return s, err
	}
	log.Printf("%-10s run %d: all %d Syncs Ready in %6.2fs (created in %.2fs), %d requests (%s); %d reconciles, Σ %.1fs, fetch and render Σ %.1fs",
		sc.name, run+1, len(sc.specs), s.WallSeconds, s.CreateSeconds, s.ColdStart.Requests.Total(), s.ColdStart.Requests,
		s.ColdStart.Reconciles, s.ColdStart.ReconcileSeconds, s.ColdStart.LoadSeconds)
	if err := b.quiet(ctx, d, sc, ready, readyAt, &s); err != nil {
		return s, err
	}
	if err := d.saveHeapProfile(ctx, sc.fileName("daemon", run, ".heap.pprof")); err != nil {
		return s, err
	}
	log.Printf("%-10s run %d: intervals after Ready: %d reconciles, %d requests (%s); then %d reconciles, %d requests (%s); %s; %s",
		sc.name, run+1, s.FirstInterval.Reconciles, s.FirstInterval.Requests.Total(), s.FirstInterval.Requests,
		s.SecondInterval.Reconciles, s.SecondInterval.Requests.Total(), s.SecondInterval.Requests, s.Memory, s.Go)
	if b.f.prune > 0 {
		b.full = false
		if s.Prune, err = b.pruneStep(ctx, d, sc, run); err != nil {
			return s, err
		}
	}

	del := time.Now()
	if err := deleteSyncs(ctx, b.syncs, sc.specs, b.timeout()); err != nil {
		return s, fmt.Errorf("%w (daemon log %s)", err, s.Log)
	}
	s.DeleteSeconds = time.Since(del).Seconds()
	log.Printf("%-10s run %d: Syncs deleted with their objects in %.2fs", sc.name, run+1, s.DeleteSeconds)
	if err := d.stop(); err != nil {
		log.Printf("%s", err)
	}
	if s.LogErrors, s.LogSample, err = logErrors(s.Log); err != nil {
		return s, err
	}
	namespaces := make([]string, len(b.work.Tenants))
	for t := range b.work.Tenants {
		namespaces[t] = tenantNamespace(t, len(b.work.Tenants))
	}
	if s.Leftover, err = b.admin.sweepTenants(ctx, namespaces, b.timeout()); err != nil {
		return s, err
	}
	if settle {
		return s, pause(ctx, b.f.settle)
	}
	return s, nil
}

// coldStart creates the Syncs of sc and waits until all are Ready at the revision, filling
// the cold-start figures of s. It returns the daemon's metrics right after, and when.
func (b *daemonBench) coldStart(ctx context.Context, d *daemon, sc daemonScenario, s *DaemonSample) (daemonMetrics, time.Time, error) {
	names := make([]string, len(sc.specs))
	for i, spec := range sc.specs {
		names[i] = spec.name
	}
	before, err := d.scrape(ctx)
	if err != nil {
		return before, time.Time{}, err
	}
	start := time.Now()
	sw, err := openSyncWatch(ctx, b.syncs, names, b.revision, start)
	if err != nil {
		return before, start, err
	}
	// Consume the watch while creating, so that each Sync's ready time is when it was
	// reported, not when the creation ended.
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- sw.wait(waitCtx, b.timeout()) }()
	if err := createSyncs(ctx, b.syncs, sc.specs, b.template()); err != nil {
		cancel()
		<-done
		return before, start, err
	}
	s.CreateSeconds = time.Since(start).Seconds()
	if err := <-done; err != nil {
		return before, start, fmt.Errorf("%w (daemon log %s)", err, s.Log)
	}
	s.SyncReadySeconds = sw.readySeconds()
	s.WallSeconds = s.SyncReadySeconds[len(s.SyncReadySeconds)-1]
	for _, n := range names {
		if msg := sw.failed[n]; msg != "" && len(s.Failures) < 5 {
			s.Failures = append(s.Failures, n+": "+msg)
		}
	}
	ready, err := d.scrape(ctx)
	readyAt := time.Now()
	s.ColdStart = window(before, ready, readyAt.Sub(start))
	return ready, readyAt, err
}

// quiet counts the daemon's requests over two Sync intervals in which nothing changes, then
// reads its memory and the unsuccessful reconciles of the scenario's Syncs.
func (b *daemonBench) quiet(ctx context.Context, d *daemon, sc daemonScenario, ready daemonMetrics, readyAt time.Time, s *DaemonSample) error {
	mid, midAt, err := b.quietInterval(ctx, d)
	if err != nil {
		return err
	}
	end, endAt, err := b.quietInterval(ctx, d)
	if err != nil {
		return err
	}
	s.FirstInterval = window(ready, mid, midAt.Sub(readyAt))
	s.SecondInterval = window(mid, end, endAt.Sub(midAt))
	s.HeapInuseMB, s.Go = end.HeapInuseMB, end.Go
	for _, spec := range sc.specs {
		s.Unsuccessful += end.Unsuccessful[spec.name]
	}
	s.Memory, err = readProcMemory(d.pid())
	return err
}

// waitBase makes sure the base Sync exists and this daemon has reconciled it successfully,
// so that its start-up work is done before the clock starts.
func (b *daemonBench) waitBase(ctx context.Context, d *daemon) error {
	if err := ensureBaseSync(ctx, b.syncs, b.template()); err != nil {
		return fmt.Errorf("base Sync: %w", err)
	}
	sw, err := openSyncWatch(ctx, b.syncs, []string{baseSyncName}, b.revision, time.Now())
	if err != nil {
		return err
	}
	if err := sw.wait(ctx, b.timeout()); err != nil {
		return fmt.Errorf("base Sync: %w (daemon log %s)", err, d.logPath)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, b.timeout(), true, func(ctx context.Context) (bool, error) {
		m, err := d.scrape(ctx)
		return err == nil && m.Reconciles[baseSyncName]-m.Unsuccessful[baseSyncName] > 0, nil
	})
	if err != nil {
		return fmt.Errorf("base Sync: this daemon never reconciled it successfully (daemon log %s): %w", d.logPath, err)
	}
	return nil
}

// quietInterval waits one Sync interval and scrapes the daemon's metrics, returning when.
func (b *daemonBench) quietInterval(ctx context.Context, d *daemon) (daemonMetrics, time.Time, error) {
	if err := pause(ctx, b.f.interval); err != nil {
		return daemonMetrics{}, time.Time{}, err
	}
	m, err := d.scrape(ctx)
	return m, time.Now(), err
}

// startDaemonBench does what every daemon scenario starts with: a temporary folder (the
// daemons' git caches), the built converge, the API control plane (its version recorded in
// m) and the admin with the Syncs' namespace. done stops the control plane and removes the
// folder.
func startDaemonBench(ctx context.Context, f flags, work daemonWorkload, m *Machine, prefix string) (b *daemonBench, c *cluster.Cluster, done func(), err error) {
	tmp, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, nil, nil, err
	}
	cleanup := func() { _ = os.RemoveAll(tmp) }
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	log.Printf("building converge")
	bin, err := buildConverge(ctx, tmp)
	if err != nil {
		return nil, nil, nil, err
	}
	log.Printf("starting the %s control plane; load average %s", cluster.API, m.LoadAvgStart)
	c, err = cluster.Start(ctx, cluster.Options{Profile: cluster.API})
	if err != nil {
		return nil, nil, nil, err
	}
	rm := cleanup
	cleanup = func() { c.Stop(); rm() }
	if dc, err := discovery.NewDiscoveryClientForConfig(c.Config); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			m.APIServer = v.GitVersion
		}
	}
	a, err := newAdmin(c.Config, true, f.settle)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := a.ensureNamespace(ctx, syncNamespace); err != nil {
		return nil, nil, nil, err
	}
	return &daemonBench{f: f, bin: bin, kubeconfig: c.Kubeconfig, cfg: c.Config, admin: a, work: work, tmp: tmp,
		logDir: filepath.Join(".run", "bench")}, c, cleanup, nil
}
