package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/converge-dev/converge/e2e/cluster"
)

// buildConverge builds cmd/converge into dir as the image does (Dockerfile: a static binary,
// CGO_ENABLED=0, -trimpath, -ldflags "-s -w") and returns the binary's path, with
// cmd/converge-decrypt beside it (the SOPS decryption program converge starts from its own
// folder). The daemon's resident set is measured on what users run: with cgo, kustomize's
// import of "plugin" turns the link into a dynamic one that exports every symbol (a 22 MB
// dynamic symbol table) and keeps every exported method of every reachable type; a
// 10,000-object daemon had about 95 MB of its RSS in the file pages of such a binary.
func buildConverge(ctx context.Context, dir string) (string, error) {
	for _, name := range []string{"converge-decrypt", "converge"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(dir, name),
			"github.com/converge-dev/converge/cmd/"+name)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build %s: %w\n%s", name, err, out)
		}
	}
	return filepath.Join(dir, "converge"), nil
}

// daemonOptions are the settings of one `converge run`.
type daemonOptions struct {
	bin, kubeconfig string
	concurrent      int
	// logFile receives the daemon's stdout and stderr.
	logFile string
	// cacheDir is its --git-cache-dir, fresh per daemon.
	cacheDir string
	// memLimit, when set, is the daemon's GOMEMLIMIT (the Go runtime's soft memory limit,
	// e.g. "200MiB"); the daemon alone gets it, not the control plane.
	memLimit string
	// electLeader leaves leader election on (the scale scenario's replicas coordinate
	// through Leases); off, the daemon runs with --leader-elect=false.
	electLeader bool
	// args are appended to the command line (the scale scenario's sharding flags).
	args []string
}

// daemon is a running `converge run`.
type daemon struct {
	cmd         *exec.Cmd
	log         *os.File
	logPath     string
	metricsURL  string
	readyzURL   string
	done        chan struct{}
	http        *http.Client
	startedAt   time.Time
	readyAfterS float64 // seconds from exec to /readyz answering 200
}

// startDaemon runs `converge run` with the watch cache (the default) and without leader
// election: one daemon, and a Lease renewed every 2 s would add two requests per 2 s to
// every steady-state count. It returns once /readyz answers, which is after the daemon has
// installed the Sync CRD and it is Established.
func startDaemon(ctx context.Context, o daemonOptions) (*daemon, error) {
	logf, err := os.Create(o.logFile)
	if err != nil {
		return nil, err
	}
	metrics, health := cluster.FreeAddr(), cluster.FreeAddr()
	d := &daemon{log: logf, logPath: o.logFile, metricsURL: "http://" + metrics + "/metrics", readyzURL: "http://" + health + "/readyz",
		done: make(chan struct{}), http: &http.Client{Timeout: 10 * time.Second}}
	args := []string{"run", "--kubeconfig", o.kubeconfig,
		"--metrics-addr", metrics, "--health-addr", health, "--pprof",
		"--concurrent", strconv.Itoa(o.concurrent), "--git-cache-dir", o.cacheDir, "--allow-local-git"}
	if !o.electLeader {
		args = append(args, "--leader-elect=false")
	}
	d.cmd = exec.Command(o.bin, append(args, o.args...)...)
	if o.memLimit != "" {
		d.cmd.Env = append(os.Environ(), "GOMEMLIMIT="+o.memLimit)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the benchmark
	d.startedAt = time.Now()
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-d.done:
			return false, fmt.Errorf("converge run exited: %s", d.cmd.ProcessState)
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.readyzURL, nil)
		if err != nil {
			return false, err
		}
		resp, err := d.http.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		_ = d.stop()
		return nil, fmt.Errorf("daemon not ready (log %s): %w", o.logFile, err)
	}
	d.readyAfterS = time.Since(d.startedAt).Seconds()
	return d, nil
}

// heapProfileEnv names a folder; when set, the daemon's heap profile is saved there after
// every scenario's quiet intervals, as daemon-<run>-<syncs>-syncs.heap.pprof (the chart
// scenario: daemon-<run>-chart.heap.pprof; the scale scenario: scale-<replicas>-r<i>.heap.pprof,
// one per replica).
const heapProfileEnv = "CONVERGE_BENCH_HEAPPROFILE"

