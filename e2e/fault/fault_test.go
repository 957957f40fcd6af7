package fault

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name, method, url string
		want              requestInfo
	}{
		{"core get", "GET", "/api/v1/namespaces/a/configmaps/x", requestInfo{"get", "configmaps", "", "x"}},
		{"core list", "GET", "/api/v1/namespaces/a/configmaps", requestInfo{"list", "configmaps", "", ""}},
		{"watch", "GET", "/api/v1/namespaces/a/configmaps?watch=true", requestInfo{"watch", "configmaps", "", ""}},
		{"watch=1", "GET", "/apis/converge.dev/v1alpha1/syncs?watch=1", requestInfo{"watch", "syncs", "", ""}},
		{"cluster scoped", "DELETE", "/api/v1/namespaces/a", requestInfo{"delete", "namespaces", "", "a"}},
		{"status patch", "PATCH", "/apis/converge.dev/v1alpha1/namespaces/a/syncs/web/status", requestInfo{"patch", "syncs", "status", "web"}},
		{"create", "POST", "/apis/apps/v1/namespaces/a/deployments", requestInfo{"create", "deployments", "", ""}},
		{"discovery", "GET", "/apis", requestInfo{verb: "get"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parse(httptest.NewRequest(tt.method, tt.url, nil))
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(requestInfo{})); diff != "" {
				t.Errorf("parse (-want +got):\n%s", diff)
			}
		})
	}
}

// inner is the transport behind the fault Transport: it counts what reaches it and answers
// watches with a stream the test writes into.
type inner struct {
	mu     sync.Mutex
	calls  int
	stream *io.PipeWriter
}

func (o *inner) RoundTrip(req *http.Request) (*http.Response, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if parse(req).verb == "watch" {
		r, w := io.Pipe()
		o.stream = w
		return &http.Response{StatusCode: 200, Body: r, ContentLength: -1, Request: req}, nil
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: req}, nil
}

func (o *inner) reached() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.calls
}

// clock is a settable clock for rule windows.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newTransport() (*Transport, *inner, *clock) {
	in := &inner{}
	c := &clock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	tr := &Transport{now: c.Now}
	tr.Wrap(in)
	return tr, in, c
}

const (
	statusURL = "/apis/converge.dev/v1alpha1/namespaces/a/syncs/web/status"
	watchURL  = "/api/v1/namespaces/a/configmaps?watch=true"
	getURL    = "/api/v1/namespaces/a/configmaps/x"
)

func send(t *testing.T, tr *Transport, ctx context.Context, method, url string) (*http.Response, error) {
	t.Helper()
	return tr.RoundTrip(httptest.NewRequest(method, url, nil).WithContext(ctx))
}

func code(t *testing.T, tr *Transport, method, url string) int {
	t.Helper()
	resp, err := send(t, tr, context.Background(), method, url)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func TestRulesInjectThenPass(t *testing.T) {
	tr, in, _ := newTransport()
	tr.SetRules(Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 2, Status: 409})
	var codes []int
	for i := 0; i < 3; i++ {
		codes = append(codes, code(t, tr, "PATCH", statusURL))
	}
	if diff := cmp.Diff([]int{409, 409, 200}, codes); diff != "" {
		t.Errorf("status codes (-want +got):\n%s", diff)
	}
	if in.reached() != 1 || tr.Injected() != 2 || tr.Mutating() != 3 || tr.Faults()["status 409"] != 2 {
		t.Errorf("forwarded %d, injected %d (%v), mutating %d; want 1, 2, 3", in.reached(), tr.Injected(), tr.Faults(), tr.Mutating())
	}
}

// TestRuleWindow checks a rule acts only inside its window, counted from SetRules, and that
// SetRules restarts the window.
func TestRuleWindow(t *testing.T) {
	tr, _, c := newTransport()
	tr.SetRules(Rule{Verb: "get", After: 10 * time.Second, For: 5 * time.Second, Status: 503})
	var codes []int
	for _, step := range []time.Duration{0, 10 * time.Second, 4 * time.Second, time.Second} {
		c.Add(step)
		codes = append(codes, code(t, tr, "GET", getURL))
	}
	tr.SetRules(Rule{Verb: "get", For: 5 * time.Second, Status: 503})
	codes = append(codes, code(t, tr, "GET", getURL))
	if diff := cmp.Diff([]int{200, 503, 503, 200, 503}, codes); diff != "" {
		t.Errorf("status codes at 0s, 10s, 14s, 15s, new phase (-want +got):\n%s", diff)
	}
}

