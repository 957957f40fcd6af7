package daemon

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// next is when to reconcile again: the interval with ±10% jitter after success or a terminal
// failure, an exponential back-off from retryInterval (capped at the interval) after a
// transient failure.
// minInterval is the shortest interval or retry interval honoured, the CRD's minimum.
const minInterval = time.Second

func (r *reconciler) next(s *v1alpha1.Sync, retry bool) time.Duration {
	// The CRD defaults an absent interval to 5m and refuses anything under 1s; these guard
	// what an older schema let be stored (an explicit 0s, 1ms) from a hot loop.
	interval := s.Spec.Interval.Duration
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	interval = max(interval, minInterval)
	if !retry {
		return time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64()))
	}
	base := 30 * time.Second
	if s.Spec.RetryInterval != nil && s.Spec.RetryInterval.Duration > 0 {
		base = max(s.Spec.RetryInterval.Duration, minInterval)
	}
	n := r.retries.inc(client.ObjectKeyFromObject(s))
	d := base << min(n-1, 16)
	return min(d, interval)
}

// retryCounter counts consecutive transient failures per Sync for the back-off.
type retryCounter struct {
	mu sync.Mutex
	n  map[types.NamespacedName]int
}

func (c *retryCounter) inc(k types.NamespacedName) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[types.NamespacedName]int{}
	}
	c.n[k]++
	return c.n[k]
}

func (c *retryCounter) reset(k types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.n, k)
}
