package notify

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Dispatcher.
type Options struct {
	// QueueSize bounds the deliveries waiting for a worker, retries included. When it is
	// full, Send drops the oldest waiting delivery (OnDropped): the newest transition says
	// what the Sync is now.
	QueueSize int
	// MaxQueuedPerNamespace is one namespace's share of the queue: a Send past it drops
	// that namespace's oldest waiting delivery, so one tenant's flood of transitions drops
	// its own notifications, not the others'. Zero: QueueSize/8, at least 1.
	MaxQueuedPerNamespace int
	// Workers deliver at once.
	Workers int
	// AttemptTimeout bounds one request: dial, TLS, sending, and the answer's headers.
	AttemptTimeout time.Duration
	// MaxAttempts bounds the attempts per delivery, the first included.
	MaxAttempts int
	// MaxElapsed bounds one delivery from its first attempt: no retry starts after it.
	MaxElapsed time.Duration
	// InitialBackoff is the wait before the second attempt; each next wait doubles, capped
	// at MaxBackoff.
	InitialBackoff, MaxBackoff time.Duration
	// AllowLocal lets addresses on the daemon's machine and link be notified (tests, a
	// receiver beside the daemon).
	AllowLocal bool
	// Deny adds refused prefixes to the dial guard's: the API server's address, the
	// cluster's service range.
	Deny []netip.Prefix

	// OnDelivered is called after a receiver accepted an event (2xx).
	OnDelivered func(p Provider, e Event)
	// OnFailed is called once per delivery that gave up: an invalid provider, a revision
	// with no commit, a refused address, a final answer, or retries exhausted.
	OnFailed func(p Provider, e Event, err error)
	// OnDropped is called for a delivery dropped to make room (a full queue, or its
	// namespace's share).
	OnDropped func(p Provider, e Event)
}

// DefaultOptions: 256 deliveries queued (32 per namespace), 4 workers, 10 s per attempt,
// 5 attempts within 2 minutes, back-off 1 s doubling to 30 s.
func DefaultOptions() Options {
	return Options{QueueSize: 256, Workers: 4, AttemptTimeout: 10 * time.Second, MaxAttempts: 5,
		MaxElapsed: 2 * time.Minute, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
}

// Resolve completes a provider in a delivery worker just before the delivery's first
// attempt, within one attempt's timeout: the daemon reads a provider's Secret there, so a
// slow read holds a delivery worker, never a reconcile. An error is retried as a failed
// attempt is, unless Permanent.
type Resolve func(ctx context.Context, p Provider) (Provider, error)

// delivery is one event for one provider, with its retry state.
type delivery struct {
	p       Provider
	resolve Resolve // nil once p is complete
	e       Event
	attempt int       // attempts made
	first   time.Time // when the first attempt started
	lastErr error
}

// Dispatcher delivers events in the background. Send never blocks; Start runs the workers
// until its context ends. A retry waits on a timer, not in a worker, so a receiver that is
// down holds a worker for one attempt timeout at a time, never for the whole back-off. The
// hooks are called once per delivery from the workers, the retry timers and (OnDropped)
// Send itself: they must be quick and safe for concurrent use.
type Dispatcher struct {
	opts    Options
	queue   *queue
	dropped atomic.Int64
	// retrying counts deliveries waiting on a retry timer, bounded by QueueSize.
	retrying atomic.Int64
	timers   sync.WaitGroup
	stop     chan struct{}
	stopped  sync.Once
}

// New returns a Dispatcher; zero or negative sizes and durations in opts take
// DefaultOptions' values.
func New(opts Options) *Dispatcher {
	def := DefaultOptions()
	pos := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	dur := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	pos(&opts.QueueSize, def.QueueSize)
	pos(&opts.MaxQueuedPerNamespace, max(1, opts.QueueSize/8))
	pos(&opts.Workers, def.Workers)
	pos(&opts.MaxAttempts, def.MaxAttempts)
	dur(&opts.AttemptTimeout, def.AttemptTimeout)
	dur(&opts.MaxElapsed, def.MaxElapsed)
	dur(&opts.InitialBackoff, def.InitialBackoff)
	dur(&opts.MaxBackoff, def.MaxBackoff)
	return &Dispatcher{opts: opts, queue: newQueue(opts.QueueSize, opts.MaxQueuedPerNamespace), stop: make(chan struct{})}
}

// Send queues e for p and returns at once; it reports false only when the Dispatcher has
// stopped. To make room it drops the oldest delivery of e's namespace when the namespace
// holds its share of the queue, else the oldest of a full queue.
func (d *Dispatcher) Send(p Provider, e Event) bool {
	return d.SendResolving(p, nil, e)
}

// SendResolving is Send of a provider that resolve completes in a worker (its Secret read):
// p, as given, is what the hooks name until then.
func (d *Dispatcher) SendResolving(p Provider, resolve Resolve, e Event) bool {
	if e.Time.IsZero() {
		e.Time = time.Now() // every attempt sends the same body (and HMAC signature)
	}
	return d.enqueue(&delivery{p: p, resolve: resolve, e: e})
}

// Dropped counts the deliveries dropped since New: from a full queue, or past a
// namespace's share.
func (d *Dispatcher) Dropped() int64 { return d.dropped.Load() }

// enqueue queues x, reporting a delivery dropped to make room.
func (d *Dispatcher) enqueue(x *delivery) bool {
	select {
	case <-d.stop:
		return false
	default:
	}
	if old := d.queue.push(x); old != nil {
		d.drop(old)
	}
	return true
}

func (d *Dispatcher) drop(x *delivery) {
	d.dropped.Add(1)
	if d.opts.OnDropped != nil {
		d.opts.OnDropped(x.p.redacted(), x.e)
	}
}

// Start runs the workers until ctx ends, then waits for them and for pending retry timers.
// Deliveries still queued or waiting for a retry then are abandoned. It has the shape of a
// controller-runtime Runnable.
func (d *Dispatcher) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range d.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx)
		}()
	}
	<-ctx.Done()
	d.stopped.Do(func() { close(d.stop) })
	wg.Wait()
	d.timers.Wait()
	return nil
}

