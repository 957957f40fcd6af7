package daemon

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/converge-dev/converge/cmd/converge/daemon/fence/fencetest"
)

type countingRT struct{ calls int }

func (c *countingRT) RoundTrip(*http.Request) (*http.Response, error) {
	c.calls++
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody}, nil
}

// TestPauseFence checks the fence on a clock the test moves: writes pass while the process
// runs; after a pause longer than the renew deadline (seen at a write, before any tick) the
// write is refused before it is sent, stop is called once, and every later write is refused
// while reads still pass.
func TestPauseFence(t *testing.T) {
	now := time.Unix(1000, 0)
	var stops []error
	f := newPauseFence(10*time.Second, func(err error) { stops = append(stops, err) })
	f.now, f.last = func() time.Time { return now }, now
	inner := &countingRT{}
	rt := f.wrap(inner)
	send := func(method string) error {
		req, _ := http.NewRequest(method, "https://api.example/api/v1/namespaces/x/configmaps/y", nil)
		_, err := rt.RoundTrip(req)
		return err
	}

	now = now.Add(9 * time.Second) // slow, but within the deadline
	if err := send(http.MethodPatch); err != nil {
		t.Fatalf("a write within the deadline: %v", err)
	}
	now = now.Add(20 * time.Second) // paused
	if err := send(http.MethodPatch); !errors.Is(err, errFenced) {
		t.Fatalf("a write after a pause: %v, want errFenced", err)
	}
	if err := send(http.MethodDelete); !errors.Is(err, errFenced) {
		t.Errorf("a later write: %v, want errFenced", err)
	}
	if err := send(http.MethodGet); err != nil {
		t.Errorf("a read after the pause: %v", err)
	}
	if inner.calls != 2 {
		t.Errorf("%d requests reached the API server, want 2 (the first write and the read)", inner.calls)
	}
	if len(stops) != 1 || !errors.Is(stops[0], errFenced) {
		t.Errorf("stop called %d times (%v), want once with errFenced", len(stops), stops)
	}
}

// TestFenceChecksAgainAtTheBody: a write that passed a fence's check, then was held up until
// the right to write had gone (a SIGSTOP between the check and the send; a shard lost while
// the request waited for a connection), is cut when the transport reads its body, and the
// server receives no complete write (for a shard:
// shard.TestShardFenceChecksAgainAtTheBody). Without the check at the body, the server
// would receive both writes whole (the window of e2e.TestBinaryPausedLeaderIsFenced's
// once-seen write sent after the resume).
func TestFenceChecksAgainAtTheBody(t *testing.T) {
	t.Run("pause", func(t *testing.T) {
		now := time.Unix(1000, 0)
		f := newPauseFence(10*time.Second, func(error) {})
		f.now, f.last = func() time.Time { return now }, now
		url, whole := fencetest.BodyCounter(t)
		rt := f.wrap(fencetest.PausingRT{Pause: func() { now = now.Add(20 * time.Second) }, Next: http.DefaultTransport})
		req, _ := http.NewRequest(http.MethodPatch, url+"/api/v1/namespaces/x/configmaps/y", strings.NewReader(`{"data":{"v":"2"}}`))
		if resp, err := rt.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
			t.Errorf("a write held up past the pause fence's deadline after its check was sent: %d", resp.StatusCode)
		}
		if n := whole.Load(); n != 0 {
			t.Errorf("the server received %d complete writes", n)
		}
	})
}
