package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"text/tabwriter"
	"time"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The chart rows of the render mode: the generated chart (chart.go) of n objects rendered
// by Converge's path (sources.Render with Helm options: the parent, and the chart in a
// render child, as the daemon renders a Sync's chart) and by Helm's engine called directly,
// in-process, as `helm template` does (load, values, engine.Render, manifests sorted, each
// decoded into an object). Each render runs in a process of its own, so that its peak RSS
// is its own; both must give the same objects.

// Paths of the chart rows, the values of -chart-render.
const (
	chartPathConverge = "converge"
	chartPathHelm     = "helm"
)

// chartRender is one chart render in its own process: what the parent reads back.
type chartRender struct {
	Seconds float64 `json:"seconds"`
	Objects int     `json:"objects"`
	// Digest is of the objects as canonical JSON, sorted: equal for equal renders.
	Digest string `json:"digest"`
	// StartRSSMB is the process' RSS before the render (the binary loaded, nothing
	// rendered), PeakRSSMB its peak RSS, ChildPeakRSSMB its render child's (0 without).
	StartRSSMB     float64 `json:"startRssMB"`
	PeakRSSMB      float64 `json:"peakRssMB"`
	ChildPeakRSSMB float64 `json:"childPeakRssMB"`
}

// ChartRenderRow is one chart size.
type ChartRenderRow struct {
	Objects  int         `json:"objects"`
	Helm     chartRender `json:"helm"`
	Converge chartRender `json:"converge"`
}

// chartRenderRows renders the chart of each size both ways.
func chartRenderRows(ctx context.Context, sizes []int) ([]ChartRenderRow, error) {
	var rows []ChartRenderRow
	for _, n := range sizes {
		row, err := chartRenderOnce(ctx, n)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// chartRenderOnce writes the chart of n objects (the tenant objects of a daemon workload of
// n+1 over numNamespaces tenants) and renders it both ways.
func chartRenderOnce(ctx context.Context, n int) (ChartRenderRow, error) {
	row := ChartRenderRow{Objects: n}
	dir, err := os.MkdirTemp("", "converge-bench-chart-")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	w, err := generateDaemon(n+1, numNamespaces, daemonWorkloadOptions{})
	if err != nil {
		return row, err
	}
	if err := writeChart(filepath.Join(dir, chartFolder), w, false); err != nil {
		return row, err
	}
	for _, p := range []struct {
		name string
		out  *chartRender
	}{{chartPathHelm, &row.Helm}, {chartPathConverge, &row.Converge}} {
		log.Printf("chart render: %d objects, %s", n, p.name)
		if *p.out, err = spawnChartRender(ctx, p.name, dir); err != nil {
			return row, err
		}
		if p.out.Objects != n {
			return row, fmt.Errorf("chart render of %d objects, %s: %d objects", n, p.name, p.out.Objects)
		}
		log.Printf("chart render: %d objects, %s in %.2fs, peak RSS %.0f MB (render child %.0f MB)",
			n, p.name, p.out.Seconds, p.out.PeakRSSMB, p.out.ChildPeakRSSMB)
	}
	if row.Helm.Digest != row.Converge.Digest {
		return row, fmt.Errorf("chart render of %d objects: Converge's path and Helm's engine differ", n)
	}
	return row, nil
}

// spawnChartRender runs this binary with -chart-render path on the chart under dir and
// returns what it measured.
func spawnChartRender(ctx context.Context, path, dir string) (chartRender, error) {
	var r chartRender
	exe, err := os.Executable()
	if err != nil {
		return r, err
	}
	cmd := exec.CommandContext(ctx, exe, "-chart-render", path, "-workload", dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return r, fmt.Errorf("chart render, %s: %w", path, err)
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("chart render, %s: its answer: %w", path, err)
	}
	return r, nil
}

// runChartRender is -chart-render: one render of the chart under f.workload, written to
// stdout as JSON.
func runChartRender(ctx context.Context, f flags) error {
	var objs []*unstructured.Unstructured
	before, err := readProcMemory(os.Getpid())
	if err != nil {
		return err
	}
	start := time.Now()
	switch f.chartRender {
	case chartPathConverge:
		objs, err = renderChart(ctx, f.workload)
	case chartPathHelm:
		objs, err = helmEngineRender(filepath.Join(f.workload, chartFolder))
	default:
		err = fmt.Errorf("-chart-render %q: want %s or %s", f.chartRender, chartPathConverge, chartPathHelm)
	}
	if err != nil {
		return err
	}
	r := chartRender{Seconds: time.Since(start).Seconds(), Objects: len(objs), StartRSSMB: before.RSSMB}
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	r.PeakRSSMB, r.ChildPeakRSSMB = float64(self.Maxrss)/1024, float64(children.Maxrss)/1024
	if r.Digest, err = objectsDigest(objs); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

// helmEngineRender renders the chart folder dir as `helm template` does, with Helm's
// engine in this process: no render child, no limits.
func helmEngineRender(dir string) ([]*unstructured.Unstructured, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return nil, err
	}
	vals := map[string]any{}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return nil, err
	}
	h := chartRenderOptions()
	opts := chartutil.ReleaseOptions{Name: h.ReleaseName, Namespace: h.Namespace, Revision: 1, IsInstall: true}
	renderVals, err := chartutil.ToRenderValues(chrt, vals, opts, chartutil.DefaultCapabilities)
	if err != nil {
		return nil, err
	}
	var e engine.Engine
	rendered, err := e.Render(chrt, renderVals)
	if err != nil {
		return nil, err
	}
	_, manifests, err := releaseutil.SortManifests(rendered, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, err
	}
	objs := make([]*unstructured.Unstructured, 0, len(manifests))
	for _, m := range manifests {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(m.Content), &u.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Name, err)
		}
		objs = append(objs, u)
	}
	return objs, nil
}

// objectsDigest is a digest of objs as canonical JSON, in sorted order.
func objectsDigest(objs []*unstructured.Unstructured) (string, error) {
	lines := make([]string, len(objs))
	for i, u := range objs {
		js, err := json.Marshal(u.Object)
		if err != nil {
			return "", fmt.Errorf("%s: %w", keyOf(u), err)
		}
		lines[i] = string(js)
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		_, _ = io.WriteString(h, l+"\n")
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// chartRenderTable prints the chart rows.
func chartRenderTable(w io.Writer, rows []ChartRenderRow) error {
	if len(rows) == 0 {
		return errors.New("no chart rows")
	}
	fmt.Fprintf(w, "\nHelm chart render: templates ranging over the values list global.tenants (%d tenants) and a subchart; each render in a process of its own, same objects checked; load average %s\n\n",
		numNamespaces, loadAvg())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "objects\tHelm engine s\tpeak RSS MB (before)\tConverge s\tpeak RSS MB (before)\trender child peak RSS MB")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.2f\t%.0f (%.0f)\t%.2f\t%.0f (%.0f)\t%.0f\n", r.Objects, r.Helm.Seconds, r.Helm.PeakRSSMB, r.Helm.StartRSSMB,
			r.Converge.Seconds, r.Converge.PeakRSSMB, r.Converge.StartRSSMB, r.Converge.ChildPeakRSSMB)
	}
	return tw.Flush()
}
