// Package fencetest holds what the tests of write fences share: a transport that stands for
// a process stopped between a fence's check and the send, and an API server stand-in that
// counts the writes it received whole.
package fencetest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// PausingRT stands for a process stopped between a fence's check and the send: it runs
// Pause (which moves the fence's clock past its deadline), then sends with Next.
type PausingRT struct {
	Pause func()
	Next  http.RoundTripper
}

// RoundTrip pauses, then sends.
func (p PausingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	p.Pause()
	return p.Next.RoundTrip(req)
}

// BodyCounter is an API server stand-in, closed when t ends, that counts the writes whose
// body it received whole.
func BodyCounter(t *testing.T) (url string, whole *atomic.Int32) {
	whole = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if b, err := io.ReadAll(r.Body); err == nil && int64(len(b)) == r.ContentLength {
			whole.Add(1)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, whole
}
