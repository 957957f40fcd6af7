package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

func genericTo(url string) Provider {
	return Provider{Name: "apps/hook", Type: Generic, Address: url}
}

// TestRetriesUntilDelivered: a receiver that fails twice (503, then a dropped connection)
// gets the event on the third attempt, and the delivery is reported once. Every attempt is
// the documented generic request, with the same body.
func TestRetriesUntilDelivered(t *testing.T) {
	tc := requestCases(testEvent())[0]
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := rec.record(r)
		for _, b := range tc.x.check(r, raw) {
			t.Errorf("receiver, attempt %d: %s", rec.n.Load(), b)
		}
		switch rec.n.Load() {
		case 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 2:
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close()
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	d, ch := startDispatcher(t, fastRetries())
	d.Send(genericTo(srv.URL+tc.p.Address), testEvent())
	if o := next(t, ch); o.hook != "delivered" {
		t.Fatalf("outcome %s: %v, want delivered", o.hook, o.err)
	}
	if n := rec.n.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
	rec.mu.Lock()
	for i, b := range rec.bodies[1:] {
		if string(b) != string(rec.bodies[0]) {
			t.Errorf("attempt %d sent %s, the first %s", i+2, b, rec.bodies[0])
		}
	}
	rec.mu.Unlock()
	select {
	case o := <-ch:
		t.Errorf("second outcome %s: %v", o.hook, o.err)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestReceiverDown: a receiver that never answers costs each attempt its timeout; the
// delivery gives up after MaxAttempts and is reported failed once.
func TestReceiverDown(t *testing.T) {
	release := make(chan struct{})
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	opts := fastRetries()
	opts.MaxAttempts, opts.AttemptTimeout = 3, 200*time.Millisecond
	d, ch := startDispatcher(t, opts)
	d.Send(genericTo(srv.URL+"/hook"), testEvent())
	o := next(t, ch)
	if o.hook != "failed" || !strings.Contains(o.err.Error(), "gave up after 3 attempts") || !errors.Is(o.err, context.DeadlineExceeded) {
		t.Fatalf("outcome %s: %v, want giving up after 3 attempts that timed out", o.hook, o.err)
	}
	if n := rec.n.Load(); n != 3 {
		t.Errorf("receiver got %d requests, want 3", n)
	}
}

// TestReceiverDownUnreachable: nothing listens at the address; the delivery gives up
// within MaxElapsed, reported once.
func TestReceiverDownUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	opts := fastRetries()
	opts.MaxAttempts, opts.MaxElapsed, opts.InitialBackoff, opts.MaxBackoff = 1000, 300*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
	d, ch := startDispatcher(t, opts)
	d.Send(genericTo("http://"+addr+"/hook"), testEvent())
	if o := next(t, ch); o.hook != "failed" || !strings.Contains(o.err.Error(), "within 300ms") || !errors.Is(o.err, syscall.ECONNREFUSED) {
		t.Fatalf("outcome %s: %v, want giving up within 300ms, connection refused", o.hook, o.err)
	}
}

// TestSendNeverBlocks: while the only worker hangs on a receiver, a burst of Sends returns,
// the oldest waiting deliveries are dropped and counted, and every delivery is reported
// exactly once, the newest never dropped.
func TestSendNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		<-release
	}))
	defer srv.Close()
	defer close(release)
	opts := fastRetries()
	opts.Workers, opts.QueueSize, opts.MaxAttempts, opts.AttemptTimeout = 1, 4, 2, 200*time.Millisecond
	d, ch := startDispatcher(t, opts)
	p := genericTo(srv.URL + "/hook")
	d.Send(p, testEvent())
	deadline := time.Now().Add(bound)
	for rec.n.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i := range 100 {
			e := testEvent()
			e.Name = fmt.Sprintf("web-%d", i)
			d.Send(p, e)
		}
	}()
	select {
	case <-sent:
	case <-time.After(bound):
		t.Fatalf("100 Sends did not return within %s while the receiver hangs", bound)
	}
	seen := map[string]string{}
	for len(seen) < 101 {
		o := next(t, ch)
		if prev, dup := seen[o.e.Name]; dup {
			t.Fatalf("%s reported %s after %s", o.e.Name, o.hook, prev)
		}
		seen[o.e.Name] = o.hook
	}
	dropped := 0
	for _, h := range seen {
		if h == "dropped" {
			dropped++
		}
	}
	if dropped < 90 || d.Dropped() != int64(dropped) {
		t.Errorf("%d dropped (counter %d), want at least 90 of 101 with a queue of 4", dropped, d.Dropped())
	}
	if seen["web-99"] != "failed" {
		t.Errorf("web-99 %s, want failed: the newest delivery is never dropped", seen["web-99"])
	}
}

// TestQueueFullDropsOldest: with the queue full, Send drops the oldest waiting delivery and
// counts it; the newest are delivered once workers run.
func TestQueueFullDropsOldest(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.record(r) }))
	defer srv.Close()
	opts := fastRetries()
	opts.QueueSize, opts.MaxQueuedPerNamespace = 2, 2
	d, ch := newDispatcher(opts)
	for i := range 5 {
		e := testEvent()
		e.Name = fmt.Sprintf("web-%d", i)
		if !d.Send(genericTo(srv.URL), e) {
			t.Errorf("Send %d: not queued", i)
		}
	}
	for i := range 3 {
		if o := next(t, ch); o.hook != "dropped" || o.e.Name != fmt.Sprintf("web-%d", i) {
			t.Errorf("outcome %s for %s, want web-%d dropped", o.hook, o.e.Name, i)
		}
	}
	if d.Dropped() != 3 {
		t.Errorf("Dropped() = %d, want 3", d.Dropped())
	}
	run(t, d)
	got := map[string]bool{}
	for range 2 {
		o := next(t, ch)
		if o.hook != "delivered" {
			t.Fatalf("outcome %s for %s: %v", o.hook, o.e.Name, o.err)
		}
		got[o.e.Name] = true
	}
	if !got["web-3"] || !got["web-4"] {
		t.Errorf("delivered %v, want web-3 and web-4", got)
	}
}

