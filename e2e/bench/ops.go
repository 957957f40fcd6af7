package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// The operations, in run order.
const (
	opRender = "render"
	opCold   = "cold apply"
	opNoop   = "no-op reconcile"
	opChange = "1% git change"
	opDrift  = "1% drift"
	// opDriftWatch is converge-watch only: from the first out-of-band edit until every
	// drifted object is corrected, reconciling when the watch cache reports a change (as
	// the daemon's --reconcile-on-drift does), without waiting for an interval.
	opDriftWatch = "1% drift, watch"
	opPrune      = "10% prune"
)

// driftPause separates the out-of-band edits from the measured reconcile, so that a watch
// cache has seen them (a daemon's next reconcile comes later than this anyway).
const driftPause = time.Second

// operations lists the engine operations in run order (render is engine-independent).
var operations = []string{opCold, opNoop, opChange, opDrift, opDriftWatch, opPrune}

// Sample is one measured run of one operation.
type Sample struct {
	WallSeconds float64 `json:"wallSeconds"`
	// Client are the requests the engine sent, counted by the e2e/fault transport.
	Client Counts `json:"client"`
	// Server is the apiserver_request_total delta over the run (all clients; resource
	// requests only, leases left out).
	Server Counts `json:"server"`
	Memory memory `json:"memory"`
	// CPU is the CPU time the engine's process and the control plane spent in the run.
	CPU cpuTime `json:"cpu"`
	// Corrected counts drifted objects the reconcile put back (1% drift only).
	Corrected int `json:"corrected,omitempty"`
	Drifted   int `json:"drifted,omitempty"`
}

// bench is the state of one engine's run of every operation.
type bench struct {
	name    string
	eng     runner
	count   *counter
	admin   *admin
	metrics *http.Client
	host    string
	runs    int
	steady  time.Duration
	// coldOnly measures one cold apply and nothing else.
	coldOnly bool
	objs     []*unstructured.Unstructured
	samples  map[string][]Sample
	// serverPids are the control plane's processes, whose CPU time each Sample reports.
	serverPids []int
}

// newBench prepares engine name on a counted copy of adminCfg.
func newBench(ctx context.Context, f flags, adminCfg *rest.Config, objs []*unstructured.Unstructured,
	serverPids []int) (*bench, error) {
	name := f.child
	cfg, count := countedConfig(adminCfg)
	eng, err := newRunner(ctx, name, cfg)
	if err != nil {
		return nil, err
	}
	a, err := newAdmin(adminCfg, f.finalize, f.settle)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(adminCfg)
	if err != nil {
		return nil, err
	}
	if err := a.ensureNamespace(ctx, inventoryRef.Namespace); err != nil {
		return nil, err
	}
	return &bench{name: name, eng: eng, count: count, admin: a, metrics: hc, host: adminCfg.Host,
		runs: f.runs, steady: f.steady, coldOnly: f.coldOnly, objs: objs, samples: map[string][]Sample{}, serverPids: serverPids}, nil
}

// measure runs fn once and records a Sample of op.
func (b *bench) measure(ctx context.Context, op string, fn func(context.Context) error) (*Sample, error) {
	before, err := scrapeRequests(ctx, b.metrics, b.host)
	if err != nil {
		return nil, err
	}
	stopProfile, err := startProfile(b.name, op, len(b.samples[op]))
	if err != nil {
		return nil, err
	}
	b.count.reset()
	cpu := readCPU(b.serverPids)
	start := time.Now()
	err = fn(ctx)
	wall := time.Since(start)
	stopProfile()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", b.name, op, err)
	}
	s := Sample{WallSeconds: wall.Seconds(), Client: b.count.snapshot(), Memory: readMemory(),
		CPU: readCPU(b.serverPids).since(cpu)}
	after, err := scrapeRequests(ctx, b.metrics, b.host)
	if err != nil {
		return nil, err
	}
	s.Server = sub(after, before)
	b.samples[op] = append(b.samples[op], s)
	log.Printf("%-10s %-16s %6.2fs  cpu %.1fs + server %.1fs  %s", b.name, op, s.WallSeconds,
		s.CPU.EngineSeconds, s.CPU.ServerSeconds, s.Client)
	return &b.samples[op][len(b.samples[op])-1], nil
}

// run measures, on a fresh control plane, either one cold apply (coldOnly) or every other
// operation runs times.
func (b *bench) run(ctx context.Context) error {
	if b.coldOnly {
		_, err := b.measure(ctx, opCold, b.applyFn(b.objs))
		return err
	}
	// The cold applies are measured each in a child of its own (runParent); here the set is
	// applied once, not measured, and the engine reaches its steady state (a watch cache has
	// seen every object), which is what the other operations measure.
	if err := b.applyFn(b.objs)(ctx); err != nil {
		return fmt.Errorf("%s: first apply: %w", b.name, err)
	}
	if err := pause(ctx, b.steady); err != nil {
		return err
	}
	for range b.runs {
		if _, err := b.measure(ctx, opNoop, b.applyFn(b.objs)); err != nil {
			return err
		}
	}
	changed := pick(b.objs, "change", 0.01)
	desired := b.objs
	for r := 1; r <= b.runs; r++ {
		desired = withChange(b.objs, changed, r)
		if _, err := b.measure(ctx, opChange, b.applyFn(desired)); err != nil {
			return err
		}
	}
	if err := b.driftRuns(ctx, desired); err != nil {
		return err
	}
	return b.pruneRuns(ctx, desired)
}

