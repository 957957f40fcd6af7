package main

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// DaemonReport is everything one run of the daemon mode measured. It is its own JSON
// document: its rows are per scenario and daemon, not per operation and engine like Report's.
type DaemonReport struct {
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	// Objects is the whole workload (-objects); the measured Syncs hold all of it but the
	// CRD, which the base Sync applies first.
	Objects    int    `json:"objects"`
	Tenants    int    `json:"tenants"`
	Runs       int    `json:"runs"`
	Profile    string `json:"profile"`
	Concurrent int    `json:"concurrent"`
	// Parity: the measured Syncs depended on the base Sync and substituted variables.
	Parity bool `json:"parity,omitempty"`
	// Day2: the measured Syncs reported drift, rolled back by themselves and had a
	// notification (-day2).
	Day2 bool `json:"day2,omitempty"`
	// Mix is the kind mix of the leaves (-mix), Prune the fraction of leaves the -prune
	// step removed (0: no such step).
	Mix   string  `json:"mix"`
	Prune float64 `json:"prune,omitempty"`
	// GoMemLimit is the daemon's GOMEMLIMIT (-gomemlimit), empty for none.
	GoMemLimit      string      `json:"goMemLimit,omitempty"`
	IntervalSeconds float64     `json:"intervalSeconds"`
	SettleSeconds   float64     `json:"settleSeconds"`
	Rows            []DaemonRow `json:"rows"`
	// Ratio is the median wall time of the many-Syncs scenario over the single Sync's
	// (target ≤ 2, docs/benchmarks.md).
	Ratio float64 `json:"ratio"`
}

// DaemonRow is one scenario: the run with the median wall time, and every run's.
type DaemonRow struct {
	Scenario    string    `json:"scenario"`
	Objects     int       `json:"objects"`
	Syncs       int       `json:"syncs"`
	WallSeconds float64   `json:"wallSeconds"`
	RunSeconds  []float64 `json:"runSeconds"`
	DaemonSample
}

// DaemonSample is one scenario run with a fresh daemon.
type DaemonSample struct {
	// WallSeconds is from the creation of the first Sync until every Sync was Ready at the
	// revision (observedGeneration current, Ready=True, lastAppliedRevision).
	WallSeconds float64 `json:"wallSeconds"`
	// CreateSeconds is how long creating the Syncs took (inside WallSeconds).
	CreateSeconds float64 `json:"createSeconds"`
	// SyncReadySeconds is each Sync's time to Ready, sorted.
	SyncReadySeconds []float64 `json:"syncReadySeconds"`
	// DaemonReadySeconds is from exec to /readyz (CRD installed), before anything is timed.
	DaemonReadySeconds float64 `json:"daemonReadySeconds"`
	// ColdStart are the daemon's requests from the creation of the Syncs until all were Ready.
	ColdStart Window `json:"coldStart"`
	// FirstInterval and SecondInterval are the daemon's requests in the two Sync intervals
	// after all were Ready, with nothing changed: the first holds each Sync's first no-op
	// reconcile (which still writes the status summary once: created → unchanged), the
	// second is the steady state.
	FirstInterval  Window `json:"firstInterval"`
	SecondInterval Window `json:"secondInterval"`
	// Memory is the daemon's VmHWM and VmRSS after the second interval, before the deletion.
	Memory      procMemory `json:"memory"`
	HeapInuseMB float64    `json:"heapInuseMB"`
	// Go is the runtime's view of the daemon's memory at the same time.
	Go goMemory `json:"go"`
	// Prune is the -prune step, after the quiet intervals (nil without it).
	Prune *PruneSample `json:"prune,omitempty"`
	// DeleteSeconds is from deleting the Syncs until they were gone (every object deleted by
	// the daemon, finalizers dropped).
	DeleteSeconds float64 `json:"deleteSeconds"`
	// Leftover counts workload objects found in the tenant namespaces after the deletion.
	Leftover int `json:"leftover"`
	// Unsuccessful counts reconciles of the measured Syncs with a result other than
	// success; Failures holds the first Ready=False of up to five Syncs.
	Unsuccessful int      `json:"unsuccessful"`
	Failures     []string `json:"failures,omitempty"`
	// LogErrors counts error lines of the daemon's log, LogSample shows up to five.
	LogErrors int      `json:"logErrors"`
	LogSample []string `json:"logSample,omitempty"`
	Log       string   `json:"log"`
}

