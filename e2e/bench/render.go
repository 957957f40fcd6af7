package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/converge-dev/converge/sources"
)

// The render mode (-render) times a kustomization of the generated workload's files plus one
// labels entry, built whole by krusty and by Converge's path (sources.Render, chunked when
// the kustomization allows), in the same run, and checks that both give the same objects.
// With chart in -renders it also times the generated Helm chart (chart_render.go).

// renderSizes are the kustomization sizes measured: 1,000 and -objects.
func renderSizes(objects int) []int {
	if objects <= 1000 {
		return []int{objects}
	}
	return []int{1000, objects}
}

// RenderRow is one kustomization size.
type RenderRow struct {
	Objects       int     `json:"objects"`
	KrustySeconds float64 `json:"krustySeconds"`
	FastSeconds   float64 `json:"convergeSeconds"`
	Speedup       float64 `json:"speedup"`
}

func runRenderBench(ctx context.Context, f flags) error {
	renders := strings.Split(f.renders, ",")
	for _, r := range renders {
		if r != "kustomize" && r != "chart" {
			return fmt.Errorf("-renders %q: %q is neither kustomize nor chart", f.renders, r)
		}
	}
	if slices.Contains(renders, "kustomize") {
		var rows []RenderRow
		for _, n := range renderSizes(f.objects) {
			row, err := renderOnce(ctx, n)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		}
		if err := renderTable(os.Stdout, rows); err != nil {
			return err
		}
	}
	if !slices.Contains(renders, "chart") {
		return nil
	}
	rows, err := chartRenderRows(ctx, renderSizes(f.objects))
	if err != nil {
		return err
	}
	return chartRenderTable(os.Stdout, rows)
}

// renderOnce writes a kustomization of n objects and builds it both ways.
func renderOnce(ctx context.Context, n int) (RenderRow, error) {
	dir, err := os.MkdirTemp("", "converge-bench-render-")
	if err != nil {
		return RenderRow{}, err
	}
	defer os.RemoveAll(dir)
	objs := generate(n)
	if err := writeObjects(dir, objs); err != nil {
		return RenderRow{}, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "objects-*.yaml"))
	if err != nil {
		return RenderRow{}, err
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	k := "resources:\n- " + strings.Join(files, "\n- ") + "\nlabels:\n- pairs: {owner: bench}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return RenderRow{}, err
	}
	build := func(whole bool) (string, time.Duration, error) {
		opts := sources.DefaultRenderOptions()
		opts.WholeKustomize = whole
		start := time.Now()
		out, err := sources.Render(ctx, dir, ".", opts)
		took := time.Since(start)
		if err != nil {
			return "", took, err
		}
		var b strings.Builder
		for _, u := range out {
			js, err := u.MarshalJSON()
			if err != nil {
				return "", took, err
			}
			b.Write(js)
			b.WriteByte('\n')
		}
		return b.String(), took, nil
	}
	log.Printf("render: %d objects, Converge's path", n)
	fast, fastTook, err := build(false)
	if err != nil {
		return RenderRow{}, err
	}
	log.Printf("render: %d objects in %.2fs; now krusty whole (minutes at 10,000)", n, fastTook.Seconds())
	whole, wholeTook, err := build(true)
	if err != nil {
		return RenderRow{}, err
	}
	if fast != whole {
		return RenderRow{}, fmt.Errorf("render of %d objects: Converge's path and krusty differ", n)
	}
	log.Printf("render: %d objects, krusty whole in %.2fs", n, wholeTook.Seconds())
	return RenderRow{Objects: n, KrustySeconds: wholeTook.Seconds(), FastSeconds: fastTook.Seconds(),
		Speedup: wholeTook.Seconds() / fastTook.Seconds()}, nil
}

func renderTable(w io.Writer, rows []RenderRow) error {
	fmt.Fprintf(w, "\nkustomize render: the workload's files and one labels entry, in-process, same output checked; load average %s\n\n", loadAvg())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "objects\tkrusty whole s\tConverge s\tspeed-up")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%.2f\t%.2f\t%.0f×\n", r.Objects, r.KrustySeconds, r.FastSeconds, r.Speedup)
	}
	return tw.Flush()
}
