package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseDaemonMetrics(t *testing.T) {
	text := `# HELP converge_api_requests_total Kubernetes API requests of the daemon by verb and HTTP code ("error" when no response came).
# TYPE converge_api_requests_total counter
converge_api_requests_total{code="200",verb="get"} 120
converge_api_requests_total{code="404",verb="get"} 3
converge_api_requests_total{code="201",verb="post"} 2
converge_api_requests_total{code="200",verb="put"} 1
converge_api_requests_total{code="200",verb="patch"} 40
converge_api_requests_total{code="error",verb="patch"} 1
converge_api_requests_total{code="200",verb="watch"} 9
converge_reconciles_total{name="bench-s00",namespace="bench-daemon",result="success"} 2
converge_reconciles_total{name="bench-s00",namespace="bench-daemon",result="ApplyFailed"} 1
converge_reconciles_total{name="bench-base",namespace="bench-daemon",result="success"} 3
converge_reconcile_duration_seconds_sum{name="bench-s00",namespace="bench-daemon"} 1.5
converge_reconcile_duration_seconds_sum{name="bench-base",namespace="bench-daemon"} 0.25
converge_reconcile_duration_seconds_count{name="bench-base",namespace="bench-daemon"} 3
converge_source_load_duration_seconds_sum{name="bench-s00",namespace="bench-daemon"} 0.5
go_memstats_heap_inuse_bytes 2.097152e+07
go_memstats_heap_idle_bytes 1.048576e+07
go_memstats_heap_released_bytes 4.194304e+06
go_memstats_next_gc_bytes 3.145728e+07
go_memstats_sys_bytes 4.194304e+07
go_memstats_stack_inuse_bytes 1.048576e+06
go_memstats_alloc_bytes 1.048576e+07
converge_shards 64
converge_shards_held 21
converge_syncs_owned 330
converge_shard_handovers_total{event="acquired"} 23
converge_shard_handovers_total{event="released"} 2
`
	got, err := parseDaemonMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := daemonMetrics{
		Requests:         Counts{"get": 123, "create": 2, "update": 1, "patch": 41, "watch": 9},
		NotOK:            Counts{"404": 3, "error": 1},
		Reconciles:       map[string]int{"bench-s00": 3, "bench-base": 3},
		Unsuccessful:     map[string]int{"bench-s00": 1},
		HeapInuseMB:      20,
		Go:               goMemory{HeapInuseMB: 20, HeapIdleMB: 10, HeapReleasedMB: 4, NextGCMB: 30, SysMB: 40, StackInuseMB: 1},
		ReconcileSeconds: 1.75,
		LoadSeconds:      0.5,
		Shards:           64,
		ShardsHeld:       21,
		SyncsOwned:       330,
		Handovers:        map[string]int{"acquired": 23, "released": 2},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseDaemonMetrics (-want +got):\n%s", diff)
	}
	if n := writes(got.Requests); n != 44 {
		t.Errorf("writes = %d, want 44 (create, update, patch)", n)
	}
	if n := got.reconciles(); n != 6 {
		t.Errorf("reconciles = %d, want 6", n)
	}
}

func TestLogErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.log")
	log := `I1121 22:18:00.000000    4242 reconcile.go:80] "reconciled" sync="bench-daemon/bench-s00"
E1121 22:18:01.000000    4242 controller.go:316] "Reconciler error" err="boom"
E1121 22:18:02.000000    4242 controller.go:316] "Reconciler error" err="boom"
Error: not a klog line
E1121 22:18:03.000000    4242 reflector.go:200] "watch ended"
`
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	n, sample, err := logErrors(path)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("logErrors counted %d error lines, want 3", n)
	}
	if diff := cmp.Diff([]string{`"Reconciler error" err="boom"`, `"watch ended"`}, sample); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
}

func TestReadProcMemory(t *testing.T) {
	m, err := readProcMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSSMB <= 0 || m.PeakRSSMB < m.RSSMB || m.RSSAnonMB <= 0 || m.RSSFileMB <= 0 || m.RSSAnonMB+m.RSSFileMB > m.RSSMB+1 {
		t.Errorf("readProcMemory of this process: %+v", m)
	}
}