// Window is the daemon's activity over a span of time, from its own metrics.
type Window struct {
	Seconds    float64 `json:"seconds"`
	Reconciles int     `json:"reconciles"`
	// Requests are converge_api_requests_total by verb ("get" includes lists).
	Requests Counts `json:"requests"`
	Writes   int    `json:"writes"`
	// NotOK are the requests answered other than 2xx, by code ("error": no response).
	NotOK map[string]int `json:"notOK,omitempty"`
	// ReconcileSeconds and LoadSeconds are the time the daemon's workers spent in reconciles
	// and, inside them, in fetch and render, summed over the reconciles that ended in the
	// window.
	ReconcileSeconds float64 `json:"reconcileSeconds"`
	LoadSeconds      float64 `json:"loadSeconds"`
}

// window returns the activity between two scrapes taken d apart.
func window(before, after daemonMetrics, d time.Duration) Window {
	req := sub(after.Requests, before.Requests)
	return Window{Seconds: d.Seconds(), Reconciles: after.reconciles() - before.reconciles(), Requests: req,
		Writes: writes(req), NotOK: subCodes(after.NotOK, before.NotOK),
		ReconcileSeconds: after.ReconcileSeconds - before.ReconcileSeconds, LoadSeconds: after.LoadSeconds - before.LoadSeconds}
}

// subCodes returns after − before per code, dropping zeros.
func subCodes(after, before Counts) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// codes formats answers by code as "404×3 409×1", codes sorted.
func codes(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// perReconcile formats requests per reconcile, "-" without reconciles.
func (w Window) perReconcile(n int) string {
	if w.Reconciles == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(w.Reconciles))
}

// medianDaemonRow returns the row of the sample with the median wall time.
func medianDaemonRow(scenario string, objects, syncs int, samples []DaemonSample) DaemonRow {
	idx := make([]int, len(samples))
	walls := make([]float64, len(samples))
	for i, s := range samples {
		idx[i], walls[i] = i, s.WallSeconds
	}
	sort.SliceStable(idx, func(a, b int) bool { return walls[idx[a]] < walls[idx[b]] })
	return DaemonRow{Scenario: scenario, Objects: objects, Syncs: syncs, WallSeconds: median(walls), RunSeconds: walls,
		DaemonSample: samples[idx[(len(idx)-1)/2]]}
}

// emit writes the report to w as a table or JSON, and as JSON to jsonFile unless empty.
func (r *DaemonReport) emit(w io.Writer, format, jsonFile string) error {
	return emitReport(w, format, jsonFile, r, r.table)
}

