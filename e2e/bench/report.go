package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one benchmark run measured.
type Report struct {
	Date            string  `json:"date"`
	Machine         Machine `json:"machine"`
	Objects         int     `json:"objects"`
	Runs            int     `json:"runs"`
	Profile         string  `json:"profile"`
	Concurrency     int     `json:"concurrency"`
	FluxConcurrency int     `json:"fluxConcurrency"`
	SettleSeconds   float64 `json:"settleSeconds"`
	SteadySeconds   float64 `json:"steadySeconds"`
	Rows            []Row   `json:"rows"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs         int    `json:"cpus"`
	GoVersion    string `json:"goVersion"`
	APIServer    string `json:"apiServer"`
	LoadAvgStart string `json:"loadAvgStart"`
	LoadAvgEnd   string `json:"loadAvgEnd"`
}

// Row is one (operation, engine) of the table: the median run, and every run's wall time.
type Row struct {
	Operation   string    `json:"operation"`
	Engine      string    `json:"engine"`
	WallSeconds float64   `json:"wallSeconds"`
	RunSeconds  []float64 `json:"runSeconds"`
	Client      Counts    `json:"client"`
	Server      Counts    `json:"server"`
	Memory      memory    `json:"memory"`
	CPU         cpuTime   `json:"cpu"`
	Corrected   int       `json:"corrected,omitempty"`
	Drifted     int       `json:"drifted,omitempty"`
	// VsBaseline and VsFloor are converge's wall time over the flux-style engine's and the
	// floor's for the same operation (converge and converge-watch rows; 0 when not measured).
	VsBaseline float64 `json:"vsBaseline,omitempty"`
	VsFloor    float64 `json:"vsFloor,omitempty"`
}

// machine describes this machine at the start of the run.
func machine() Machine {
	return Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg(),
		APIServer: "unknown"}
}

// loadAvg returns the first three fields of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// build fills r.Rows from results (engine → operation → samples): per (operation,
// engine) the run with the median wall time, then converge's ratios.
func (r *Report) build(results map[string]map[string][]Sample) {
	r.Date = time.Now().UTC().Format(time.RFC3339)
	ops := append([]string{opRender}, operations...)
	names := append([]string{"-"}, engines...)
	for _, op := range ops {
		for _, name := range names {
			samples := results[name][op]
			if len(samples) == 0 {
				continue
			}
			r.Rows = append(r.Rows, medianRow(op, name, samples))
		}
	}
	wall := map[[2]string]float64{}
	for _, row := range r.Rows {
		wall[[2]string{row.Operation, row.Engine}] = row.WallSeconds
	}
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Engine != engineConverge && row.Engine != engineWatch {
			continue
		}
		if b := wall[[2]string{row.Operation, engineFlux}]; b > 0 {
			row.VsBaseline = row.WallSeconds / b
		}
		if f := wall[[2]string{row.Operation, engineFloor}]; f > 0 {
			row.VsFloor = row.WallSeconds / f
		}
	}
}

// medianRow returns the row of the sample with the median wall time.
func medianRow(op, name string, samples []Sample) Row {
	idx := make([]int, len(samples))
	walls := make([]float64, len(samples))
	for i, s := range samples {
		idx[i], walls[i] = i, s.WallSeconds
	}
	sort.SliceStable(idx, func(a, b int) bool { return walls[idx[a]] < walls[idx[b]] })
	m := samples[idx[(len(idx)-1)/2]]
	return Row{Operation: op, Engine: name, WallSeconds: median(walls), RunSeconds: walls,
		Client: m.Client, Server: m.Server, Memory: m.Memory, CPU: m.CPU, Corrected: m.Corrected, Drifted: m.Drifted}
}

// emit writes the report to w as a table or JSON, and as JSON to jsonFile unless empty.
func (r *Report) emit(w io.Writer, format, jsonFile string) error {
	return emitReport(w, format, jsonFile, r, r.table)
}

// emitReport writes report v to w as JSON (format "json") or with table, and as JSON to
// jsonFile unless empty.
func emitReport(w io.Writer, format, jsonFile string, v any, table func(io.Writer) error) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if jsonFile != "" {
		if err := os.MkdirAll(filepath.Dir(jsonFile), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(jsonFile, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if format == "json" {
		_, err := fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return table(w)
}

// table prints the header and one line per row.
func (r *Report) table(w io.Writer) error {
	fmt.Fprintf(w, "\n%d objects, %d runs (medians), profile %s; %d CPUs, %s, kube-apiserver %s\n",
		r.Objects, r.Runs, r.Profile, r.Machine.CPUs, r.Machine.GoVersion, r.Machine.APIServer)
	fmt.Fprintf(w, "load average: %s at start, %s at end; converge concurrency %d, flux-style --concurrent-ssa %d\n\n",
		r.Machine.LoadAvgStart, r.Machine.LoadAvgEnd, r.Concurrency, r.FluxConcurrency)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "operation\tengine\twall s\trequests (client, by verb)\ttotal\tapiserver_request_total Δ\tCPU s (engine + server)\tRSS MB\theap MB\t× baseline\t× floor\tnote")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%d\t%s\t%.1f + %.1f\t%.0f\t%.0f\t%s\t%s\t%s\n",
			row.Operation, row.Engine, row.WallSeconds, row.Client, row.Client.Total(), row.Server,
			row.CPU.EngineSeconds, row.CPU.ServerSeconds,
			row.Memory.PeakRSSMB, row.Memory.HeapInuseMB, ratio(row.VsBaseline), ratio(row.VsFloor), note(row))
	}
	return tw.Flush()
}

// ratio formats a ratio, "-" when not measured.
func ratio(x float64) string {
	if x == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", x)
}

// note says how many drifted objects a drift reconcile corrected.
func note(row Row) string {
	if row.Drifted == 0 {
		return ""
	}
	return fmt.Sprintf("corrected %d/%d", row.Corrected, row.Drifted)
}
