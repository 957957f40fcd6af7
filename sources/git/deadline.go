package git

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"
)

// A fetch ends at its deadline (FetchOptions.Timeout, or ctx's if earlier) or when its ctx
// ends, whatever the remote does: accept and never answer, or answer a byte at a time.
// go-git bounds only the TCP dial of an SSH session: its handshake and reads take no
// context. So every SSH connection a fetch opens gets the fetch's deadline as its own and
// is closed when the fetch's ctx ends (fetchConn); HTTP requests carry the fetch's ctx,
// which net/http honours through the TLS handshake, the headers and the body. A fetch that
// ended this way returns a DeadlineError, and releases its cache's lock on return.

// DeadlineError reports a fetch that did not finish within its deadline. It is transient:
// the next attempt may find the remote answering.
type DeadlineError struct {
	// After is the time the fetch was given.
	After time.Duration
	// Answered reports whether the remote sent anything before the deadline.
	Answered bool
}

func (e *DeadlineError) Error() string {
	if !e.Answered {
		return fmt.Sprintf("no answer within %s", e.After)
	}
	return fmt.Sprintf("not finished within %s", e.After)
}

// Unwrap makes a DeadlineError a context.DeadlineExceeded.
func (e *DeadlineError) Unwrap() error { return context.DeadlineExceeded }

// fetchClock is the deadline of one fetch and what the remote has said so far.
type fetchClock struct {
	ctx      context.Context
	start    time.Time
	answered atomic.Bool
}

// ended returns the error of a fetch whose ctx ended, or nil: a DeadlineError naming the
// time the fetch had when a deadline passed, the cause when the caller canceled it.
func (c *fetchClock) ended() error {
	if c == nil {
		return nil
	}
	dl, ok := c.ctx.Deadline()
	// A connection's deadline is the ctx's: its read may fail a moment before ctx's timer.
	passed := ok && !time.Now().Before(dl)
	switch err := c.ctx.Err(); {
	case err == nil && !passed:
		return nil
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		return context.Cause(c.ctx)
	}
	return &DeadlineError{After: dl.Sub(c.start).Round(100 * time.Millisecond), Answered: c.answered.Load()}
}

// fetchConn is an SSH connection of one fetch: it ends at the fetch's deadline, is closed
// when the fetch's ctx ends (releasing go-git's reader, blocked on it), and records that
// the remote answered.
type fetchConn struct {
	net.Conn
	clock *fetchClock
	stop  func() bool
}

func newFetchConn(conn net.Conn, clock *fetchClock) (net.Conn, error) {
	if dl, ok := clock.ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			_ = conn.Close()
			return nil, err
		}
	}
	c := &fetchConn{Conn: conn, clock: clock}
	c.stop = context.AfterFunc(clock.ctx, func() { _ = conn.Close() })
	return c, nil
}

func (c *fetchConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.clock.answered.Store(true)
	}
	return n, err
}

func (c *fetchConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
