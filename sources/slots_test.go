package sources

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRenderSlotsFairBetweenTenants: while one namespace holds every render slot and has
// more renders waiting, a slot that frees goes to another namespace's waiting render, not
// to the busy namespace's next one (with one channel, first come first served, the busy
// namespace's earlier waiter would take each freed slot).
func TestRenderSlotsFairBetweenTenants(t *testing.T) {
	s := &slots{n: 2, held: map[string]int{}}
	ctx := t.Context()
	a1, _ := s.acquire(ctx, "team-a")
	a2, _ := s.acquire(ctx, "team-a")
	got := make(chan string, 3)
	wait := func(tenant string) {
		release, err := s.acquire(ctx, tenant)
		if err != nil {
			t.Error(err)
			return
		}
		got <- tenant
		_ = release // held until the test ends
	}
	go wait("team-a") // queued first
	waitQueued(t, s, 1)
	go wait("team-b")
	waitQueued(t, s, 2)
	a1()
	if first := <-got; first != "team-b" {
		t.Fatalf("the freed slot went to %s, want team-b (team-a holds the other slot)", first)
	}
	a2()
	if second := <-got; second != "team-a" {
		t.Fatalf("the next freed slot went to %s, want team-a", second)
	}
	if n := s.inUse(); n != 2 {
		t.Errorf("%d slots in use, want 2", n)
	}
}

// TestRenderSlotsWaitEndsWithContext: a render waiting for a slot gives up with its context
// and leaves the slots as they were.
func TestRenderSlotsWaitEndsWithContext(t *testing.T) {
	s := &slots{n: 1, held: map[string]int{}}
	release, _ := s.acquire(t.Context(), "a")
	ctx, cancel := context.WithCancelCause(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := s.acquire(ctx, "b")
		errc <- err
	}()
	waitQueued(t, s, 1)
	stop := errors.New("reconcile over")
	cancel(stop)
	if err := <-errc; !errors.Is(err, stop) {
		t.Fatalf("acquire: %v, want the context's cause", err)
	}
	release()
	if n := s.inUse(); n != 0 {
		t.Errorf("%d slots in use after the only holder released, want 0", n)
	}
}

// waitQueued waits until n renders wait for a slot.
func waitQueued(t *testing.T, s *slots, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		queued := len(s.waiting)
		s.mu.Unlock()
		if queued == n {
			return
		}
	}
	t.Fatalf("%d renders never waited for a slot", n)
}
