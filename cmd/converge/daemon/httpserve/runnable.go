// Package httpserve serves an HTTP handler as a manager Runnable on every replica, with
// bounds on slow clients and open connections.
package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// Runnable is a manager Runnable serving Handler on Addr on every replica (not only the
// leader) until the manager stops, then shutting down gracefully.
type Runnable struct {
	Addr    string
	Handler http.Handler
	Limits  Limits
}

// Limits bound how long a slow client may hold a connection, how large its headers
// may be and how many connections are open at once. A zero field keeps net/http's default
// (no limit), except ReadHeaderTimeout (10s): the metrics server sets only that one, since a
// /debug/pprof/profile answer takes 30s.
type Limits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// MaxConns is how many connections are open at once: one more is closed as soon as it
	// is accepted, so that many idle or slow clients hold no more than MaxConns connections'
	// buffers and goroutines.
	MaxConns int
}

// NeedLeaderElection is false: followers serve too.
func (h Runnable) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (h Runnable) Start(ctx context.Context) error {
	srv := &http.Server{Handler: h.Handler, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: h.Limits.ReadTimeout, WriteTimeout: h.Limits.WriteTimeout,
		IdleTimeout: h.Limits.IdleTimeout, MaxHeaderBytes: h.Limits.MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if h.Limits.ReadHeaderTimeout > 0 {
		srv.ReadHeaderTimeout = h.Limits.ReadHeaderTimeout
	}
	l, err := net.Listen("tcp", h.Addr)
	if err != nil {
		return err
	}
	if h.Limits.MaxConns > 0 {
		l = &connLimit{Listener: l, open: make(chan struct{}, h.Limits.MaxConns)}
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// connLimit is a listener that keeps at most cap(open) connections open: one accepted beyond
// that is closed at once (the client sees its connection reset or closed, not a wait).
type connLimit struct {
	net.Listener
	open chan struct{}
}

// Accept returns the next connection while fewer than cap(open) are open, closing the others.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.open <- struct{}{}:
			return &limitedConn{Conn: c, release: func() { <-l.open }}, nil
		default:
			_ = c.Close()
		}
	}
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
