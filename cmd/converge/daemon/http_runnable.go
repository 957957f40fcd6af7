package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"
)

// httpRunnable is a manager Runnable serving handler on addr on every replica (not only the
// leader) until the manager stops, then shutting down gracefully.
type httpRunnable struct {
	addr    string
	handler http.Handler
	limits  serverLimits
}

// serverLimits bound how long a slow client may hold a connection, how large its headers
// may be and how many connections are open at once. A zero field keeps net/http's default
// (no limit), except ReadHeaderTimeout (10s): the metrics server sets only that one, since a
// /debug/pprof/profile answer takes 30s.
type serverLimits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
	// MaxConns is how many connections are open at once: one more is closed as soon as it
	// is accepted, so that many idle or slow clients hold no more than MaxConns connections'
	// buffers and goroutines.
	MaxConns int
}

// NeedLeaderElection is false: followers serve too.
func (h httpRunnable) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (h httpRunnable) Start(ctx context.Context) error {
	srv := &http.Server{Handler: h.handler, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: h.limits.ReadTimeout, WriteTimeout: h.limits.WriteTimeout,
		IdleTimeout: h.limits.IdleTimeout, MaxHeaderBytes: h.limits.MaxHeaderBytes,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	if h.limits.ReadHeaderTimeout > 0 {
		srv.ReadHeaderTimeout = h.limits.ReadHeaderTimeout
	}
	l, err := net.Listen("tcp", h.addr)
	if err != nil {
		return err
	}
	if h.limits.MaxConns > 0 {
		l = &connLimit{Listener: l, open: make(chan struct{}, h.limits.MaxConns)}
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
