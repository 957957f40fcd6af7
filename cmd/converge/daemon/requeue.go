package daemon

import (
	"math/rand/v2"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// minInterval is the shortest interval or retry interval honoured, the CRD's minimum.
const minInterval = time.Second

// after is when to reconcile s again after outcome o: while its objects become Current, when
// readiness is to be judged again (recheck); after a failure that does not stall, with
// back-off; else at the interval.
func (r *reconciler) after(s *v1alpha1.Sync, o status.Outcome) time.Duration {
	switch {
	case o.Ready == metav1.ConditionUnknown && o.Reason == reasonProgressing:
		return recheck(s, o.AttemptedRevision, time.Now())
	case rollbackStarted(s, o) && o.AttemptedRevision == o.RolledBack.From:
		return minInterval // the failed head recorded: apply the revision rolled back to now
	case o.Ready == metav1.ConditionFalse && !o.Stalled:
		return r.next(s, true)
	}
	return r.next(s, false)
}

// next is when to reconcile again: the interval with ±10% jitter after success or a terminal
// failure, an exponential back-off from retryInterval (capped at the interval) after a
// transient failure (the Sync's syncState counts them).
func (r *reconciler) next(s *v1alpha1.Sync, retry bool) time.Duration {
	interval := intervalOf(s)
	if !retry {
		return time.Duration(float64(interval) * (0.9 + 0.2*rand.Float64()))
	}
	var n int
	r.states.with(client.ObjectKeyFromObject(s), func(st *syncState) {
		st.retries++
		n = st.retries
	})
	d := retryBase(s) << min(n-1, 16)
	return min(d, interval)
}

// succeeded ends s's run of transient failures: the next one backs off from retryInterval.
func (r *reconciler) succeeded(s *v1alpha1.Sync) {
	r.states.with(client.ObjectKeyFromObject(s), func(st *syncState) { st.retries = 0 })
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
