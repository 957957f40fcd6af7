package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/converge-dev/converge/e2e/cluster"
)

// A real Prometheus for the metrics tests: started on loopback, queried over its HTTP API.

func prometheusBinary(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/prometheus", "prometheus"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("needs a real Prometheus: apt-get install prometheus (/usr/bin/prometheus); required when CI is set")
	}
	t.Fatal("prometheus is not installed (/usr/bin/prometheus); .ci/run must install the Debian package prometheus")
	return ""
}

// promServer is a Prometheus started for one test.
type promServer struct {
	t   *testing.T
	url string
	out *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startPrometheus runs bin on loopback, scraping the targets (one job, "converge") every
// second and evaluating the shipped rules every second, until the test ends.
func startPrometheus(t *testing.T, bin string, targets ...string) *promServer {
	t.Helper()
	rules, err := filepath.Abs(filepath.Join(monitoringDir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: converge
    static_configs: [{targets: [%s]}]
`, rules, quoteAll(targets))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := cluster.FreeAddr()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	p := &promServer{t: t, url: "http://" + addr, out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", p.out.String())
		}
	})
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("prometheus exited: %v\n%s", err, p.out.String())
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("prometheus never ready: %v", err)
	}
	return p
}

// quoteAll is the targets as a YAML flow sequence's items.
func quoteAll(targets []string) string {
	q := make([]string, len(targets))
	for i, t := range targets {
		q[i] = fmt.Sprintf("%q", t)
	}
	return strings.Join(q, ", ")
}

// sample is one series of an instant query result.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates expr now; a parse or evaluation error is returned as an error.
func (p *promServer) query(expr string) ([]sample, error) {
	resp, err := http.Get(p.url + "/api/v1/query?" + url.Values{"query": {expr}}.Encode())
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status, Error string
		Data          struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("status %s: %s", r.Status, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		var out []sample
		err := json.Unmarshal(r.Data.Result, &out)
		return out, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(r.Data.Result, &v)
		return []sample{{Value: v}}, err
	}
	return nil, fmt.Errorf("result type %s, want an instant vector or scalar", r.Data.ResultType)
}

// waitFor polls expr until cond holds for its result, failing the test otherwise.
func (p *promServer) waitFor(what, expr string, cond func([]sample) bool) []sample {
	p.t.Helper()
	var got []sample
	var qerr error
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		got, qerr = p.query(expr)
		if qerr != nil {
			return false, qerr // a query that does not parse never will
		}
		return cond(got), nil
	})
	if err != nil {
		p.t.Fatalf("%s: %s never held: %v; last result %v", what, expr, err, got)
	}
	return got
}

// waitRulesHealthy waits until Prometheus has loaded and evaluated every shipped rule
// without error.
func (p *promServer) waitRulesHealthy() {
	p.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get(p.url + "/api/v1/rules")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct {
					Rules []struct {
						Name, Health, LastError string
					}
				}
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return false, err
		}
		n, healthy := 0, true
		last = ""
		for _, g := range r.Data.Groups {
			for _, rule := range g.Rules {
				n++
				if rule.Health != "ok" {
					healthy = false
					last += fmt.Sprintf("%s: %s %s; ", rule.Name, rule.Health, rule.LastError)
				}
			}
		}
		return n > 0 && healthy, nil
	})
	if err != nil {
		p.t.Fatalf("the rules of rules.yaml were never loaded and healthy: %v; %s", err, last)
	}
}

// evaluateAll evaluates every dashboard query (variables set for namespace) and alert
// expression; each must parse. It returns the number of series of each.
func (p *promServer) evaluateAll(t *testing.T, m monitoring, namespace string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, q := range m.queries() {
		expr := substitute(q.expr, namespace)
		if strings.Contains(expr, "$") {
			t.Errorf("%s: unknown variable in %q", q.source, expr)
			continue
		}
		got, err := p.query(expr)
		if err != nil {
			t.Errorf("%s: %q: %v", q.source, expr, err)
			continue
		}
		out[q.source] = len(got)
	}
	return out
}

func nonEmpty(s []sample) bool { return len(s) > 0 }
func isEmpty(s []sample) bool  { return len(s) == 0 }

// hasSeries holds when a series of the Sync namespace/name is in the result.
func hasSeries(namespace, name string) func([]sample) bool {
	return func(s []sample) bool {
		return slices.ContainsFunc(s, func(x sample) bool { return x.Metric["namespace"] == namespace && x.Metric["name"] == name })
	}
}

// atLeast holds when the first sample's value is at least v.
func atLeast(v float64) func([]sample) bool {
	return func(s []sample) bool {
		if len(s) == 0 {
			return false
		}
		str, _ := s[0].Value[1].(string)
		var got float64
		_, err := fmt.Sscan(str, &got)
		return err == nil && got >= v
	}
}