// driftRuns edits 1% of the live objects out of band, then measures one reconcile of
// desired and checks the edits were put back.
func (b *bench) driftRuns(ctx context.Context, desired []*unstructured.Unstructured) error {
	drifted := pick(desired, "drift", 0.01)
	for r := 1; r <= b.runs; r++ {
		if err := b.admin.drift(ctx, desired, drifted, 100+r); err != nil {
			return err
		}
		if err := pause(ctx, driftPause); err != nil {
			return err
		}
		s, err := b.measure(ctx, opDrift, b.applyFn(desired))
		if err != nil {
			return err
		}
		s.Drifted = len(drifted)
		if s.Corrected, err = b.admin.corrected(ctx, desired, drifted); err != nil {
			return err
		}
		if s.Corrected != s.Drifted {
			log.Printf("%s: only %d of %d drifted objects were corrected", b.name, s.Corrected, s.Drifted)
		}
	}
	if w, ok := b.eng.(watcher); ok {
		return b.driftWatchRuns(ctx, w, desired, drifted)
	}
	return nil
}

// watcher is an engine that reports out-of-band changes (engine.Options.Changed).
type watcher interface {
	// changes delivers a value when a managed object changed out of band.
	changes() <-chan struct{}
}

// driftReconcileLimit bounds the change-triggered reconciles of one drift-watch run.
const driftReconcileLimit = 5

// driftWatchRuns measures opDriftWatch: edit the drifted objects, then reconcile whenever
// the engine reports a change (after the daemon's debounce) until all are corrected.
func (b *bench) driftWatchRuns(ctx context.Context, w watcher, desired []*unstructured.Unstructured, drifted map[string]bool) error {
	for r := 1; r <= b.runs; r++ {
		for len(w.changes()) > 0 {
			<-w.changes()
		}
		in := deepCopyAll(desired)
		corrected := 0
		fn := func(ctx context.Context) error {
			if err := b.admin.drift(ctx, desired, drifted, 200+r); err != nil {
				return err
			}
			for range driftReconcileLimit {
				select {
				case <-w.changes():
				case <-ctx.Done():
					return ctx.Err()
				}
				if err := pause(ctx, driftDebounce); err != nil {
					return err
				}
				if err := b.eng.apply(ctx, in); err != nil {
					return err
				}
				var err error
				if corrected, err = b.admin.corrected(ctx, desired, drifted); err != nil || corrected == len(drifted) {
					return err
				}
			}
			return nil
		}
		s, err := b.measure(ctx, opDriftWatch, fn)
		if err != nil {
			return err
		}
		s.Drifted, s.Corrected = len(drifted), corrected
		if s.Corrected != s.Drifted {
			log.Printf("%s: only %d of %d drifted objects were corrected after %d change-triggered reconciles",
				b.name, s.Corrected, s.Drifted, driftReconcileLimit)
		}
	}
	return nil
}

// driftDebounce is the daemon's pause between a reported change and the reconcile
// (cmd/converge's driftDebounce), gathering a burst of edits into one reconcile.
const driftDebounce = 500 * time.Millisecond

// pruneRuns drops 10% of desired and measures the reconcile that removes them; before
// every run but the first the full set is applied again (not measured).
func (b *bench) pruneRuns(ctx context.Context, desired []*unstructured.Unstructured) error {
	kept, dropped := split(desired, pick(desired, "prune", 0.10))
	for r := range b.runs {
		if r > 0 {
			if err := b.eng.apply(ctx, deepCopyAll(desired)); err != nil {
				return fmt.Errorf("%s: restore before prune: %w", b.name, err)
			}
		}
		k, d := deepCopyAll(kept), deepCopyAll(dropped)
		fn := func(ctx context.Context) error { return b.eng.prune(ctx, k, d) }
		if _, err := b.measure(ctx, opPrune, fn); err != nil {
			return err
		}
	}
	return nil
}

// applyFn returns an operation applying a deep copy of objs, made now, outside the
// measured time (engines may sort or edit their input).
func (b *bench) applyFn(objs []*unstructured.Unstructured) func(context.Context) error {
	in := deepCopyAll(objs)
	return func(ctx context.Context) error { return b.eng.apply(ctx, in) }
}

// pause waits for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// profileEnv names a folder; when set, every measured run writes a CPU profile there, named
// <engine>-<operation>-<child's PID>-<run>.pprof.
const profileEnv = "CONVERGE_BENCH_CPUPROFILE"

// startProfile starts the CPU profile of one run when profileEnv is set; the returned func
// stops it.
func startProfile(engine, op string, run int) (func(), error) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}, nil
	}
	name := strings.ReplaceAll(fmt.Sprintf("%s-%s-%d-%d.pprof", engine, op, os.Getpid(), run+1), " ", "_")
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
