package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
)

// fenceTick is how often the fence notes that the process is running.
const fenceTick = 250 * time.Millisecond

// errFenced refuses a write of a daemon that was paused (SIGSTOP, a frozen VM, a stalled
// node) for longer than the leader lease's renew deadline.
var errFenced = errors.New("fenced: this process was paused longer than the leader lease's renew deadline; " +
	"another replica may lead now, so it sends no more writes and stops")

// pauseFence keeps a paused leader from writing (S03). Leader election alone does not: a
// process that is stopped cannot notice that its lease expired, and when it resumes, its
// workers may send the writes of a reconcile planned before the pause (an old render, an old
// status) before the elector learns that another replica took over. The fence measures time
// on the monotonic clock, which runs on while the process is stopped: a gap between two of
// its ticks, or since the last tick at the moment of a write, longer than maxGap means the
// lease may be someone else's. From then on every mutating request is refused before it is
// sent, and stop is called once (the daemon shuts down and its restart joins as a follower).
type pauseFence struct {
	maxGap time.Duration
	now    func() time.Time
	stop   func(error)

	mu     sync.Mutex
	last   time.Time
	broken bool
}

func newPauseFence(maxGap time.Duration, stop func(error)) *pauseFence {
	return &pauseFence{maxGap: maxGap, now: time.Now, stop: stop, last: time.Now()}
}

// run ticks until ctx ends.
func (f *pauseFence) run(ctx context.Context) {
	t := time.NewTicker(fenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = f.tick()
		}
	}
}

// check reports errFenced once the process was seen paused for longer than maxGap.
func (f *pauseFence) check() error { return f.observe(false) }

// tick is check, recording that the process runs now (one clock sample, one critical
// section: a pause cannot slip between the check and the record).
func (f *pauseFence) tick() error { return f.observe(true) }

func (f *pauseFence) observe(record bool) error {
	f.mu.Lock()
	now := f.now()
	gap := now.Sub(f.last)
	first := !f.broken && gap > f.maxGap
	if first {
		f.broken = true
	}
	if record && !f.broken {
		f.last = now
	}
	broken := f.broken
	f.mu.Unlock()
	if first {
		f.stop(fmt.Errorf("%w (no tick for %s)", errFenced, gap.Round(time.Millisecond)))
	}
	if broken {
		return errFenced
	}
	return nil
}

// wrap refuses mutating requests once the fence is broken; reads pass.
func (f *pauseFence) wrap(rt http.RoundTripper) http.RoundTripper {
	return writeGuard{check: func(*http.Request) (func() (time.Duration, error), error) { return nil, f.check() }, next: rt}
}

// writeGuard is a transport whose check may refuse a mutating request before it is sent
// (the pause fence, the shard fence); reads (GET, HEAD) always pass. A check may also return
// holds, which says whether the right to write still holds (an error when not) and for how
// long at least: until the answer comes, holds is asked again each time that runs out, and
// the request is cancelled, with holds' error as the cause, once the right is gone. So a
// write sent while its shard was held does not stay in flight (a stalled connection, a slow
// API server) long after the shard may have passed to another replica: the client gives
// up then. (A request the API server already received may still commit; the lease margin,
// lease duration minus renew deadline, covers that.) Once the answer's status has come the
// write has happened, and reading its body is never cut.
type writeGuard struct {
	check func(*http.Request) (holds func() (time.Duration, error), err error)
	next  http.RoundTripper
}

func (g writeGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return g.next.RoundTrip(req)
	}
	holds, err := g.check(req)
	if err != nil {
		return nil, err
	}
	req = g.fenceBody(req, holds)
	if holds == nil {
		return g.next.RoundTrip(req)
	}
	left, err := holds()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	var (
		mu       sync.Mutex
		answered bool
		timer    *time.Timer
	)
	mu.Lock()
	timer = time.AfterFunc(left, func() {
		mu.Lock()
		defer mu.Unlock()
		if answered {
			return
		}
		if left, err := holds(); err != nil {
			cancel(err)
		} else {
			timer.Reset(left)
		}
	})
	mu.Unlock()
	resp, err := g.next.RoundTrip(req.WithContext(ctx))
	mu.Lock()
	answered = true
	timer.Stop()
	mu.Unlock()
	if err != nil {
		cancel(nil)
		return nil, err
	}
	resp.Body = cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}

// fenceBody returns req with its body checked again each time the transport reads it: by
// holds when there is one, else by check. The transport reads the body as it puts it on the
// wire, after the connection and the headers: a write checked at RoundTrip, then held up (a
// SIGSTOP between the check and the send, a wait for a connection), is cut at its first read
// if the right to write has gone meanwhile, and the API server, getting no complete body,
// applies nothing. What stays open is the moment between a read of a chunk of the body and
// its write (on HTTP/2 that includes a wait for flow control). Once the whole body
// (ContentLength) has been handed out there is nothing left to cut: the end-of-body read
// HTTP/1.1 makes is not checked, so a write that went out whole is not reported fenced.
func (g writeGuard) fenceBody(req *http.Request, holds func() (time.Duration, error)) *http.Request {
	if req.Body == nil || req.Body == http.NoBody {
		return req
	}
	recheck := func() error {
		if holds != nil {
			_, err := holds()
			return err
		}
		_, err := g.check(req)
		return err
	}
	fence := func(rc io.ReadCloser) io.ReadCloser {
		return &fencedBody{ReadCloser: rc, recheck: recheck, left: req.ContentLength}
	}
	out := req.Clone(req.Context())
	out.Body = fence(req.Body)
	if get := req.GetBody; get != nil {
		out.GetBody = func() (io.ReadCloser, error) {
			rc, err := get()
			if err != nil {
				return nil, err
			}
			return fence(rc), nil
		}
	}
	return out
}

// fencedBody is a request body that refuses to be read once recheck fails, until left (the
// bytes still to hand out; unknown when the length is) reaches zero.
type fencedBody struct {
	io.ReadCloser
	recheck func() error
	left    int64
}

func (b *fencedBody) Read(p []byte) (int, error) {
	if b.left != 0 {
		if err := b.recheck(); err != nil {
			return 0, err
		}
	}
	n, err := b.ReadCloser.Read(p)
	if b.left > 0 {
		b.left = max(0, b.left-int64(n))
	}
	return n, err
}

// cancelOnClose is an answer's body that releases its request's context when closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// stopOnFence returns a stop function for newPauseFence that logs why (the daemon's
// logger; the context carries none) and cancels the daemon's context.
func stopOnFence(cancel context.CancelCauseFunc) func(error) {
	return func(err error) {
		ctrl.Log.WithName("fence").Error(err, "stopping")
		cancel(err)
	}
}

// startPauseFence wraps cfg's transport in a pause fence of maxGap that cancels ctx (with
// errFenced as the cause) when it breaks (S03: a leader paused past its renew deadline sends
// no more writes and stops). The fence ticks in a goroutine of its own from now on, not as a
// manager Runnable: the writes made before the manager starts (the CRD, the quick start)
// are fenced too.
func startPauseFence(ctx context.Context, cfg *rest.Config, maxGap time.Duration, cancel context.CancelCauseFunc) {
	fence := newPauseFence(maxGap, stopOnFence(cancel))
	go fence.run(ctx)
	cfg.Wrap(fence.wrap)
}