// TestRedirectRefused: a receiver answering with a redirect to another host never gets
// the credential there: the redirect is not followed, and the failure is final.
func TestRedirectRefused(t *testing.T) {
	var other recorder
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.record(r) }))
	defer elsewhere.Close()
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		to := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1) + r.URL.Path
		http.Redirect(w, r, to, http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	d, ch := startDispatcher(t, fastRetries())
	d.Send(Provider{Name: "apps/gl", Type: GitLab, Address: srv.URL + "/group/project", Token: "glpat-secret"}, testEvent())
	o := next(t, ch)
	if o.hook != "failed" || !errors.Is(o.err, errRedirect) {
		t.Errorf("outcome %s: %v, want the redirect refused", o.hook, o.err)
	}
	if other.n.Load() != 0 {
		other.mu.Lock()
		t.Errorf("the redirect target got %d requests, PRIVATE-TOKEN %q", other.n.Load(), other.headers[0].Get("Private-Token"))
		other.mu.Unlock()
	}
	if rec.n.Load() != 1 {
		t.Errorf("receiver got %d requests, want 1 (a refused redirect is not retried)", rec.n.Load())
	}
}

// TestRefusedAddresses: an address on the daemon's machine (a name resolving to loopback,
// a loopback IP) or in a denied prefix is refused where it is dialed: no request, no retry.
func TestRefusedAddresses(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.record(r) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	guarded := fastRetries()
	guarded.AllowLocal = false
	denied := fastRetries()
	denied.Deny = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for _, c := range []struct {
		name string
		opts Options
		addr string
	}{
		{"name resolving to loopback", guarded, "http://localhost:" + port + "/hook"},
		{"loopback IP", guarded, "http://127.0.0.1:" + port + "/hook"},
		{"denied prefix", denied, "http://127.0.0.1:" + port + "/hook"},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, ch := startDispatcher(t, c.opts)
			d.Send(genericTo(c.addr), testEvent())
			if o := next(t, ch); o.hook != "failed" || !errors.Is(o.err, ErrLocal) || strings.Contains(o.err.Error(), "gave up") {
				t.Fatalf("outcome %s: %v, want refused (ErrLocal) at the first attempt", o.hook, o.err)
			}
		})
	}
	if rec.n.Load() != 0 {
		t.Errorf("receiver got %d requests", rec.n.Load())
	}
}

// TestAnswerReadBounded: a refusal whose body never ends is read up to its cap only: the
// attempt ends with the status and the start of the body, not at its timeout.
func TestAnswerReadBounded(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(strings.Repeat("x", 2*maxErrorBody)))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	opts := fastRetries()
	opts.AttemptTimeout = 10 * bound // an unbounded read would wait for it
	d, ch := startDispatcher(t, opts)
	d.Send(genericTo(srv.URL), testEvent())
	o := next(t, ch)
	var se *StatusError
	if o.hook != "failed" || !errors.As(o.err, &se) || se.Code != http.StatusBadRequest || len(se.Body) > 2*512 {
		t.Fatalf("outcome %s: %v, want status 400 with at most 512 characters of its body", o.hook, o.err)
	}
}

// TestNamespaceShare: one namespace's flood of deliveries to a receiver that hangs drops
// its own new deliveries past its share; another namespace's delivery, queued before the
// flood, is kept and delivered.
func TestNamespaceShare(t *testing.T) {
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer hang.Close()
	defer close(release)
	var rec recorder
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.record(r) }))
	defer ok.Close()
	opts := fastRetries()
	opts.Workers, opts.QueueSize, opts.MaxAttempts, opts.AttemptTimeout = 1, 8, 1, 100*time.Millisecond
	d, ch := newDispatcher(opts)
	quiet := testEvent()
	quiet.Namespace = "quiet"
	d.Send(genericTo(ok.URL), quiet)
	for i := range 50 {
		e := testEvent()
		e.Namespace, e.Name = "noisy", fmt.Sprintf("web-%d", i)
		d.Send(genericTo(hang.URL), e)
	}
	run(t, d)
	for {
		o := next(t, ch)
		if o.e.Namespace == "quiet" {
			if o.hook != "delivered" {
				t.Fatalf("quiet: outcome %s: %v, want delivered", o.hook, o.err)
			}
			break
		}
	}
	if d.Dropped() < 49-int64(d.opts.MaxQueuedPerNamespace) {
		t.Errorf("Dropped() = %d, want the noisy namespace's deliveries past its share of 1", d.Dropped())
	}
}

// TestUntrustedCertificate: a receiver whose certificate the provider's CA bundle (here:
// the system roots) does not verify gets no request, and the failure is final.
func TestUntrustedCertificate(t *testing.T) {
	var rec recorder
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.record(r) }))
	defer srv.Close()
	d, ch := startDispatcher(t, fastRetries())
	d.Send(Provider{Name: "gh", Type: GitHub, Address: srv.URL + "/org/repo", Token: "t"}, testEvent())
	var ce *tls.CertificateVerificationError
	if o := next(t, ch); o.hook != "failed" || !errors.As(o.err, &ce) || strings.Contains(o.err.Error(), "gave up") {
		t.Fatalf("outcome %s: %v, want a final certificate verification error", o.hook, o.err)
	}
	if rec.n.Load() != 0 {
		t.Errorf("receiver got %d requests", rec.n.Load())
	}
}