// TestLatencyWaitsBeforeForwarding checks a delayed request has not reached the server while
// it waits, fails with its context, and is forwarded once the delay passed.
func TestLatencyWaitsBeforeForwarding(t *testing.T) {
	tr, in, _ := newTransport()
	tr.SetRules(Rule{Verb: "get", Times: 1, Latency: time.Hour}, Rule{Verb: "get", Latency: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := send(t, tr, ctx, "GET", getURL)
		done <- err
	}()
	waitFor(t, "the delay to start", func() bool { return tr.Faults()["latency"] == 1 })
	if n := in.reached(); n != 0 {
		t.Fatalf("a delayed request reached the server (%d calls)", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("delayed request with a cancelled context: err = %v, want context.Canceled", err)
	}
	if n := in.reached(); n != 0 {
		t.Errorf("a cancelled delayed request reached the server (%d calls)", n)
	}
	if c := code(t, tr, "GET", getURL); c != 200 || in.reached() != 1 {
		t.Errorf("after a short delay: status %d, %d calls; want 200 forwarded once", c, in.reached())
	}
}

// TestBlackhole checks a blackholed request never reaches the server and hangs until its
// context ends, its window ends, or the rules change, and then fails with ErrInjected.
func TestBlackhole(t *testing.T) {
	tests := []struct {
		name    string
		rule    Rule
		release func(tr *Transport, cancel context.CancelFunc)
		want    error
	}{
		{"context ends", Rule{Blackhole: true}, func(_ *Transport, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"rules replaced", Rule{Blackhole: true}, func(tr *Transport, _ context.CancelFunc) { tr.SetRules() }, ErrInjected},
		{"window ends", Rule{Blackhole: true, For: time.Millisecond}, func(*Transport, context.CancelFunc) {}, ErrInjected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, in, _ := newTransport()
			tr.SetRules(tt.rule)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := send(t, tr, ctx, "PATCH", statusURL)
				done <- err
			}()
			waitFor(t, "the request to enter the blackhole", func() bool { return tr.Faults()["blackhole"] == 1 })
			tt.release(tr, cancel)
			if err := <-done; !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if n := in.reached(); n != 0 {
				t.Errorf("a blackholed request reached the server (%d calls)", n)
			}
			if tr.Mutating() != 1 {
				t.Errorf("the blackholed write was not counted as sent")
			}
		})
	}
}

// TestDropResponse checks the request reached the server and the caller got ErrInjected.
func TestDropResponse(t *testing.T) {
	tr, in, _ := newTransport()
	tr.SetRules(Rule{Verb: "patch", DropResponse: true})
	if _, err := send(t, tr, context.Background(), "PATCH", statusURL); !errors.Is(err, ErrInjected) {
		t.Fatalf("err = %v, want ErrInjected", err)
	}
	if in.reached() != 1 {
		t.Errorf("a dropped response's request reached the server %d times, want 1", in.reached())
	}
}

// TestExpireWatch checks a watch is answered, without reaching the server, by a stream with
// one ERROR event carrying 410 Expired, or by a plain 410 for a protobuf-only client.
func TestExpireWatch(t *testing.T) {
	tr, in, _ := newTransport()
	tr.SetRules(Rule{Verb: "watch", ExpireWatch: true})
	resp, err := send(t, tr, context.Background(), "GET", watchURL)
	if err != nil {
		t.Fatal(err)
	}
	var event struct {
		Type   string
		Object struct {
			Code   int
			Reason string
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&event); err != nil {
		t.Fatal(err)
	}
	got := []any{resp.StatusCode, event.Type, event.Object.Code, event.Object.Reason}
	if diff := cmp.Diff([]any{200, "ERROR", 410, "Expired"}, got); diff != "" {
		t.Errorf("expired watch (-want +got):\n%s", diff)
	}
	req := httptest.NewRequest("GET", watchURL, nil)
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf;stream=watch")
	resp, err = tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusGone || in.reached() != 0 {
		t.Errorf("protobuf-only watch: status %d, %d calls reached the server; want 410 and none", resp.StatusCode, in.reached())
	}
}

// openWatch opens a watch through tr and returns its body, the server's end of the stream,
// and a channel of the body's reads.
func openWatch(t *testing.T, tr *Transport, in *inner) (io.ReadCloser, *io.PipeWriter, chan readResult) {
	t.Helper()
	resp, err := send(t, tr, context.Background(), "GET", watchURL)
	if err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	w := in.stream
	in.mu.Unlock()
	reads := make(chan readResult, 16)
	go func() {
		for {
			b := make([]byte, 64)
			n, err := resp.Body.Read(b)
			reads <- readResult{string(b[:n]), err}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp.Body, w, reads
}

type readResult struct {
	data string
	err  error
}

// quiet checks nothing was read for a while: a held stream must not deliver. (It can only
// miss a bug, never fail a correct stream.)
func quiet(t *testing.T, reads chan readResult, what string) {
	t.Helper()
	select {
	case r := <-reads:
		t.Fatalf("%s: the stream delivered %q (err %v)", what, r.data, r.err)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestFreezeWatchHoldsThenDelivers checks a frozen watch delivers nothing during the window
// and everything, in order, after it: an informer's cache is frozen, then catches up.
func TestFreezeWatchHoldsThenDelivers(t *testing.T) {
	tr, in, c := newTransport()
	tr.SetRules(Rule{Verb: "watch", Resource: "configmaps", FreezeWatch: true, For: time.Minute})
	_, w, reads := openWatch(t, tr, in)
	if _, err := io.WriteString(w, "event-1\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to be frozen", func() bool { return tr.Faults()["freeze"] == 1 })
	quiet(t, reads, "frozen")
	c.Add(time.Minute)
	if r := <-reads; r.data != "event-1\n" || r.err != nil {
		t.Fatalf("after the window: read %q, %v; want event-1", r.data, r.err)
	}
	if _, err := io.WriteString(w, "event-2\n"); err != nil {
		t.Fatal(err)
	}
	if r := <-reads; r.data != "event-2\n" {
		t.Errorf("read %q, want event-2 to flow", r.data)
	}
	_ = w.Close()
	if r := <-reads; r.err != io.EOF {
		t.Errorf("end of stream: %v, want EOF", r.err)
	}
}

// TestBlackholeStallsOpenWatch checks a watch opened before a blackhole delivers nothing
// while it lasts and then breaks: what arrived meanwhile is lost with the connection.
func TestBlackholeStallsOpenWatch(t *testing.T) {
	tr, in, _ := newTransport()
	_, w, reads := openWatch(t, tr, in)
	tr.SetRules(Rule{Blackhole: true})
	go func() { _, _ = io.WriteString(w, "lost\n") }()
	waitFor(t, "the stream to stall", func() bool { return tr.Faults()["stall"] == 1 })
	quiet(t, reads, "stalled")
	tr.SetRules()
	if r := <-reads; !errors.Is(r.err, ErrInjected) || r.data != "" {
		t.Errorf("after the blackhole: read %q, %v; want no data and ErrInjected", r.data, r.err)
	}
}

// TestCloseAfterBreaksWatch checks a watch with CloseAfter breaks with ErrInjected and closes
// the server's end.
func TestCloseAfterBreaksWatch(t *testing.T) {
	tr, in, _ := newTransport()
	tr.SetRules(Rule{Verb: "watch", CloseAfter: time.Millisecond})
	_, w, reads := openWatch(t, tr, in)
	if r := <-reads; !errors.Is(r.err, ErrInjected) {
		t.Fatalf("read %q, %v; want ErrInjected", r.data, r.err)
	}
	if _, err := io.WriteString(w, "after"); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("the server's end was not closed: write err %v", err)
	}
}

// waitFor polls cond for up to 10 s (a liveness bound, not a timing assertion).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
