package fault

import (
	"context"
	"io"
	"sync"
	"time"
)

// streamEffect is what the active rules do to an open response stream.
type streamEffect int

const (
	flow    streamEffect = iota
	frozen               // FreezeWatch: hold the data back, deliver it later
	stalled              // Blackhole: hold the data back, then break the stream
)

// pollEvery is how often a blocked stream looks at the rules again while a rule that can hold
// it is active or still to come: rule windows open and close by the clock, without an event
// to wait for. Otherwise a stream waits for data or new rules only.
const pollEvery = 20 * time.Millisecond

// stream wraps a response body (a watch) so that rules can freeze, stall or break it while it
// is open. A pump goroutine reads the body; Read hands its chunks on only while no rule holds
// the stream.
type stream struct {
	t       *Transport
	info    requestInfo
	ctx     context.Context
	body    io.ReadCloser
	chunks  chan chunk
	closed  chan struct{}
	once    sync.Once
	breakAt time.Time // CloseAfter; zero: never

	// Read's state (Read is not called concurrently with itself).
	pending         []byte
	err             error // the body's final error, returned after pending
	broken          error
	frozen, stalled bool // the current hold, to count each once
}

type chunk struct {
	b   []byte
	err error
}

func (t *Transport) newStream(ctx context.Context, info requestInfo, body io.ReadCloser, closeAfter time.Duration) *stream {
	s := &stream{t: t, info: info, ctx: ctx, body: body, chunks: make(chan chunk), closed: make(chan struct{})}
	if closeAfter > 0 {
		s.breakAt = time.Now().Add(closeAfter)
	}
	go s.pump()
	return s
}

func (s *stream) pump() {
	for {
		buf := make([]byte, 32<<10)
		n, err := s.body.Read(buf)
		if n == 0 && err == nil {
			continue
		}
		select {
		case s.chunks <- chunk{buf[:n], err}:
		case <-s.closed:
			return
		}
		if err != nil {
			return
		}
	}
}

// Read implements io.Reader.
func (s *stream) Read(p []byte) (int, error) {
	var tick <-chan time.Time
	var deadline <-chan time.Time
	if !s.breakAt.IsZero() {
		timer := time.NewTimer(time.Until(s.breakAt))
		defer timer.Stop()
		deadline = timer.C
	}
	for {
		if s.broken != nil {
			return 0, s.broken
		}
		if !s.breakAt.IsZero() && !time.Now().Before(s.breakAt) {
			return 0, s.breakWith("watch stream closed")
		}
		eff, watch, phase := s.t.streamEffect(s.info)
		switch eff {
		case stalled:
			if !s.stalled {
				s.stalled = true
				s.t.note("stall")
			}
		case frozen:
			if !s.frozen {
				s.frozen = true
				s.t.note("freeze")
			}
		default:
			if s.stalled {
				return 0, s.breakWith("stream broken by a blackhole")
			}
			s.frozen = false
			if len(s.pending) > 0 {
				n := copy(p, s.pending)
				s.pending = s.pending[n:]
				return n, nil
			}
			if s.err != nil {
				return 0, s.err
			}
		}
		if watch && tick == nil {
			ticker := time.NewTicker(pollEvery)
			defer ticker.Stop()
			tick = ticker.C
		}
		var chunks <-chan chunk
		if len(s.pending) == 0 && s.err == nil {
			chunks = s.chunks // read ahead even while held: delivery is what a hold delays
		}
		select {
		case c := <-chunks:
			s.pending, s.err = c.b, c.err
		case <-tick:
		case <-phase:
		case <-deadline:
		case <-s.closed:
			return 0, io.ErrClosedPipe
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
	}
}

func (s *stream) breakWith(msg string) error {
	s.broken = injected(msg)
	s.shut()
	return s.broken
}

func (s *stream) shut() {
	s.once.Do(func() {
		close(s.closed)
		_ = s.body.Close()
	})
}

// Close implements io.Closer.
func (s *stream) Close() error {
	s.shut()
	return nil
}
