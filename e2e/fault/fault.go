// Package fault injects faults into Kubernetes API traffic for tests: a RoundTripper that,
// per rule, answers with an error status (409, 429 with Retry-After, 500, 503), forwards a
// request and then drops the response, and counts requests by verb.
//
// Use it on a rest.Config: cfg.Wrap(t.Wrap). Production code must not import this package.
package fault

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
)

// Rule matches requests and says what to do with them. Empty match fields match anything.
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
	// Status answers the request with this HTTP status without forwarding it.
	Status int
	// DropResponse forwards the request and then fails the call: the write landed, the
	// client sees an error.
	DropResponse bool
	// Probability applies the rule to this share of matching requests (0 means all), drawn
	// from the Transport's seeded source so a seed replays the same schedule.
	Probability float64

	hits int
}

// Transport is a fault-injecting, request-counting http.RoundTripper.
type Transport struct {
	mu       sync.Mutex
	next     http.RoundTripper
	rules    []*Rule
	counts   map[countKey]int
	writes   []string
	injected int
	rand     *rand.Rand
}

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

// SetRules replaces the rules (a new phase of a test).
func (t *Transport) SetRules(rules ...Rule) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rules = nil
	for i := range rules {
		r := rules[i]
		t.rules = append(t.rules, &r)
	}
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

// Injected returns how many faults were injected.
func (t *Transport) Injected() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.injected
}

// Reset zeroes the request counts and the list of writes.
func (t *Transport) Reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts = nil
	t.writes = nil
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	info := parse(req)
	t.mu.Lock()
	if t.counts == nil {
		t.counts = map[countKey]int{}
	}
	t.counts[countKey{info.verb, info.resource, info.subresource}]++
	if isWrite(info.verb) && req.URL.Query().Get("dryRun") == "" {
		t.writes = append(t.writes, req.Method+" "+req.URL.Path)
	}
	rule := t.match(info)
	if rule != nil {
		t.injected++
	}
	next := t.next
	t.mu.Unlock()

	if rule != nil && rule.Status != 0 {
		return statusResponse(req, rule.Status), nil
	}
	resp, err := next.RoundTrip(req)
	if rule != nil && rule.DropResponse && err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return nil, errors.New("fault: response dropped after the request was forwarded")
	}
	return resp, err
}

func (t *Transport) match(info requestInfo) *Rule {
	for _, r := range t.rules {
		if (r.Verb != "" && r.Verb != info.verb) || (r.Resource != "" && r.Resource != info.resource) ||
			(r.Subresource != "" && r.Subresource != info.subresource) || (r.Name != "" && r.Name != info.name) {
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

func isWrite(verb string) bool {
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

type requestInfo struct{ verb, resource, subresource, name string }

// parse derives the Kubernetes verb, resource, subresource and name from a request path like
// /api/v1/namespaces/ns/configmaps/name or /apis/g/v/namespaces/ns/r/name/status.
func parse(req *http.Request) requestInfo {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return requestInfo{verb: strings.ToLower(req.Method)}
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	var info requestInfo
	if len(parts) > 0 {
		info.resource = parts[0]
	}
	if len(parts) > 1 {
		info.name = parts[1]
	}
	if len(parts) > 2 {
		info.subresource = parts[2]
	}
	switch req.Method {
	case http.MethodGet:
		switch {
		case req.URL.Query().Get("watch") == "true":
			info.verb = "watch"
		case info.name == "":
			info.verb = "list"
		default:
			info.verb = "get"
		}
	case http.MethodPost:
		info.verb = "create"
	case http.MethodPut:
		info.verb = "update"
	case http.MethodPatch:
		info.verb = "patch"
	case http.MethodDelete:
		info.verb = "delete"
		if info.name == "" {
			info.verb = "deletecollection"
		}
	default:
		info.verb = strings.ToLower(req.Method)
	}
	return info
}

// statusResponse is a Kubernetes Status error response with code.
func statusResponse(req *http.Request, code int) *http.Response {
	reason := map[int]string{403: "Forbidden", 404: "NotFound", 409: "Conflict", 410: "Expired", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}[code]
	body := fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"fault: injected %d","reason":%q,"code":%d}`, code, reason, code)
	h := http.Header{"Content-Type": []string{"application/json"}}
	if code == http.StatusTooManyRequests {
		h.Set("Retry-After", "1")
	}
	return &http.Response{
		StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Header: h,
		Body: io.NopCloser(bytes.NewBufferString(body)), ContentLength: int64(len(body)), Request: req,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
	}
}
