package shard

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/cmd/converge/daemon/fence/fencetest"
)

// TestShardFence: a write made for a shard goes out only while the shard is held and
// renewed within the deadline; a released or lost shard, or one past its deadline, refuses
// it before it is sent. Reads and writes that name no shard pass.
func TestShardFence(t *testing.T) {
	var sent int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent++ }))
	defer srv.Close()
	now := time.Unix(1000, 0)
	tab := newTable(4, 10*time.Second)
	tab.now = func() time.Time { return now }
	rt := tab.Wrap(http.DefaultTransport)
	do := func(ctx context.Context, method string) error {
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	shard1 := withShard(context.Background(), 1)
	mustRefuse := func(what string) {
		t.Helper()
		before := sent
		if err := do(shard1, http.MethodPatch); !errors.Is(err, errShardNotHeld) || sent != before {
			t.Errorf("%s: a write went out (err %v)", what, err)
		}
		if err := do(shard1, http.MethodGet); err != nil {
			t.Errorf("%s: a read was refused: %v", what, err)
		}
		if err := do(context.Background(), http.MethodPost); err != nil {
			t.Errorf("%s: a write naming no shard was refused: %v", what, err)
		}
	}
	mustRefuse("never held")
	if _, ok := tab.begin(1); ok {
		t.Error("a reconcile started for a shard not held")
	}

	tab.renewed(1, now)
	done, ok := tab.begin(1)
	if !ok {
		t.Fatal("no reconcile starts for a held shard")
	}
	if err := do(shard1, http.MethodPatch); err != nil {
		t.Fatalf("held: %v", err)
	}
	// Releasing: no reconcile starts, the running one may still write.
	if !tab.stop(1, false) {
		t.Fatal("stop: nothing to drain")
	}
	if _, ok := tab.begin(1); ok {
		t.Error("a reconcile started for a shard being released")
	}
	if err := do(shard1, http.MethodPatch); err != nil {
		t.Errorf("a reconcile of a shard being released could not finish its writes: %v", err)
	}
	// Past the deadline without a renew (paused, or the API server unreachable).
	now = now.Add(10 * time.Second)
	mustRefuse("past the renew deadline")
	now = now.Add(-5 * time.Second)
	// Lost: refused at once, though within the deadline.
	tab.stop(1, true)
	mustRefuse("lost")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if err := tab.drain(ctx, 1); err == nil {
		t.Error("drained while a reconcile still runs")
	}
	cancel()
	done()
	if err := tab.drain(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	tab.drained(1)
	if !tab.free(1) {
		t.Error("a lost and drained shard is not free to acquire again")
	}
}

// TestShardFenceCancelsInFlightWrite: a write sent while its shard is held is cancelled
// once the shard's holding ends unrenewed, so it cannot stay in flight long after another
// replica may have taken the shard over (the API server stalled, the connection hung).
// Were the fence checked only when the request is sent, the write below, answered after
// 10 s, would succeed although the shard ran out 9.7 s earlier.
func TestShardFenceCancelsInFlightWrite(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}))
	defer srv.Close()
	tab := newTable(2, 300*time.Millisecond)
	tab.renewed(1, time.Now())
	req, _ := http.NewRequestWithContext(withShard(context.Background(), 1), http.MethodPatch, srv.URL, nil)
	resp, err := tab.Wrap(http.DefaultTransport).RoundTrip(req)
	if err == nil {
		resp.Body.Close()
		t.Fatal("a write still in flight when its shard ran out went through")
	}
	if !errors.Is(err, errShardNotHeld) {
		t.Fatalf("want the write cancelled by the shard fence, got %v", err)
	}
}

