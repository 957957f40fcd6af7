package sources

import (
	"context"
	"slices"
	"sync"
)

// Render slots bound the memory-heavy work of a process: render children (each under
// Limits.MaxRenderMemory) and the indexing of received git packs (FetchOptions.IndexSlot).
// They are shared between tenants (a Sync's namespace, LoadOptions.Tenant): a slot that
// frees goes to the waiting render of the tenant that holds the fewest slots, first come
// among equals, so a namespace whose renders hold every slot cannot also take each slot
// as it frees while another namespace waits.

// slotSets holds, per size, the process-wide render slots of that size.
var slotSets = struct {
	sync.Mutex
	m map[int]*slots
}{m: map[int]*slots{}}

// renderSlots returns the n render slots (n ≤ 0: DefaultRenderSlots) shared by every render
// that asks for n.
func renderSlots(n int) *slots {
	if n <= 0 {
		n = DefaultRenderSlots
	}
	slotSets.Lock()
	defer slotSets.Unlock()
	s, ok := slotSets.m[n]
	if !ok {
		s = &slots{n: n, held: map[string]int{}}
		slotSets.m[n] = s
	}
	return s
}

// slots is a semaphore of n slots handed out fairly between tenants. A free slot exists
// only while nobody waits.
type slots struct {
	mu      sync.Mutex
	n       int
	total   int
	held    map[string]int // tenant → slots held
	waiting []*slotWaiter  // in arrival order
}

type slotWaiter struct {
	tenant  string
	granted chan struct{}
}

// acquire takes a slot for tenant, waiting for one until ctx ends, and returns the func
// that gives it back.
func (s *slots) acquire(ctx context.Context, tenant string) (func(), error) {
	s.mu.Lock()
	if s.total < s.n {
		s.grantLocked(tenant)
		s.mu.Unlock()
		return s.releaser(tenant), nil
	}
	w := &slotWaiter{tenant: tenant, granted: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.granted:
		return s.releaser(tenant), nil
	case <-ctx.Done():
		s.mu.Lock()
		i := slices.Index(s.waiting, w)
		if i >= 0 {
			s.waiting = slices.Delete(s.waiting, i, i+1)
		}
		s.mu.Unlock()
		if i < 0 { // granted as ctx ended
			s.release(tenant)
		}
		return nil, context.Cause(ctx)
	}
}

func (s *slots) grantLocked(tenant string) {
	s.total++
	s.held[tenant]++
}

func (s *slots) releaser(tenant string) func() {
	var once sync.Once
	return func() { once.Do(func() { s.release(tenant) }) }
}

// release gives tenant's slot back, to the waiter whose tenant holds the fewest.
func (s *slots) release(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total--
	if s.held[tenant]--; s.held[tenant] <= 0 {
		delete(s.held, tenant)
	}
	if len(s.waiting) == 0 {
		return
	}
	next := 0
	for i, w := range s.waiting {
		if s.held[w.tenant] < s.held[s.waiting[next].tenant] {
			next = i
		}
	}
	w := s.waiting[next]
	s.waiting = slices.Delete(s.waiting, next, next+1)
	s.grantLocked(w.tenant)
	close(w.granted)
}

// inUse reports how many slots are held (for tests).
func (s *slots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

type tenantKey struct{}

// withTenant returns ctx naming the tenant whose render slots it takes.
func withTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// AcquireRenderSlot takes one of the process's limits.RenderSlots render slots for tenant,
// waiting until ctx ends, and returns the func that gives it back: for other work under
// Limits.MaxRenderMemory in a child of its own (SOPS decryption), so that the children of
// a process hold at most RenderSlots × MaxRenderMemory together.
func AcquireRenderSlot(ctx context.Context, limits Limits, tenant string) (func(), error) {
	return renderSlots(limits.RenderSlots).acquire(ctx, tenant)
}
