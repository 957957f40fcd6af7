package notify

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestResolveCompletesTheProviderInAWorker: a provider completed by Resolve (its token read
// from a Secret) is sent with what Resolve gave; a Resolve that fails is retried as a failed
// attempt is, and one that fails for good (Permanent) is tried once and reported failed with
// its error, the receiver never asked.
func TestResolveCompletesTheProviderInAWorker(t *testing.T) {
	var rec recorder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.record(r)
		if r.Header.Get("Authorization") != "Bearer from-the-secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	d, ch := startDispatcher(t, fastRetries())

	var calls atomic.Int64
	flaky := func(_ context.Context, p Provider) (Provider, error) {
		if calls.Add(1) == 1 {
			return p, errors.New("connection reset reading the Secret")
		}
		p.Token = "from-the-secret"
		return p, nil
	}
	d.SendResolving(genericTo(srv.URL+"/hook"), flaky, testEvent())
	if o := next(t, ch); o.hook != "delivered" {
		t.Fatalf("outcome %s: %v, want delivered after Resolve's retry", o.hook, o.err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("Resolve called %d times, want 2 (a failure, then the retry)", n)
	}

	calls.Store(0)
	refused := func(_ context.Context, p Provider) (Provider, error) {
		calls.Add(1)
		return p, Permanent(errors.New("secrets \"hook\" is forbidden"))
	}
	asked := rec.n.Load()
	d.SendResolving(genericTo(srv.URL+"/hook"), refused, testEvent())
	o := next(t, ch)
	if o.hook != "failed" || o.err == nil || !strings.Contains(o.err.Error(), "forbidden") {
		t.Fatalf("outcome %s: %v, want failed naming the refused read", o.hook, o.err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("a Permanent Resolve error was tried %d times, want 1", n)
	}
	if n := rec.n.Load(); n != asked {
		t.Errorf("the receiver was asked %d times without a token", n-asked)
	}
}