// TestShardFenceKeepsRenewedWrite: a slow write whose shard is renewed while it is in flight
// goes on (an admission webhook taking longer than the renew deadline must not fail every
// apply under sharding), and once the answer's status has come its body is read to the end
// even after the shard ran out: the write happened. Both were cut at the deadline of the
// first version of the in-flight cancellation.
func TestShardFenceKeepsRenewedWrite(t *testing.T) {
	tab := newTable(2, 300*time.Millisecond)
	tab.renewed(0, time.Now())
	stop := make(chan struct{})
	defer close(stop)
	go func() { // the coordinator's renewals
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				tab.renewAll(time.Now())
			}
		}
	}()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(900 * time.Millisecond) // three renew deadlines
		_, _ = w.Write([]byte("applied"))
	}))
	defer slow.Close()
	rt := tab.Wrap(http.DefaultTransport)
	req, _ := http.NewRequestWithContext(withShard(context.Background(), 0), http.MethodPatch, slow.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("a write whose shard stayed renewed was cancelled: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "applied" {
		t.Fatalf("body %q, %v", body, err)
	}

	// Headers in time, the body after the shard ran out (renewals stopped).
	lateBody := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(700 * time.Millisecond)
		_, _ = w.Write([]byte("late"))
	}))
	defer lateBody.Close()
	tab1 := newTable(2, 300*time.Millisecond)
	tab1.renewed(1, time.Now())
	req, _ = http.NewRequestWithContext(withShard(context.Background(), 1), http.MethodPatch, lateBody.URL, nil)
	resp, err = tab1.Wrap(http.DefaultTransport).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "late" {
		t.Fatalf("the body of an answered write was cut: %q, %v", body, err)
	}
}

// TestShardRefusedMarksTheReconcile: a write refused by the shard fence marks the
// reconcile's context, also when the shard is writable again afterwards (a renewal answered
// late), so the reconcile records no outcome made of the fence's refusals. Without the
// mark, the status of such a reconcile would say ApplyFailed with "shard not held" errors
// (as the 3-replica scale bench shows).
func TestShardRefusedMarksTheReconcile(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	now := time.Unix(1000, 0)
	tab := newTable(2, 10*time.Second)
	tab.now = func() time.Time { return now }
	tab.renewed(0, now)
	rt := tab.Wrap(http.DefaultTransport)
	patch := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, srv.URL, nil)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	ctx := withShard(context.Background(), 0)
	if err := patch(ctx); err != nil || shardRefused(ctx) {
		t.Fatalf("a write of a held shard: %v, refused %v", err, shardRefused(ctx))
	}
	now = now.Add(11 * time.Second) // past the deadline, not swept yet
	if err := patch(ctx); !errors.Is(err, errShardNotHeld) {
		t.Fatalf("want the fence's refusal, got %v", err)
	}
	tab.renewAll(now.Add(-2 * time.Second)) // a renewal sent in time, answered late: writable again
	if !tab.writable(0) {
		t.Fatal("the late renewal did not extend the shard")
	}
	if err := patch(ctx); err != nil {
		t.Fatal(err)
	}
	if !shardRefused(ctx) {
		t.Error("the reconcile whose write was refused is not marked")
	}
	if other := withShard(context.Background(), 0); shardRefused(other) {
		t.Error("another reconcile is marked")
	}
}

// TestShardFenceChecksAgainAtTheBody: a write that passed the shard fence's check, then was
// held up until its shard was lost (the request waited for a connection), is cut when the
// transport reads its body, and the server receives no complete write. Without the check at
// the body, the server would receive the write whole.
func TestShardFenceChecksAgainAtTheBody(t *testing.T) {
	now := time.Unix(1000, 0)
	tab := newTable(1, 10*time.Second)
	tab.now = func() time.Time { return now }
	tab.renewed(0, now)
	url, whole := fencetest.BodyCounter(t)
	rt := tab.Wrap(fencetest.PausingRT{Pause: func() { now = now.Add(20 * time.Second) }, Next: http.DefaultTransport})
	call := &shardCall{i: 0}
	req, _ := http.NewRequestWithContext(context.WithValue(context.Background(), shardKey{}, call),
		http.MethodPatch, url+"/api/v1/namespaces/x/configmaps/y", strings.NewReader(`{"data":{"v":"2"}}`))
	if resp, err := rt.RoundTrip(req); err == nil {
		_ = resp.Body.Close()
		t.Errorf("a write held up past its shard's validity after its check was sent: %d", resp.StatusCode)
	}
	if n := whole.Load(); n != 0 {
		t.Errorf("the server received %d complete writes", n)
	}
	if !call.refused.Load() {
		t.Error("the cut write did not mark its reconcile refused")
	}
}