// table prints the header, one line per scenario, the ratio, and what went wrong.
func (r *DaemonReport) table(w io.Writer) error {
	fmt.Fprintf(w, "\ndaemon: %d objects (the CRD in Sync %s, applied first and not timed; the rest in the measured Syncs), %d runs (medians), profile %s\n",
		r.Objects, baseSyncName, r.Runs, r.Profile)
	fmt.Fprintf(w, "converge run --concurrent %d --watch-cache --leader-elect=false; Sync interval %s, prune, no readiness wait; %d CPUs, %s, kube-apiserver %s\n",
		r.Concurrent, time.Duration(r.IntervalSeconds*float64(time.Second)), r.Machine.CPUs, r.Machine.GoVersion, r.Machine.APIServer)
	if r.Parity {
		fmt.Fprintf(w, "-parity: every measured Sync depends on %s and substitutes ${%s} (spec.postBuild.substitute) and ${%s} (ConfigMap %s) in every object, strict\n",
			baseSyncName, parityTierVar, parityRegionVar, parityConfigMap)
	}
	if r.Day2 {
		fmt.Fprintf(w, "-day2: every measured Sync has driftPolicy Report, autoRollback and a generic notification on RolledBack\n")
	}
	fmt.Fprintf(w, "kinds of the leaves: %s\n", r.Mix)
	if r.GoMemLimit != "" {
		fmt.Fprintf(w, "the daemon's GOMEMLIMIT: %s\n", r.GoMemLimit)
	}
	fmt.Fprintf(w, "load average: %s at start, %s at end\n\n", r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tobjects\tSyncs\tall Ready s\truns, s\tSync Ready s (first / median)\tcold-start requests\tcold start: reconciles, Σ s (fetch+render)\tpeak RSS MB\t"+
		"1st interval: reconciles, requests, writes\t2nd interval: reconciles\trequests (by verb)\tper reconcile\twrites\tdelete s")
	for _, row := range r.Rows {
		cold := row.ColdStart
		first, second := row.FirstInterval, row.SecondInterval
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%s\t%s\t%d (%s)\t%d, %.1f (%.1f)\t%.0f\t%d, %d, %d\t%d\t%d (%s)\t%s\t%d\t%.1f\n",
			row.Scenario, row.Objects, row.Syncs, row.WallSeconds, joinSeconds(row.RunSeconds), readySpread(row.SyncReadySeconds),
			cold.Requests.Total(), cold.Requests, cold.Reconciles, cold.ReconcileSeconds, cold.LoadSeconds, row.Memory.PeakRSSMB,
			first.Reconciles, first.Requests.Total(), first.Writes,
			second.Reconciles, second.Requests.Total(), second.Requests, second.perReconcile(second.Requests.Total()),
			second.Writes, row.DeleteSeconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.Ratio > 0 {
		fmt.Fprintf(w, "\n%d Syncs / %s, all Ready: %.2f× (target ≤ 2×)\n", r.Tenants, oneSyncScenario, r.Ratio)
	}
	for _, row := range r.Rows {
		notes := []string{fmt.Sprintf("memory after the quiet intervals: %s; %s", row.Memory, row.Go)}
		if p := row.Prune; p != nil {
			notes = append(notes, fmt.Sprintf("prune of %d leaves: all Ready in %.2f s, %d requests (%s); then %s; %s",
				p.Dropped, p.WallSeconds, p.Requests.Total(), p.Requests, p.Memory, p.Go))
		}
		if row.Unsuccessful > 0 {
			notes = append(notes, fmt.Sprintf("%d unsuccessful reconciles", row.Unsuccessful))
		}
		notes = append(notes, row.Failures...)
		if row.Leftover > 0 {
			notes = append(notes, fmt.Sprintf("%d objects left after the deletion", row.Leftover))
		}
		for _, w := range []struct {
			name string
			w    Window
		}{{"cold start", row.ColdStart}, {"1st interval", row.FirstInterval}, {"2nd interval", row.SecondInterval}} {
			if len(w.w.NotOK) > 0 {
				notes = append(notes, fmt.Sprintf("%s answers other than 2xx: %s", w.name, codes(w.w.NotOK)))
			}
		}
		if row.LogErrors > 0 {
			notes = append(notes, fmt.Sprintf("%d error lines in %s, e.g. %s", row.LogErrors, row.Log, strings.Join(row.LogSample, " | ")))
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "%s (median run): %s\n", row.Scenario, strings.Join(notes, "; "))
		}
	}
	return nil
}

// joinSeconds formats run times as "1.00 / 2.00".
func joinSeconds(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " / ")
}

// readySpread formats the first and median of sorted ready times.
func readySpread(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f / %.2f", xs[0], median(xs))
}
