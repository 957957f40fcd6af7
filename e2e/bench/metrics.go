package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"k8s.io/client-go/rest"

	"github.com/converge-dev/converge/e2e/fault"
)

// verbs are the request verbs of the table, in order. Server-side apply and its dry-run are
// PATCH requests (the API server labels them APPLY); both are counted as "patch".
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}

// Counts are requests by verb, plus "dryRun" (server-side dry-runs, included in their verb)
// and, for the client side, "discovery" (requests without a resource, included in get/list).
type Counts map[string]int

// Total returns the requests of every verb.
func (c Counts) Total() int {
	n := 0
	for _, v := range verbs {
		n += c[v]
	}
	return n
}

// String renders c as "get=1 patch=2(dry=1)", verbs in table order, zeros left out.
func (c Counts) String() string {
	var parts []string
	for _, v := range verbs {
		if c[v] == 0 {
			continue
		}
		s := fmt.Sprintf("%s=%d", v, c[v])
		if v == "patch" && c["dryRun"] > 0 {
			s += fmt.Sprintf("(dry=%d)", c["dryRun"])
		}
		parts = append(parts, s)
	}
	if c["discovery"] > 0 {
		parts = append(parts, fmt.Sprintf("disc=%d", c["discovery"]))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}

// counter counts an engine's requests: by verb with the e2e/fault transport, and the
// server-side dry-runs and discovery requests that transport does not tell apart.
type counter struct {
	tr        *fault.Transport
	next      http.RoundTripper
	dryRun    atomic.Int64
	discovery atomic.Int64
}

// countedConfig returns a copy of cfg whose requests are counted by the returned counter.
func countedConfig(cfg *rest.Config) (*rest.Config, *counter) {
	c := &counter{}
	var counted *rest.Config
	counted, c.tr = fault.Config(cfg)
	counted.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &extraCounter{c: c, next: rt}
	})
	return counted, c
}

// extraCounter is the part of counter that sits in the transport chain.
type extraCounter struct {
	c    *counter
	next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (e *extraCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("dryRun") != "" {
		e.c.dryRun.Add(1)
	}
	if isDiscovery(req.URL.Path) {
		e.c.discovery.Add(1)
	}
	return e.next.RoundTrip(req)
}

// isDiscovery reports whether path names no resource: /api, /api/v1, /apis, /apis/g,
// /apis/g/v, /openapi/..., /version.
func isDiscovery(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case parts[0] == "api":
		return len(parts) <= 2
	case parts[0] == "apis":
		return len(parts) <= 3
	default:
		return true
	}
}

// reset zeroes the counts.
func (c *counter) reset() {
	c.tr.Reset()
	c.dryRun.Store(0)
	c.discovery.Store(0)
}

// snapshot returns the counts since the last reset.
func (c *counter) snapshot() Counts {
	out := Counts{}
	for _, v := range verbs {
		if n := c.tr.Count(v); n > 0 {
			out[v] = n
		}
	}
	out["dryRun"] = int(c.dryRun.Load())
	out["discovery"] = int(c.discovery.Load())
	return out
}

// serverVerb maps an apiserver_request_total verb label to the verbs of the table.
func serverVerb(v string) string {
	switch v {
	case "POST":
		return "create"
	case "PUT":
		return "update"
	case "PATCH", "APPLY":
		return "patch"
	default:
		return strings.ToLower(v)
	}
}

// scrapeRequests sums the API server's apiserver_request_total by verb, counting
// dry-runs also under "dryRun". Requests without a resource (/metrics, discovery) and to
// leases (the server's own heartbeats) are left out.
func scrapeRequests(ctx context.Context, hc *http.Client, host string) (Counts, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("metrics: %s: %s", resp.Status, b)
	}
	out := Counts{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value, ok := parseSample(line[len("apiserver_request_total"):])
		if !ok || labels["resource"] == "" || labels["resource"] == "leases" {
			continue
		}
		out[serverVerb(labels["verb"])] += int(value)
		if labels["dry_run"] != "" {
			out["dryRun"] += int(value)
		}
	}
	return out, sc.Err()
}

// parseSample parses `{a="x",b="y"} 12` of the Prometheus text format.
func parseSample(s string) (map[string]string, float64, bool) {
	end := strings.LastIndex(s, "}")
	if !strings.HasPrefix(s, "{") || end < 0 {
		return nil, 0, false
	}
	labels := map[string]string{}
	body := s[1:end]
	for body != "" {
		eq := strings.Index(body, `="`)
		if eq < 0 {
			return nil, 0, false
		}
		name := strings.TrimLeft(body[:eq], ",")
		rest := body[eq+2:]
		var val strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			val.WriteByte(rest[i])
		}
		labels[name] = val.String()
		body = strings.TrimPrefix(rest[min(i+1, len(rest)):], ",")
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	return labels, v, err == nil
}

// sub returns after − before per key, dropping zeros.
func sub(after, before Counts) Counts {
	out := Counts{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// memory is the process' memory after an operation.
type memory struct {
	PeakRSSMB   float64 `json:"peakRssMB"`
	HeapInuseMB float64 `json:"heapInuseMB"`
}

// readMemory returns the process-wide peak RSS (getrusage ru_maxrss, KiB on Linux) and the
// Go heap in use now.
func readMemory() memory {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memory{PeakRSSMB: float64(ru.Maxrss) / 1024, HeapInuseMB: float64(ms.HeapInuse) / (1 << 20)}
}

// median returns the median of xs (the lower middle for an even count), or 0.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

// cpuTime is CPU time spent during a run, in seconds: by the engine's process and by the
// control plane (etcd and kube-apiserver), which share the machine's cores.
type cpuTime struct {
	EngineSeconds float64 `json:"engineSeconds"`
	ServerSeconds float64 `json:"serverSeconds"`
}

// clockTicks is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const clockTicks = 100

// readCPU returns the CPU time used so far by this process and by the processes pids.
func readCPU(pids []int) cpuTime {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t := cpuTime{EngineSeconds: tvSeconds(ru.Utime) + tvSeconds(ru.Stime)}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): state is the 3rd field,
		// utime and stime the 14th and 15th.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		k, _ := strconv.ParseFloat(f[12], 64)
		t.ServerSeconds += (u + k) / clockTicks
	}
	return t
}

func tvSeconds(tv syscall.Timeval) float64 { return float64(tv.Sec) + float64(tv.Usec)/1e6 }

// since returns the CPU time spent between before and t.
func (t cpuTime) since(before cpuTime) cpuTime {
	return cpuTime{EngineSeconds: t.EngineSeconds - before.EngineSeconds, ServerSeconds: t.ServerSeconds - before.ServerSeconds}
}
