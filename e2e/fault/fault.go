// Package fault injects faults into Kubernetes API traffic for tests and counts requests by
// verb. Three ways in:
//
//   - Transport, an http.RoundTripper around a client's transport (cfg.Wrap(t.Wrap), or
//     Config), that applies Rules: error statuses (409, 429 with Retry-After, 500, 503),
//     latency, a blackhole, forward-then-drop, watch streams that break, expire (410 in the
//     stream) or freeze, each by verb, resource, subresource, name, count, seeded
//     probability and time window;
//   - Proxy, a TLS reverse proxy in front of kube-apiserver whose traffic goes through a
//     Transport, for black-box runs of the built binary;
//   - StaleReader, a client.Reader serving chosen kinds from a frozen snapshot, the way an
//     informer cache lags behind the API server.
//
// Production code must not import this package.
package fault

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
)

// Rule matches requests and says what to do with them. Empty match fields match anything.
//
// A request takes the first rule that matches it, is active and passes its Times and
// Probability; that rule's actions run in this order: Latency, Blackhole, Status or
// ExpireWatch (answered without forwarding), forward, DropResponse, CloseAfter. FreezeWatch
// and the stall of open streams by a Blackhole act on watch streams and are not request
// actions: they apply to every matching stream while the rule is active.
type Rule struct {
	// Verb is the Kubernetes verb: get, list, watch, create, update, patch, delete.
	Verb string
	// Resource is the plural resource, e.g. "syncs"; Subresource e.g. "status".
	Resource    string
	Subresource string
	// Name of the object, if any.
	Name string
	// Times limits the rule to its first n matches; 0 means every match.
	Times int
	// Probability applies the rule to this share of matching requests (0 means all), drawn
	// from the Transport's seeded source so a seed replays the same schedule.
	Probability float64
	// After and For are the rule's time window, counted from the SetRules call that
	// installed it: active from After until After+For; For 0 means until the rules are
	// replaced. SetRules itself switches rules per phase of a test.
	After, For time.Duration

	// Status answers the request with this HTTP status without forwarding it (a Kubernetes
	// Status body; 429 carries Retry-After: 1).
	Status int
	// Latency delays the request this long before it proceeds (or fails with its context).
	Latency time.Duration
	// Blackhole never answers: the request hangs until its context ends or the rule stops
	// being active (its window ends, or SetRules replaces it), then fails with an error; it
	// never reaches the server, so nothing it asked for happened. Watch streams opened
	// earlier whose request matches the rule deliver nothing while it is active and then
	// break, as connections through a partition do.
	Blackhole bool
	// DropResponse forwards the request and then fails the call: the write landed, the
	// client sees an error.
	DropResponse bool
	// ExpireWatch answers a watch with a stream holding one ERROR event, 410 Expired ("too
	// old resource version"), without forwarding it: the client must relist. Clients that do
	// not accept JSON get a plain 410 response instead.
	ExpireWatch bool
	// CloseAfter forwards the request and breaks its response stream (a watch) this long
	// after the response began, as a dropped connection does.
	CloseAfter time.Duration
	// FreezeWatch holds back what matching watch streams receive while the rule is active,
	// and delivers it in order once the rule ends: the client's informer cache is frozen for
	// the window and then catches up. Lists and gets are not affected.
	FreezeWatch bool

	hits int
}

// requestAction reports whether the rule does something to a request at the moment it is
// sent (as opposed to FreezeWatch, which only acts on streams).
func (r *Rule) requestAction() bool {
	return r.Status != 0 || r.Latency > 0 || r.Blackhole || r.DropResponse || r.ExpireWatch || r.CloseAfter > 0
}

func (r *Rule) matches(info requestInfo) bool {
	return (r.Verb == "" || r.Verb == info.verb) && (r.Resource == "" || r.Resource == info.resource) &&
		(r.Subresource == "" || r.Subresource == info.subresource) && (r.Name == "" || r.Name == info.name)
}

// Transport is a fault-injecting, request-counting http.RoundTripper.
type Transport struct {
	mu       sync.Mutex
	next     http.RoundTripper
	rules    []*Rule
	since    time.Time     // when SetRules installed rules: the origin of their windows
	phase    chan struct{} // closed when SetRules replaces the rules
	counts   map[countKey]int
	writes   []string
	results  []string       // the outcome of each write: an HTTP status code or the fault that ate it
	spans    [][2]time.Time // when each write was sent and when its outcome came (zero: pending)
	resets   int            // Reset calls, so a write finishing after a Reset is not recorded
	injected int
	faults   map[string]int
	rand     *rand.Rand
	now      func() time.Time // the clock of rule windows; tests replace it
}

