// Command bench measures Converge's apply engine against a Flux-style baseline
// (fluxcd/pkg/ssa ApplyAllStaged + DeleteAll, default options) and a bare parallel
// server-side-apply floor, on a generated workload and a local control plane it starts
// itself (e2e/cluster). See docs/benchmarks.md (the targets and the figures).
//
//	go run ./e2e/bench -objects 1000 -runs 3
//	go run ./e2e/bench -daemon -objects 1000   # one daemon: 1 Sync against 100 Syncs
//	go run ./e2e/bench -daemon -scale -syncs 30 -objects 600 -replicas 1,3   # sharded replicas
//
// The engines run one after the other on the same namespaces and names, each in its own
// child process (so that peak RSS is per engine), each cold apply after a cleanup that
// deletes the whole workload and waits until it is gone.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/sources"
)

// flags are the command line.
type flags struct {
	objects  int
	runs     int
	full     bool
	output   string
	jsonFile string
	engines  string
	// child mode: run one engine against a running cluster, write its samples to result.
	child      string
	kubeconfig string
	workload   string
	result     string
	serverPids string
	coldOnly   bool
	finalize   bool
	settle     time.Duration
	steady     time.Duration
	// daemon mode (daemon.go): the built `converge run` with Syncs from a git server.
	daemon     bool
	tenants    int
	concurrent int
	interval   time.Duration
	parity     bool
	day2       bool
	mix        string
	scenarios  string
	prune      float64
	memLimit   string
	// scale scenario (daemon_scale.go): -syncs Syncs on -replicas replicas with sharding.
	scale    bool
	replicas string
	sharding string
	shards   int
	// the replicas' lease timings (0: the daemon's defaults, 15 s, 10 s, 2 s)
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	// render mode (render.go): kustomize builds, krusty whole vs Converge's path.
	render  bool
	renders string
	// chart render (chart_render.go): one render of the chart under -workload, by this path.
	chartRender string
}

