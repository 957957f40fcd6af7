package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/converge-dev/converge/cmd/converge/daemon/fence"
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
	return fence.Guard{Check: func(*http.Request) (func() (time.Duration, error), error) { return nil, f.check() }, Next: rt}
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
