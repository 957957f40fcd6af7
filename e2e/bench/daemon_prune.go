package main

import (
	"context"
	"fmt"
	"log"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// PruneSample is the -prune step of a scenario run: a commit without a fraction of the
// leaves, applied by every Sync of the scenario, and the daemon's memory after it.
type PruneSample struct {
	// Dropped is how many leaves the commit removed.
	Dropped int `json:"dropped"`
	// WallSeconds is from the commit (and the Syncs' reconcile request) until every Sync was
	// Ready at it.
	WallSeconds float64 `json:"wallSeconds"`
	// Requests are the daemon's requests in that span.
	Requests Counts `json:"requests"`
	// Memory is the daemon's VmHWM and VmRSS once all were Ready at the commit, Go the
	// runtime's view at the same time.
	Memory procMemory `json:"memory"`
	Go     goMemory   `json:"go"`
}

// prunedWorkload returns w without the leaves pick chooses (frac of them, spread over the
// kinds and tenants), and how many it dropped. Namespaces and the CRD stay.
func prunedWorkload(w daemonWorkload, frac float64) (daemonWorkload, int) {
	var all []*unstructured.Unstructured
	for _, objs := range w.Tenants {
		all = append(all, objs...)
	}
	dropped := pick(all, "prune", frac)
	out := daemonWorkload{Base: w.Base, Tenants: make([][]*unstructured.Unstructured, len(w.Tenants))}
	for t, objs := range w.Tenants {
		for _, u := range objs {
			if !dropped[keyOf(u)] {
				out.Tenants[t] = append(out.Tenants[t], u)
			}
		}
	}
	return out, len(dropped)
}

// pruneStep commits the workload without -prune of its leaves, asks every Sync of sc to
// reconcile (the requestedAt annotation, as the webhook does), waits until all are Ready at
// the new commit, and reads the daemon's memory. The full workload is committed again before
// the next scenario (restore).
func (b *daemonBench) pruneStep(ctx context.Context, d *daemon, sc daemonScenario, run int) (*PruneSample, error) {
	pruned, n := prunedWorkload(b.work, b.f.prune)
	revision, err := b.commit(pruned, fmt.Sprintf("bench workload without %d leaves", n))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(sc.specs))
	for i, spec := range sc.specs {
		names[i] = spec.name
	}
	before, err := d.scrape(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	sw, err := openSyncWatch(ctx, b.syncs, names, revision, start)
	if err != nil {
		return nil, err
	}
	at := start.UTC().Format(time.RFC3339Nano)
	for _, name := range names {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RequestedAtAnnotation, at)
		s := &v1alpha1.Sync{}
		s.Namespace, s.Name = syncNamespace, name
		if err := b.syncs.Patch(ctx, s, client.RawPatch(types.MergePatchType, patch)); err != nil {
			return nil, fmt.Errorf("request a reconcile of %s: %w", name, err)
		}
	}
	if err := sw.wait(ctx, b.timeout()); err != nil {
		return nil, fmt.Errorf("prune: %w (daemon log %s)", err, d.logPath)
	}
	p := &PruneSample{Dropped: n, WallSeconds: sw.readySeconds()[len(names)-1]}
	after, err := d.scrape(ctx)
	if err != nil {
		return nil, err
	}
	p.Requests, p.Go = sub(after.Requests, before.Requests), after.Go
	if p.Memory, err = readProcMemory(d.pid()); err != nil {
		return nil, err
	}
	if err := d.saveHeapProfile(ctx, sc.fileName("daemon", run, "-pruned.heap.pprof")); err != nil {
		return nil, err
	}
	log.Printf("%-10s run %d: %d leaves pruned, all Ready in %.2fs, %d requests (%s); %s; %s",
		sc.name, run+1, n, p.WallSeconds, p.Requests.Total(), p.Requests, p.Memory, p.Go)
	return p, nil
}

// commit publishes w as the new head of the bench repository and returns its revision as
// the daemon reports it.
func (b *daemonBench) commit(w daemonWorkload, message string) (string, error) {
	src := filepath.Join(b.tmp, fmt.Sprintf("workload-%d", time.Now().UnixNano()))
	if err := b.writeSource(src, w); err != nil {
		return "", err
	}
	sha, err := b.srv.Publish("bench", "main", src, message)
	if err != nil {
		return "", err
	}
	return "main@sha1:" + sha, nil
}
