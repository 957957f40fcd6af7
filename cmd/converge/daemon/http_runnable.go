package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// httpRunnable is a manager Runnable serving handler on addr on every replica (not only the
// leader) until the manager stops, then shutting down gracefully.
type httpRunnable struct {
	addr    string
	handler http.Handler
	limits  serverLimits
}

// serverLimits bound how long a slow client may hold a connection and how large its headers
// may be. A zero field keeps net/http's default (no limit), except ReadHeaderTimeout (10s):
// the metrics server sets only that one, since a /debug/pprof/profile answer takes 30s.
type serverLimits struct {
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	MaxHeaderBytes                                            int
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
