package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// ScaleReport is everything one run of the scale scenario measured: one row per replica
// count. It is its own JSON document (.run/bench/daemon-scale.json by default).
type ScaleReport struct {
	Date    string  `json:"date"`
	Machine Machine `json:"machine"`
	// Objects is the whole workload (-objects), Syncs the Syncs it is split into (-syncs).
	Objects    int    `json:"objects"`
	Syncs      int    `json:"syncs"`
	Profile    string `json:"profile"`
	Concurrent int    `json:"concurrent"`
	// Sharding and ShardsFlag are the replicas' --sharding and --shards (0: the default).
	Sharding   string `json:"sharding"`
	ShardsFlag int    `json:"shardsFlag,omitempty"`
	// Leases is the replicas' lease duration / renew deadline / retry period flags ("default"
	// when none was given: 15s / 10s / 2s).
	Leases          string     `json:"leases"`
	IntervalSeconds float64    `json:"intervalSeconds"`
	SettleSeconds   float64    `json:"settleSeconds"`
	Rows            []ScaleRow `json:"rows"`
}

// ScaleRow is one replica count.
type ScaleRow struct {
	Replicas int `json:"replicas"`
	// ShardsSpreadSeconds is from starting the replicas until every one answered /readyz and
	// the shards were spread over them (ShardsAtStart: shards held by each).
	ShardsSpreadSeconds float64 `json:"shardsSpreadSeconds"`
	ShardsAtStart       string  `json:"shardsAtStart"`
	// WallSeconds is from the creation of the first Sync until every Sync was Ready at the
	// revision; CreateSeconds how long creating them took (inside WallSeconds).
	WallSeconds   float64 `json:"wallSeconds"`
	CreateSeconds float64 `json:"createSeconds"`
	Ready         Spread  `json:"ready"`
	// ServerCPUSeconds is the control plane's CPU time (etcd and kube-apiserver) during the
	// cold start; each replica's is in Replica.
	ServerCPUSeconds float64 `json:"serverCpuSeconds"`
	// ColdStartServer and IdleServer are the API server's own counts
	// (apiserver_request_total) over the cold start and the second quiet interval, every
	// client together, Lease requests apart.
	ColdStartServer ServerWindow `json:"coldStartServer"`
	IdleServer      ServerWindow `json:"idleServer"`
	Replica         []ReplicaRow `json:"replica"`
	Recovery        *Recovery    `json:"recovery,omitempty"`
	DeleteSeconds   float64      `json:"deleteSeconds"`
	Leftover        int          `json:"leftover"`
	Unsuccessful    int          `json:"unsuccessful"`
	Failures        []string     `json:"failures,omitempty"`
}

// ReplicaRow is one replica of a row.
type ReplicaRow struct {
	Name string `json:"name"`
	// ShardsHeld and SyncsOwned are its gauges after the quiet intervals (-1: not exported).
	ShardsHeld int `json:"shardsHeld"`
	SyncsOwned int `json:"syncsOwned"`
	// CPUSeconds is its CPU time during the cold start.
	CPUSeconds float64 `json:"cpuSeconds"`
	// ColdStart, FirstInterval and SecondInterval are its own requests (its /metrics), as in
	// the daemon mode: lease renewals included.
	ColdStart      Window     `json:"coldStart"`
	FirstInterval  Window     `json:"firstInterval"`
	SecondInterval Window     `json:"secondInterval"`
	Memory         procMemory `json:"memory"`
	LogErrors      int        `json:"logErrors"`
	LogSample      []string   `json:"logSample,omitempty"`
	Log            string     `json:"log"`
}

// Recovery is what followed the SIGKILL of one replica: at that moment a commit was
// published and a reconcile requested of every Sync.
type Recovery struct {
	Killed       string `json:"killed"`
	KilledShards int    `json:"killedShards"`
	KilledSyncs  int    `json:"killedSyncs"`
	// TakeoverSeconds is from the kill until the survivors held every shard (0: not seen,
	// or not sharded).
	TakeoverSeconds float64 `json:"takeoverSeconds"`
	// AllReadySeconds is from the kill until every Sync was Ready at the new commit; Ready
	// spreads every Sync's time, BumpSeconds is how long requesting the reconciles took.
	AllReadySeconds float64       `json:"allReadySeconds"`
	Ready           Spread        `json:"ready"`
	BumpSeconds     float64       `json:"bumpSeconds"`
	Survivors       []SurvivorRow `json:"survivors"`
}

// SurvivorRow is a surviving replica after the recovery: its requests since the kill.
type SurvivorRow struct {
	Name       string `json:"name"`
	ShardsHeld int    `json:"shardsHeld"`
	SyncsOwned int    `json:"syncsOwned"`
	Window     Window `json:"window"`
}

