package main

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
}

// NeedLeaderElection is false: followers serve too.
func (h httpRunnable) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (h httpRunnable) Start(ctx context.Context) error {
	srv := &http.Server{Handler: h.handler, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
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
