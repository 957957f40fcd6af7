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
	interval := intervalOf(s)
	if !retry {
		return time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64()))
	}
	n := r.retries.inc(client.ObjectKeyFromObject(s))
	d := retryBase(s) << min(n-1, 16)
	return min(d, interval)
}

// intervalOf is the Sync's interval, at least minInterval. The CRD defaults an absent
// interval to 5m and refuses anything under 1s; this guards what an older schema let be
// stored (an explicit 0s, 1ms) from a hot loop.
func intervalOf(s *v1alpha1.Sync) time.Duration {
	interval := s.Spec.Interval.Duration
	if interval <= 0 {
		interval = 5 * time.Minute
	}
	return max(interval, minInterval)
}

// retryBase is the Sync's retry interval (30s when unset), at least minInterval: the first
// back-off after a failure.
func retryBase(s *v1alpha1.Sync) time.Duration {
	if s.Spec.RetryInterval != nil && s.Spec.RetryInterval.Duration > 0 {
		return max(s.Spec.RetryInterval.Duration, minInterval)
	}
	return 30 * time.Second
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