// saveHeapProfile saves the daemon's heap profile (GET /debug/pprof/heap) as name in the
// folder heapProfileEnv names; nothing when it is not set.
func (d *daemon) saveHeapProfile(ctx context.Context, name string) error {
	dir := os.Getenv(heapProfileEnv)
	if dir == "" {
		return nil
	}
	// gc=1: a collection first, so that the profile shows what is live, not what became
	// garbage since the last collection.
	url := strings.TrimSuffix(d.metricsURL, "/metrics") + "/debug/pprof/heap?gc=1"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// pid is the daemon's process ID.
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop interrupts the daemon and waits for a graceful exit, killing it after 45 s.
func (d *daemon) stop() error {
	defer d.log.Close()
	select {
	case <-d.done:
		return nil
	default:
	}
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
		return nil
	case <-time.After(45 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("converge run %d ignored the interrupt; killed", d.pid())
	}
}

// procMemory is a process's memory from /proc/<pid>/status.
type procMemory struct {
	// PeakRSSMB is VmHWM, the peak resident set since the process started.
	PeakRSSMB float64 `json:"peakRssMB"`
	// RSSMB is VmRSS, the resident set now: RssAnon (the process's own memory: Go's heap,
	// stacks and runtime) plus RssFile (pages of files mapped in, mostly the binary's code
	// and read-only data, which the kernel can drop and read again).
	RSSMB     float64 `json:"rssMB"`
	RSSAnonMB float64 `json:"rssAnonMB"`
	RSSFileMB float64 `json:"rssFileMB"`
}

// readProcMemory reads VmHWM and VmRSS of pid.
func readProcMemory(pid int) (procMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMemory{}, err
	}
	defer f.Close()
	var m procMemory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "VmHWM:":
			m.PeakRSSMB = kb / 1024
		case "VmRSS:":
			m.RSSMB = kb / 1024
		case "RssAnon:":
			m.RSSAnonMB = kb / 1024
		case "RssFile:":
			m.RSSFileMB = kb / 1024
		}
	}
	return m, sc.Err()
}

// daemonMetrics are the parts of the daemon's /metrics the benchmark reads.
type daemonMetrics struct {
	// Requests are converge_api_requests_total by verb, mapped to the table's verbs: get
	// (GET, which includes lists), watch, create (POST), update (PUT), patch, delete.
	Requests Counts
	// NotOK are the requests answered with a code other than 2xx, by code ("error": no
	// response). A 404 is routine: the inventory GET of a new Sync, for one.
	NotOK Counts
	// Reconciles are converge_reconciles_total by Sync name, and Unsuccessful those with a
	// result other than success.
	Reconciles   map[string]int
	Unsuccessful map[string]int
	// ReconcileSeconds and LoadSeconds are the sums over every Sync of
	// converge_reconcile_duration_seconds and converge_source_load_duration_seconds (fetch
	// and render): where the daemon's workers spent their time.
	ReconcileSeconds, LoadSeconds float64
	// HeapInuseMB is go_memstats_heap_inuse_bytes (0 when not exported).
	HeapInuseMB float64
	// Shards, ShardsHeld and SyncsOwned are the gauges converge_shards, converge_shards_held
	// and converge_syncs_owned of --sharding=auto (-1 when not exported); Handovers is
	// converge_shard_handovers_total by event.
	Shards, ShardsHeld, SyncsOwned int
	Handovers                      map[string]int
	// Go is the Go runtime's view of the daemon's memory.
	Go goMemory
}

// goMemory is what the Go runtime says of a process's memory (its go_memstats_* series), in
// MB: what of the resident set is live heap, heap freed but not returned to the OS, or the
// runtime's own.
type goMemory struct {
	// HeapInuseMB: spans with live objects (and their fragmentation).
	HeapInuseMB float64 `json:"heapInuseMB"`
	// HeapIdleMB − HeapReleasedMB: freed heap still held by the process (counted in RSS
	// until the scavenger returns it).
	HeapIdleMB     float64 `json:"heapIdleMB"`
	HeapReleasedMB float64 `json:"heapReleasedMB"`
	// NextGCMB is the heap size at which the next GC starts.
	NextGCMB float64 `json:"nextGCMB"`
	// SysMB is everything the runtime obtained from the OS.
	SysMB float64 `json:"sysMB"`
	// StackInuseMB is the goroutine stacks.
	StackInuseMB float64 `json:"stackInuseMB"`
}

// String formats g for the log and the report's notes.
func (g goMemory) String() string {
	return fmt.Sprintf("heap in use %.0f MB, freed not returned %.0f MB, next GC at %.0f MB, stacks %.0f MB, from the OS %.0f MB",
		g.HeapInuseMB, g.HeapIdleMB-g.HeapReleasedMB, g.NextGCMB, g.StackInuseMB, g.SysMB)
}

