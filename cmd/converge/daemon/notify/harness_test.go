package notify

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// bound is how long a test waits for an outcome: generous, never a timing assertion.
const bound = 30 * time.Second

// outcome is what a Dispatcher reported about one delivery.
type outcome struct {
	hook string // "delivered", "failed", "dropped"
	p    Provider
	e    Event
	err  error
}

// startDispatcher runs a Dispatcher with opts until the test ends; its hooks report on the
// returned channel.
func startDispatcher(t *testing.T, opts Options) (*Dispatcher, <-chan outcome) {
	t.Helper()
	d, ch := newDispatcher(opts)
	run(t, d)
	return d, ch
}

func newDispatcher(opts Options) (*Dispatcher, <-chan outcome) {
	ch := make(chan outcome, 1000)
	opts.OnDelivered = func(p Provider, e Event) { ch <- outcome{hook: "delivered", p: p, e: e} }
	opts.OnFailed = func(p Provider, e Event, err error) { ch <- outcome{hook: "failed", p: p, e: e, err: err} }
	opts.OnDropped = func(p Provider, e Event) { ch <- outcome{hook: "dropped", p: p, e: e} }
	return New(opts), ch
}

func run(t *testing.T, d *Dispatcher) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := d.Start(ctx); err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(bound):
			t.Errorf("Start did not return within %s of its context ending", bound)
		}
	})
}

// next waits for the next outcome.
func next(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(bound):
		t.Fatalf("no delivery outcome within %s", bound)
		return outcome{}
	}
}

// fastRetries are options for tests: local receivers allowed, short back-off.
func fastRetries() Options {
	o := DefaultOptions()
	o.AllowLocal = true
	o.InitialBackoff, o.MaxBackoff = 5*time.Millisecond, 20*time.Millisecond
	return o
}

// recorder counts the requests a receiver got and keeps their headers and bodies.
type recorder struct {
	mu      sync.Mutex
	n       atomic.Int64
	headers []http.Header
	bodies  [][]byte
}

func (r *recorder) record(req *http.Request) []byte {
	b, _ := io.ReadAll(req.Body)
	r.n.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, req.Header.Clone())
	r.bodies = append(r.bodies, b)
	return b
}