// ErrInjected is the error of a call failed by a fault (blackhole, dropped response, broken
// stream): errors.Is(err, ErrInjected) tells it from a real transport error.
var ErrInjected = errors.New("fault injected")

// Seed makes probabilistic rules replayable.
func (t *Transport) Seed(seed uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rand = rand.New(rand.NewPCG(seed, seed))
}

// Wrap returns a transport-wrapping function for rest.Config.Wrap that routes through t.
func (t *Transport) Wrap(rt http.RoundTripper) http.RoundTripper {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next = rt
	return t
}

// Config returns a copy of cfg whose requests go through a new Transport.
func Config(cfg *rest.Config) (*rest.Config, *Transport) {
	t := &Transport{}
	c := rest.CopyConfig(cfg)
	c.Wrap(t.Wrap)
	return c, t
}

// SetRules replaces the rules (a new phase of a test); their windows start now. Requests
// hanging in a blackhole of the old rules fail at once.
func (t *Transport) SetRules(rules ...Rule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rules = nil
	for i := range rules {
		r := rules[i]
		r.hits = 0
		t.rules = append(t.rules, &r)
	}
	t.since = t.clock()
	if t.phase != nil {
		close(t.phase)
	}
	t.phase = make(chan struct{})
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// active reports whether r is inside its window at now; the caller holds t.mu.
func (t *Transport) active(r *Rule, now time.Time) bool {
	start := t.since.Add(r.After)
	return !now.Before(start) && (r.For == 0 || now.Before(start.Add(r.For)))
}

// Count returns how many requests with the given verbs were sent so far (all when none).
func (t *Transport) Count(verbs ...string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	want := sets.New(verbs...)
	n := 0
	for k, c := range t.counts {
		if want.Len() == 0 || want.Has(k.verb) {
			n += c
		}
	}
	return n
}

// CountResource returns how many requests with verb were sent to resource (and subresource,
// when not empty), e.g. CountResource("patch", "syncs", "status").
func (t *Transport) CountResource(verb, resource, subresource string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, c := range t.counts {
		if k.verb == verb && k.resource == resource && (subresource == "" || k.subresource == subresource) {
			n += c
		}
	}
	return n
}

// Counts returns the request counts by "verb resource/subresource", for messages.
func (t *Transport) Counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int{}
	for k, c := range t.counts {
		out[k.verb+" "+k.resource+"/"+k.subresource] += c
	}
	return out
}

type countKey struct{ verb, resource, subresource string }

// Mutating returns how many writes were sent: create, update, patch and delete requests
// that are not server-side dry-runs.
func (t *Transport) Mutating() int {
	return len(t.Writes())
}

// Writes lists the writes sent since the last Reset, as "VERB /path", dry-runs excluded.
func (t *Transport) Writes() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.writes...)
}

// WriteResults lists the writes sent since the last Reset with what came of them, as
// "VERB /path: 409" (the status code the client saw) or "VERB /path: <error>", for messages.
func (t *Transport) WriteResults() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, len(t.writes))
	for i, w := range t.writes {
		out[i] = w + ": " + t.results[i]
	}
	return out
}

// TimedWrite is one write sent through a Transport and when: Start when it was sent, End
// when its outcome came (zero while pending).
type TimedWrite struct {
	Request    string // "VERB /path"
	Result     string // as in WriteResults
	Start, End time.Time
}

// TimedWrites lists the writes sent since the last Reset with when they were sent and
// answered, for tests that compare the writes of several clients in time.
func (t *Transport) TimedWrites() []TimedWrite {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]TimedWrite, len(t.writes))
	for i, w := range t.writes {
		out[i] = TimedWrite{Request: w, Result: t.results[i], Start: t.spans[i][0], End: t.spans[i][1]}
	}
	return out
}

// Injected returns how many faults were injected (request actions; see Faults for streams).
func (t *Transport) Injected() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.injected
}

// Faults returns how many faults of each kind were injected, by kind: "status 409",
// "latency", "blackhole", "drop", "expire", "close", and for streams "freeze" and "stall"
// (once per stream). Never reset.
func (t *Transport) Faults() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.faults))
	for k, v := range t.faults {
		out[k] = v
	}
	return out
}

func (t *Transport) note(kind string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.faults == nil {
		t.faults = map[string]int{}
	}
	t.faults[kind]++
}