// Spread summarizes sorted times: the first, the median, the 90th percentile and the last.
type Spread struct {
	First  float64 `json:"first"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	Last   float64 `json:"last"`
}

// newSpread summarizes xs, sorted.
func newSpread(xs []float64) Spread {
	if len(xs) == 0 {
		return Spread{}
	}
	return Spread{First: xs[0], Median: xs[(len(xs)-1)/2], P90: xs[(len(xs)*9-1)/10], Last: xs[len(xs)-1]}
}

// serverRequests are the API server's request counters at one moment.
type serverRequests struct {
	Requests Counts
	Leases   int
	// ByResource counts the requests but Leases' by "verb resource[/subresource]".
	ByResource map[string]int
}

// ServerWindow is the API server's requests over a span of time, from every client.
type ServerWindow struct {
	Seconds float64 `json:"seconds"`
	// Requests are apiserver_request_total by verb, Leases left out; Writes those that write.
	Requests Counts `json:"requests"`
	Writes   int    `json:"writes"`
	// Leases are the requests to Leases (the replicas' shard and replica Leases, and the
	// control plane's own heartbeats).
	Leases int `json:"leases"`
	// ByResource are Requests by "verb resource[/subresource]": where the idle requests go.
	ByResource map[string]int `json:"byResource,omitempty"`
}

// since returns the requests between before and s, d apart.
func (s serverRequests) since(before serverRequests, d time.Duration) ServerWindow {
	req := sub(s.Requests, before.Requests)
	by := map[string]int{}
	for k, v := range s.ByResource {
		if n := v - before.ByResource[k]; n != 0 {
			by[k] = n
		}
	}
	return ServerWindow{Seconds: d.Seconds(), Requests: req, Writes: writes(req), Leases: s.Leases - before.Leases, ByResource: by}
}

// topResources renders the largest entries of w.ByResource, "get configmaps 12, ...".
func (w ServerWindow) topResources(n int) string {
	keys := make([]string, 0, len(w.ByResource))
	for k := range w.ByResource {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := w.ByResource[keys[i]], w.ByResource[keys[j]]
		return a > b || a == b && keys[i] < keys[j]
	})
	parts := make([]string, 0, n)
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %d", k, w.ByResource[k]))
	}
	return strings.Join(parts, ", ")
}

// scrapeServerRequests reads apiserver_request_total as scrapeRequests does, counting the
// requests to Leases apart instead of leaving them out.
func scrapeServerRequests(ctx context.Context, hc *http.Client, host string) (serverRequests, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/metrics", nil)
	if err != nil {
		return serverRequests{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return serverRequests{}, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return serverRequests{}, fmt.Errorf("metrics: %s: %s", resp.Status, b)
	}
	return parseServerRequests(resp.Body)
}

// parseServerRequests reads apiserver_request_total from the Prometheus text format.
func parseServerRequests(r io.Reader) (serverRequests, error) {
	out := serverRequests{Requests: Counts{}, ByResource: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := parseSample(line[len("apiserver_request_total"):])
		if !ok || labels["resource"] == "" {
			continue
		}
		if labels["resource"] == "leases" {
			out.Leases += int(value)
			continue
		}
		out.Requests[serverVerb(labels["verb"])] += int(value)
		res := labels["resource"]
		if labels["subresource"] != "" {
			res += "/" + labels["subresource"]
		}
		out.ByResource[serverVerb(labels["verb"])+" "+res] += int(value)
		if labels["dry_run"] != "" {
			out.Requests["dryRun"] += int(value)
		}
	}
	return out, sc.Err()
}

// replicaCPU formats the replicas' cold-start CPU seconds as "12.0 + 11.5".
func (r ScaleRow) replicaCPU() string {
	parts := make([]string, len(r.Replica))
	for i, rr := range r.Replica {
		parts[i] = fmt.Sprintf("%.1f", rr.CPUSeconds)
	}
	return strings.Join(parts, " + ")
}

// idleSummary formats each replica's requests per minute and writes in the second quiet
// interval.
func (r ScaleRow) idleSummary() string {
	parts := make([]string, len(r.Replica))
	for i, rr := range r.Replica {
		w := rr.SecondInterval
		parts[i] = fmt.Sprintf("%s %.0f/min (%d writes, %d reconciles)", rr.Name, perMinute(w.Requests.Total(), w.Seconds), w.Writes, w.Reconciles)
	}
	return strings.Join(parts, ", ")
}

// perMinute scales n requests over seconds to a minute.
func perMinute(n int, seconds float64) float64 {
	if seconds <= 0 {
		return 0
	}
	return float64(n) * 60 / seconds
}

// emit writes the report to w as a table or JSON, and as JSON to jsonFile unless empty.
func (r *ScaleReport) emit(w io.Writer, format, jsonFile string) error {
	return emitReport(w, format, jsonFile, r, r.table)
}

// table prints the header, a line per replica count, a line per replica, and the recovery.
func (r *ScaleReport) table(w io.Writer) error {
	shards := "default"
	if r.ShardsFlag > 0 {
		shards = fmt.Sprint(r.ShardsFlag)
	}
	fmt.Fprintf(w, "\ndaemon scale: %d Syncs sharing %d objects, profile %s; converge run --sharding %s --shards %s --concurrent %d per replica; Sync interval %s\n",
		r.Syncs, r.Objects, r.Profile, r.Sharding, shards, r.Concurrent, time.Duration(r.IntervalSeconds*float64(time.Second)))
	fmt.Fprintf(w, "lease duration / renew deadline / retry period: %s\n", r.Leases)
	fmt.Fprintf(w, "%d CPUs, %s, kube-apiserver %s; load average %s at start, %s at end\n\n",
		r.Machine.CPUs, r.Machine.GoVersion, r.Machine.APIServer, r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "replicas\tall Ready s\tSync Ready s (first / median / p90)\tcold-start CPU s: replicas | control plane\t"+
		"idle at the API server: requests/min (writes), per Sync per interval\tLease requests/min\tpeak RSS MB\tdelete s")
	for _, row := range r.Rows {
		idle := row.IdleServer
		perSync := 0.0
		if r.Syncs > 0 && idle.Seconds > 0 {
			perSync = float64(idle.Requests.Total()) / float64(r.Syncs) / (idle.Seconds / r.IntervalSeconds)
		}
		rss := make([]string, len(row.Replica))
		for i, rr := range row.Replica {
			rss[i] = fmt.Sprintf("%.0f", rr.Memory.PeakRSSMB)
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f / %.1f / %.1f\t%s | %.1f (wall %.1f × %d CPUs = %.1f)\t%.0f (%d), %.2f\t%.0f\t%s\t%.1f\n",
			row.Replicas, row.WallSeconds, row.Ready.First, row.Ready.Median, row.Ready.P90,
			row.replicaCPU(), row.ServerCPUSeconds, row.WallSeconds, r.Machine.CPUs, row.WallSeconds*float64(r.Machine.CPUs),
			perMinute(idle.Requests.Total(), idle.Seconds), idle.Writes, perSync, perMinute(idle.Leases, idle.Seconds),
			strings.Join(rss, " / "), row.DeleteSeconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "replicas\treplica\tshards held\tSyncs owned\tcold start: reconciles, requests\t1st interval: reconciles, requests, writes\t2nd interval: requests/min, writes, reconciles\tpeak RSS MB\tlog errors")
	for _, row := range r.Rows {
		for _, rr := range row.Replica {
			c, f, s := rr.ColdStart, rr.FirstInterval, rr.SecondInterval
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d, %d\t%d, %d, %d\t%.0f, %d, %d\t%.0f\t%d\n",
				row.Replicas, rr.Name, rr.ShardsHeld, rr.SyncsOwned, c.Reconciles, c.Requests.Total(),
				f.Reconciles, f.Requests.Total(), f.Writes, perMinute(s.Requests.Total(), s.Seconds), s.Writes, s.Reconciles,
				rr.Memory.PeakRSSMB, rr.LogErrors)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, row := range r.Rows {
		if rec := row.Recovery; rec != nil {
			takeover := "not seen"
			if rec.TakeoverSeconds > 0 {
				takeover = fmt.Sprintf("%.1fs", rec.TakeoverSeconds)
			}
			fmt.Fprintf(w, "\n%d replicas, recovery: %s killed with SIGKILL (%d shards, %d Syncs); a commit published and a reconcile requested of every Sync at once (in %.1fs);\n"+
				"  the survivors held every shard after %s; every Sync Ready at the new commit after %.1fs (first %.1f, median %.1f, p90 %.1f)\n",
				row.Replicas, rec.Killed, rec.KilledShards, rec.KilledSyncs, rec.BumpSeconds, takeover, rec.AllReadySeconds,
				rec.Ready.First, rec.Ready.Median, rec.Ready.P90)
			for _, s := range rec.Survivors {
				fmt.Fprintf(w, "  %s: now %d shards, %d Syncs; %d reconciles, %d requests since the kill\n",
					s.Name, s.ShardsHeld, s.SyncsOwned, s.Window.Reconciles, s.Window.Requests.Total())
			}
		}
	}
	for _, row := range r.Rows {
		var notes []string
		if row.Unsuccessful > 0 {
			notes = append(notes, fmt.Sprintf("%d unsuccessful reconciles", row.Unsuccessful))
		}
		notes = append(notes, row.Failures...)
		if row.Leftover > 0 {
			notes = append(notes, fmt.Sprintf("%d objects left after the deletion", row.Leftover))
		}
		for _, rr := range row.Replica {
			if rr.LogErrors > 0 {
				notes = append(notes, fmt.Sprintf("%d error lines in %s, e.g. %s", rr.LogErrors, rr.Log, strings.Join(rr.LogSample, " | ")))
			}
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "%d replicas: %s\n", row.Replicas, strings.Join(notes, "; "))
		}
	}
	return nil
}