// set records the go_memstats_* series name, when it is one of g's, at v bytes.
func (g *goMemory) set(name string, v float64) {
	mb := v / (1 << 20)
	switch name {
	case "go_memstats_heap_inuse_bytes":
		g.HeapInuseMB = mb
	case "go_memstats_heap_idle_bytes":
		g.HeapIdleMB = mb
	case "go_memstats_heap_released_bytes":
		g.HeapReleasedMB = mb
	case "go_memstats_next_gc_bytes":
		g.NextGCMB = mb
	case "go_memstats_sys_bytes":
		g.SysMB = mb
	case "go_memstats_stack_inuse_bytes":
		g.StackInuseMB = mb
	}
}

// reconciles sums Reconciles.
func (m daemonMetrics) reconciles() int {
	n := 0
	for _, v := range m.Reconciles {
		n += v
	}
	return n
}

// scrape reads the daemon's /metrics.
func (d *daemon) scrape(ctx context.Context) (daemonMetrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.metricsURL, nil)
	if err != nil {
		return daemonMetrics{}, err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return daemonMetrics{}, fmt.Errorf("daemon metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return daemonMetrics{}, fmt.Errorf("daemon metrics: %s: %s", resp.Status, b)
	}
	return parseDaemonMetrics(resp.Body)
}

// parseDaemonMetrics reads the series of daemonMetrics from the Prometheus text format.
func parseDaemonMetrics(r io.Reader) (daemonMetrics, error) {
	m := daemonMetrics{Requests: Counts{}, NotOK: Counts{}, Reconciles: map[string]int{}, Unsuccessful: map[string]int{},
		Shards: -1, ShardsHeld: -1, SyncsOwned: -1, Handovers: map[string]int{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			v, _ := strconv.ParseFloat(f[1], 64)
			switch {
			case strings.HasPrefix(f[0], "go_memstats_"):
				m.Go.set(f[0], v)
				m.HeapInuseMB = m.Go.HeapInuseMB
			case f[0] == "converge_shards":
				m.Shards = int(v)
			case f[0] == "converge_shards_held":
				m.ShardsHeld = int(v)
			case f[0] == "converge_syncs_owned":
				m.SyncsOwned = int(v)
			}
			continue
		}
		switch name {
		case "converge_shard_handovers_total":
			if labels, v, ok := parseSample("{" + rest); ok {
				m.Handovers[labels["event"]] += int(v)
			}
		case "converge_api_requests_total":
			labels, v, ok := parseSample("{" + rest)
			if !ok {
				continue
			}
			m.Requests[daemonVerb(labels["verb"])] += int(v)
			if code := labels["code"]; !strings.HasPrefix(code, "2") {
				m.NotOK[code] += int(v)
			}
		case "converge_reconcile_duration_seconds_sum", "converge_source_load_duration_seconds_sum":
			_, v, ok := parseSample("{" + rest)
			if !ok {
				continue
			}
			if name == "converge_reconcile_duration_seconds_sum" {
				m.ReconcileSeconds += v
			} else {
				m.LoadSeconds += v
			}
		case "converge_reconciles_total":
			labels, v, ok := parseSample("{" + rest)
			if !ok {
				continue
			}
			m.Reconciles[labels["name"]] += int(v)
			if labels["result"] != "success" {
				m.Unsuccessful[labels["name"]] += int(v)
			}
		}
	}
	return m, sc.Err()
}

// daemonVerb maps the daemon's verb label (the lower-case HTTP method, or watch) to the
// verbs of the table.
func daemonVerb(v string) string {
	switch v {
	case "post":
		return "create"
	case "put":
		return "update"
	default:
		return v
	}
}

// writes counts the requests of c that may write: create, update, patch, delete. The
// daemon's metric does not tell a server-side dry-run from an apply.
func writes(c Counts) int {
	return c["create"] + c["update"] + c["patch"] + c["delete"] + c["deletecollection"]
}

// logErrors returns how many klog error lines (E<mmdd> ...) the log at path holds and up
// to five distinct ones, their headers cut.
func logErrors(path string) (int, []string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	n, seen := 0, map[string]bool{}
	var first []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 5 || line[0] != 'E' || !isDigits(line[1:5]) {
			continue
		}
		n++
		msg := line
		if _, after, ok := strings.Cut(line, "] "); ok {
			msg = after
		}
		msg = truncateString(msg, 300)
		if !seen[msg] && len(first) < 5 {
			seen[msg] = true
			first = append(first, msg)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, bufio.ErrTooLong) {
		return n, first, err
	}
	return n, first, nil
}

// isDigits reports whether s is all ASCII digits.
func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// truncateString cuts s to n bytes, marking the cut.
func truncateString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// String formats m for the log and the report's notes.
func (m procMemory) String() string {
	return fmt.Sprintf("peak RSS %.0f MB, RSS %.0f MB (anonymous %.0f, files %.0f)", m.PeakRSSMB, m.RSSMB, m.RSSAnonMB, m.RSSFileMB)
}
