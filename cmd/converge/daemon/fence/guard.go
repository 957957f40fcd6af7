package fence

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// Guard is a transport whose check may refuse a mutating request before it is sent
// (the pause fence, the shard fence); reads (GET, HEAD) always pass. A check may also return
// holds, which says whether the right to write still holds (an error when not) and for how
// long at least: until the answer comes, holds is asked again each time that runs out, and
// the request is cancelled, with holds' error as the cause, once the right is gone. So a
// write sent while its shard was held does not stay in flight (a stalled connection, a slow
// API server) long after the shard may have passed to another replica: the client gives
// up then. (A request the API server already received may still commit; the lease margin,
// lease duration minus renew deadline, covers that.) Once the answer's status has come the
// write has happened, and reading its body is never cut.
type Guard struct {
	// Check is asked before a mutating request is sent; see Guard.
	Check func(*http.Request) (holds func() (time.Duration, error), err error)
	// Next sends the requests that pass.
	Next http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (g Guard) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		return g.Next.RoundTrip(req)
	}
	holds, err := g.Check(req)
	if err != nil {
		return nil, err
	}
	req = g.fenceBody(req, holds)
	if holds == nil {
		return g.Next.RoundTrip(req)
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
	resp, err := g.Next.RoundTrip(req.WithContext(ctx))
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
func (g Guard) fenceBody(req *http.Request, holds func() (time.Duration, error)) *http.Request {
	if req.Body == nil || req.Body == http.NoBody {
		return req
	}
	recheck := func() error {
		if holds != nil {
			_, err := holds()
			return err
		}
		_, err := g.Check(req)
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