// Reset zeroes the request counts and the list of writes.
func (t *Transport) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts = nil
	t.writes = nil
	t.results = nil
	t.spans = nil
	t.resets++
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	info := parse(req)
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[countKey]int{}
	}
	t.counts[countKey{info.verb, info.resource, info.subresource}]++
	if isWrite(info.verb) && req.URL.Query().Get("dryRun") == "" {
		t.writes = append(t.writes, req.Method+" "+req.URL.Path)
		t.results = append(t.results, "pending")
		t.spans = append(t.spans, [2]time.Time{time.Now()})
		i, resets := len(t.writes)-1, t.resets
		defer func() { t.recordResult(i, resets, resp, err) }()
	}
	var rule Rule // a copy: the actions, read without the lock
	var end time.Time
	if r := t.match(info); r != nil {
		t.injected++
		rule = *r
		if r.For > 0 {
			end = t.since.Add(r.After + r.For)
		}
	}
	next, phase := t.next, t.phase
	t.mu.Unlock()

	ctx := req.Context()
	if rule.Latency > 0 {
		t.note("latency")
		if err := sleep(ctx, rule.Latency); err != nil {
			return nil, err
		}
	}
	if rule.Blackhole {
		t.note("blackhole")
		return nil, t.hang(ctx, phase, end)
	}
	switch {
	case rule.ExpireWatch && info.verb == "watch":
		t.note("expire")
		return expiredWatchResponse(req), nil
	case rule.Status != 0:
		t.note("status " + strconv.Itoa(rule.Status))
		return statusResponse(req, rule.Status), nil
	}
	resp, err = next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if rule.DropResponse {
		t.note("drop")
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, injected("response dropped after the request was forwarded")
	}
	if info.verb == "watch" || rule.CloseAfter > 0 {
		if rule.CloseAfter > 0 {
			t.note("close")
		}
		resp.Body = t.newStream(ctx, info, resp.Body, rule.CloseAfter)
	}
	return resp, nil
}

// recordResult records the outcome of write i, unless the writes were Reset since.
func (t *Transport) recordResult(i, resets int, resp *http.Response, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.resets != resets {
		return
	}
	t.spans[i][1] = time.Now()
	switch {
	case err != nil:
		t.results[i] = err.Error()
	default:
		t.results[i] = strconv.Itoa(resp.StatusCode)
	}
}

// hang waits until ctx ends, the rules are replaced (phase closes) or end passes (if set).
func (t *Transport) hang(ctx context.Context, phase <-chan struct{}, end time.Time) error {
	var timeout <-chan time.Time
	if !end.IsZero() {
		timer := time.NewTimer(end.Sub(t.clock()))
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-phase:
	case <-timeout:
	}
	return injected("blackholed: no answer")
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// match returns the rule a request takes, counting its hit; the caller holds t.mu.
func (t *Transport) match(info requestInfo) *Rule {
	now := t.clock()
	for _, r := range t.rules {
		if !r.requestAction() || !r.matches(info) || !t.active(r, now) {
			continue
		}
		if r.Times > 0 && r.hits >= r.Times {
			continue
		}
		if r.Probability > 0 {
			if t.rand == nil {
				t.rand = rand.New(rand.NewPCG(1, 1))
			}
			if t.rand.Float64() >= r.Probability {
				continue
			}
		}
		r.hits++
		return r
	}
	return nil
}

// streamEffect is what the active rules do to an open stream of info: flow, freeze or stall.
// watch says whether a rule that can hold the stream is active or still to come, so the
// stream must look again as time passes; phase closes when the rules are replaced.
func (t *Transport) streamEffect(info requestInfo) (eff streamEffect, watch bool, phase <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock()
	eff = flow
	for _, r := range t.rules {
		if !(r.Blackhole || r.FreezeWatch) || !r.matches(info) {
			continue
		}
		if r.For == 0 || now.Before(t.since.Add(r.After+r.For)) {
			watch = true
		}
		if !t.active(r, now) {
			continue
		}
		switch {
		case r.Blackhole:
			eff = stalled
		case r.FreezeWatch && eff == flow:
			eff = frozen
		}
	}
	return eff, watch, t.phase
}

type injectedError struct{ msg string }

func (e *injectedError) Error() string        { return "fault: " + e.msg }
func (e *injectedError) Is(target error) bool { return target == ErrInjected }

func injected(msg string) error { return &injectedError{msg: msg} }

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}