// parseFlags reads the command line.
func parseFlags() flags {
	var f flags
	flag.IntVar(&f.objects, "objects", 1000, "objects in the generated workload, Namespaces and the CRD included")
	flag.IntVar(&f.runs, "runs", 3, "runs per operation; the table shows medians (at least 3 for published figures)")
	flag.BoolVar(&f.full, "full", false, "start the Full control plane profile (controllers, scheduler, kwok) instead of API")
	flag.StringVar(&f.output, "o", "table", "stdout format: table or json")
	flag.StringVar(&f.jsonFile, "json", filepath.Join(".run", "bench", "results.json"), "also write the results as JSON to this file (empty: don't)")
	flag.StringVar(&f.engines, "engines", strings.Join(engines, ","), "engines to measure, comma-separated")
	flag.StringVar(&f.child, "child", "", "internal: run this engine only")
	flag.StringVar(&f.kubeconfig, "kubeconfig", "", "internal: kubeconfig of the running cluster")
	flag.StringVar(&f.workload, "workload", "", "internal: folder of the generated workload")
	flag.StringVar(&f.result, "result", "", "internal: file for the child's samples")
	flag.BoolVar(&f.coldOnly, "cold-only", false, "measure the cold apply only")
	flag.StringVar(&f.serverPids, "server-pids", "", "internal: comma-separated PIDs of the control plane, for its CPU time")
	flag.BoolVar(&f.finalize, "finalize", false, "internal: finalize deleted Namespaces (no namespace controller)")
	flag.DurationVar(&f.settle, "settle", 31*time.Second, "with -daemon: wait this long after deleting the Namespaces before a cold start (the API server's 30 s live-lookup window)")
	flag.DurationVar(&f.steady, "steady", 35*time.Second, "wait this long after the last cold apply before the other operations (a watch cache's relist back-off after the CRD was recreated)")
	flag.BoolVar(&f.render, "render", false, "time kustomize builds of 1,000 and -objects resources, krusty whole vs Converge's path (no cluster)")
	flag.StringVar(&f.renders, "renders", "kustomize,chart", "with -render: the renders to time, comma-separated: kustomize (krusty whole vs Converge's path), chart (Helm's engine vs Converge's chart render)")
	flag.StringVar(&f.chartRender, "chart-render", "", "internal: render the chart under -workload once by this path (converge or helm) and print what it measured")
	flag.BoolVar(&f.daemon, "daemon", false, "measure the daemon instead of the engines: one Sync of the workload, then -syncs Syncs sharing it (docs/benchmarks.md)")
	flag.IntVar(&f.tenants, "syncs", 100, "with -daemon: the number of Syncs the workload is split into")
	flag.BoolVar(&f.day2, "day2", false, "with -daemon: every measured Sync reports drift (spec.driftPolicy: Report), rolls back by itself (spec.autoRollback) and has a notification (sent on RolledBack only, which the run never causes)")
	flag.BoolVar(&f.parity, "parity", false, "with -daemon: every measured Sync depends on the base Sync and substitutes two variables (spec.postBuild: substitute and a ConfigMap) found in every object")
	flag.StringVar(&f.mix, "mix", defaultMix, "with -daemon: the kinds of the leaves, comma-separated Kind=weight (kinds: "+strings.Join(leafKinds, ", ")+"), e.g. Service=1,Deployment=1")
	flag.StringVar(&f.scenarios, "scenarios", "one,many,chart", "with -daemon: which scenarios to run, comma-separated: one (one Sync of the workload), many (-syncs Syncs), chart (one Sync rendering a Helm chart of the same objects); both is one,many")
	flag.Float64Var(&f.prune, "prune", 0, "with -daemon: after the quiet intervals, commit the workload without this fraction of its leaves (e.g. 0.1), wait until the Syncs are Ready at it and read the daemon's memory again (0: no prune step)")
	flag.StringVar(&f.memLimit, "gomemlimit", "", "with -daemon: the daemon's GOMEMLIMIT (e.g. 200MiB; empty: none)")
	flag.IntVar(&f.concurrent, "concurrent", 4, "with -daemon: the daemon's --concurrent (Syncs reconciled in parallel)")
	flag.DurationVar(&f.interval, "interval", 20*time.Second, "with -daemon: the Syncs' spec.interval, also the length of each quiet interval counted after Ready")
	flag.BoolVar(&f.scale, "scale", false, "with -daemon: the scale scenario instead: -syncs Syncs sharing -objects objects, on each replica count of -replicas (docs/benchmarks.md)")
	flag.StringVar(&f.replicas, "replicas", "1,3", "with -daemon -scale: the replica counts to measure, comma-separated, each with fresh daemons")
	flag.StringVar(&f.sharding, "sharding", "auto", "with -daemon -scale: the replicas' --sharding (off: leader election only)")
	flag.IntVar(&f.shards, "shards", 0, "with -daemon -scale: the replicas' --shards (0: the daemon's default)")
	flag.DurationVar(&f.leaseDuration, "lease-duration", 0, "with -daemon -scale: the replicas' --leader-election-lease-duration (0: the daemon's default)")
	flag.DurationVar(&f.renewDeadline, "renew-deadline", 0, "with -daemon -scale: the replicas' --leader-election-renew-deadline (0: the daemon's default)")
	flag.DurationVar(&f.retryPeriod, "retry-period", 0, "with -daemon -scale: the replicas' --leader-election-retry-period, also each Lease request's timeout (0: the daemon's default)")
	flag.Parse()
	if f.daemon && !flagSet("json") {
		f.jsonFile = filepath.Join(".run", "bench", "daemon.json")
		if f.scale {
			f.jsonFile = filepath.Join(".run", "bench", "daemon-scale.json")
		}
	}
	if f.scale && !flagSet("interval") {
		f.interval = time.Minute // 1,000 Syncs every 20 s would be 50 reconciles a second
	}
	return f
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	return set
}

// main runs the parent (the benchmark), with -child one engine, or with -daemon the daemon mode.
func main() {
	sources.ServeChild() // a chart renders in a render child: this binary
	log.SetFlags(log.Ltime)
	f := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch {
	case f.chartRender != "":
		err = runChartRender(ctx, f)
	case f.child != "":
		err = runChild(ctx, f)
	case f.daemon && f.scale:
		err = runScaleBench(ctx, f)
	case f.daemon:
		err = runDaemonBench(ctx, f)
	case f.render:
		err = runRenderBench(ctx, f)
	default:
		err = runParent(ctx, f)
	}
	if err != nil {
		log.Printf("bench: %v", err)
		stop()
		os.Exit(1)
	}
}