func (d *Dispatcher) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.queue.ready:
			if x := d.queue.pop(); x != nil {
				d.deliver(ctx, x)
			}
		}
	}
}

// deliver makes one attempt and then reports, or schedules the next attempt.
func (d *Dispatcher) deliver(ctx context.Context, x *delivery) {
	if x.attempt == 0 {
		x.first = time.Now()
	}
	x.attempt++
	err := d.send(ctx, x)
	if err == nil {
		if d.opts.OnDelivered != nil {
			d.opts.OnDelivered(x.p.redacted(), x.e)
		}
		return
	}
	x.lastErr = err
	if ctx.Err() != nil {
		return // shutting down: abandoned, not failed
	}
	wait := d.backoff(x.attempt)
	switch {
	case !retryable(err):
	case x.attempt >= d.opts.MaxAttempts:
		err = fmt.Errorf("gave up after %d attempts: %w", x.attempt, err)
	case time.Now().Add(wait).Sub(x.first) > d.opts.MaxElapsed:
		err = fmt.Errorf("gave up after %d attempts within %s: %w", x.attempt, d.opts.MaxElapsed, err)
	default:
		d.retryLater(x, wait)
		return
	}
	d.fail(x, err)
}

func (d *Dispatcher) fail(x *delivery, err error) {
	if d.opts.OnFailed != nil {
		d.opts.OnFailed(x.p.redacted(), x.e, fmt.Errorf("notify %s/%s via %s %q: %w", x.e.Namespace, x.e.Name, x.p.Type, x.p.Name, err))
	}
}

// errQueueFull is reported for a retry that found the queue, or its namespace's share, full.
var errQueueFull = errors.New("queue full")

// retryLater queues x again after wait, unless the Dispatcher stops first. A retry never
// drops another delivery: when the queue is full it fails.
func (d *Dispatcher) retryLater(x *delivery, wait time.Duration) {
	if d.retrying.Add(1) > int64(d.opts.QueueSize) {
		d.retrying.Add(-1)
		d.fail(x, fmt.Errorf("retry dropped: %d retries already waiting: %w", d.opts.QueueSize, x.lastErr))
		return
	}
	d.timers.Add(1)
	go func() {
		defer d.timers.Done()
		defer d.retrying.Add(-1)
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-d.stop:
		case <-t.C:
			select {
			case <-d.stop:
			default:
				if !d.queue.pushRetry(x) {
					d.fail(x, fmt.Errorf("retry dropped: %w (last error: %w)", errQueueFull, x.lastErr))
				}
			}
		}
	}()
}

// backoff is the wait after the n-th attempt: InitialBackoff doubled n-1 times, capped.
func (d *Dispatcher) backoff(n int) time.Duration {
	w := d.opts.InitialBackoff
	for i := 1; i < n && w < d.opts.MaxBackoff; i++ {
		w *= 2
	}
	return min(w, d.opts.MaxBackoff)
}

// send builds the request and makes one attempt.
func (d *Dispatcher) send(ctx context.Context, x *delivery) error {
	if x.resolve != nil {
		rctx, cancel := context.WithTimeout(ctx, d.opts.AttemptTimeout)
		p, err := x.resolve(rctx, x.p)
		cancel()
		if err != nil {
			return err
		}
		x.p, x.resolve = p, nil
	}
	t, err := x.p.target()
	if err != nil {
		return err
	}
	r, err := t.build(x.e, time.Now())
	if err != nil {
		return err
	}
	c, err := d.client(t)
	if err != nil {
		return err
	}
	defer c.CloseIdleConnections()
	return d.attempt(ctx, c, t, r)
}