// runParent generates and renders the workload, runs every engine in a child process on a
// control plane of its own, and reports.
func runParent(ctx context.Context, f flags) error {
	if f.runs < 1 || f.objects < numNamespaces+2 {
		return fmt.Errorf("need -runs ≥ 1 and -objects ≥ %d", numNamespaces+2)
	}
	profile := cluster.API
	if f.full {
		profile = cluster.Full
	}
	rep := &Report{Objects: f.objects, Runs: f.runs, Profile: string(profile),
		Concurrency: concurrency, FluxConcurrency: fluxConcurrency, SettleSeconds: f.settle.Seconds(), SteadySeconds: f.steady.Seconds(),
		Machine: machine()}
	dir, err := os.MkdirTemp("", "converge-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeWorkload(dir, generate(f.objects)); err != nil {
		return err
	}
	renders, err := measureRender(ctx, dir, f.objects, f.runs)
	if err != nil {
		return err
	}
	results := map[string]map[string][]Sample{"-": {opRender: renders}}
	names := strings.Split(f.engines, ",")
	for _, name := range names {
		results[name] = map[string][]Sample{}
	}
	// Cold applies: each on a fresh control plane, the engines taking turns (and each round
	// starting with the next engine), so that a machine that gets busier or slower during the
	// benchmark weighs on every engine alike.
	for r := range f.runs {
		for i := range names {
			name := names[(r+i)%len(names)]
			cf := f
			cf.runs, cf.coldOnly = 1, true
			log.Printf("cold apply %d/%d: %s", r+1, f.runs, name)
			s, err := measureEngine(ctx, cf, name, profile, dir, rep)
			if err != nil {
				return err
			}
			results[name][opCold] = append(results[name][opCold], s[opCold]...)
		}
	}
	if !f.coldOnly {
		for _, name := range names {
			cf := f
			cf.coldOnly = false
			s, err := measureEngine(ctx, cf, name, profile, dir, rep)
			if err != nil {
				return err
			}
			for op, samples := range s {
				results[name][op] = append(results[name][op], samples...)
			}
		}
	}
	rep.Machine.LoadAvgEnd = loadAvg()
	rep.build(results)
	return rep.emit(os.Stdout, f.output, f.jsonFile)
}

// measureEngine starts a fresh control plane of profile and measures engine name on it in
// a child process. Each engine gets its own control plane, so that none inherits another's
// history (an API server and etcd that already served tens of thousands of writes and
// deletes spend more CPU per request: measured up to 30% more by the third engine).
func measureEngine(ctx context.Context, f flags, name string, profile cluster.Profile, dir string, rep *Report) (map[string][]Sample, error) {
	log.Printf("%s: starting the %s control plane; load average %s", name, profile, loadAvg())
	c, err := cluster.Start(ctx, cluster.Options{Profile: profile})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if dc, err := discovery.NewDiscoveryClientForConfig(c.Config); err == nil {
		if v, err := dc.ServerVersion(); err == nil {
			rep.Machine.APIServer = v.GitVersion
		}
	}
	return spawn(ctx, f, name, c.Kubeconfig, dir, !f.full, c.Pids())
}

// measureRender times sources.Render of the generated folder runs times.
func measureRender(ctx context.Context, dir string, want, runs int) ([]Sample, error) {
	var out []Sample
	for range runs {
		start := time.Now()
		objs, err := sources.Render(ctx, dir, ".", sources.DefaultRenderOptions())
		if err != nil {
			return nil, fmt.Errorf("render: %w", err)
		}
		s := Sample{WallSeconds: time.Since(start).Seconds(), Client: Counts{}, Server: Counts{}, Memory: readMemory()}
		if len(objs) != want {
			return nil, fmt.Errorf("render: %d objects, want %d", len(objs), want)
		}
		log.Printf("%-10s %-16s %6.2fs  %d objects", "-", opRender, s.WallSeconds, len(objs))
		out = append(out, s)
	}
	return out, nil
}

// spawn runs one engine in a child process of this binary and returns its samples.
func spawn(ctx context.Context, f flags, name, kubeconfig, dir string, finalize bool, serverPids []int) (map[string][]Sample, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	res, err := os.CreateTemp("", "converge-bench-result-")
	if err != nil {
		return nil, err
	}
	res.Close()
	defer os.Remove(res.Name())
	cmd := exec.CommandContext(ctx, exe, "-child", name, "-kubeconfig", kubeconfig, "-workload", dir,
		"-runs", strconv.Itoa(f.runs), "-result", res.Name(), "-finalize="+strconv.FormatBool(finalize), "-settle", f.settle.String(), "-steady", f.steady.String(),
		"-server-pids", joinInts(serverPids), "-cold-only="+strconv.FormatBool(f.coldOnly))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("engine %s: %w", name, err)
	}
	b, err := os.ReadFile(res.Name())
	if err != nil {
		return nil, err
	}
	out := map[string][]Sample{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("engine %s: result: %w", name, err)
	}
	return out, nil
}

// runChild renders the workload, as a daemon would, and measures one engine on it.
func runChild(ctx context.Context, f flags) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS = -1 // as e2e/cluster's config, and Flux with API priority and fairness on
	ctrllog.SetLogger(logr.Discard())
	objs, err := sources.Render(ctx, f.workload, ".", sources.DefaultRenderOptions())
	if err != nil {
		return err
	}
	pids, err := splitInts(f.serverPids)
	if err != nil {
		return fmt.Errorf("-server-pids: %w", err)
	}
	b, err := newBench(ctx, f, cfg, objs, pids)
	if err != nil {
		return err
	}
	if err := b.run(ctx); err != nil {
		return err
	}
	out, err := json.Marshal(b.samples)
	if err != nil {
		return err
	}
	return os.WriteFile(f.result, out, 0o644)
}

// joinInts and splitInts carry a list of PIDs on a command line.
func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func splitInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		x, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}
