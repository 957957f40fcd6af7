package daemon

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// resultSuccess is the result label of a reconcile that left the Sync Ready; a failed
// reconcile is labelled with its condition reason (FetchFailed, BuildFailed, ...).
const resultSuccess = "success"

// recorder holds Converge's own metrics (controller-runtime's are beside them, see
// newMetricsRegistry). It is registered on the daemon's own registry
// (never the global one), so several daemons can run in one process. Label values are
// bounded: a Sync's namespace and name, actions, kinds, reasons, HTTP verbs and codes; never
// object names or revisions.
type recorder struct {
	// syncs holds every per-Sync series (metrics_sync.go).
	syncs       *syncSeries
	deferrals   *prometheus.CounterVec
	apiRequests *prometheus.CounterVec

	now func() time.Time
}

// leadClock is what the lead-time metrics remember of one Sync (its syncState.lead): the
// revision last loaded with its commit time, and the revision last attempted with when the
// daemon first saw it.
type leadClock struct {
	loaded commitTime
	seen   seenRevision
}

// seenRevision is the revision a Sync last attempted, when the daemon first saw it, and
// when it was committed (zero when unknown).
type seenRevision struct {
	revision  string
	at        time.Time
	committed time.Time
	ready     bool // the lead time was observed, or the revision was applied before we saw it
}

// syncLabels are the labels every per-Sync series starts with.
var syncLabels = []string{"namespace", "name"}

// newMetricsRegistry returns what the daemon serves on /metrics: controller-runtime's
// registry (its reconcile totals and durations, work queues, leader election, client-go's REST
// client requests, and the Go and process collectors) and the daemon's own registry with a
// recorder registered on it. controller-runtime's registry is the process's (its metrics are
// registered at init); the recorder's is not, so several daemons can run in one process.
func newMetricsRegistry() (prometheus.Gatherer, *recorder, error) {
	reg := prometheus.NewRegistry()
	rec, err := newRecorder(reg)
	if err != nil {
		return nil, nil, err
	}
	return prometheus.Gatherers{ctrlmetrics.Registry, reg}, rec, nil
}

// newRecorder creates the daemon's metrics and registers them on reg.
func newRecorder(reg prometheus.Registerer) (*recorder, error) {
	r := &recorder{now: time.Now, syncs: newSyncSeries()}
	r.deferrals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_reconciles_deferred_total", Help: "Reconciles deferred, reading and writing nothing, because their namespace ran its share of the workers (--max-concurrent-per-namespace).",
	}, []string{"namespace"})
	r.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_api_requests_total", Help: "Kubernetes API requests of the daemon by verb and HTTP code (\"error\" when no response came).",
	}, []string{"verb", "code"})
	for _, c := range r.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// sourceLoaded records the duration of one fetch and render.
func (r *recorder) sourceLoaded(s *v1alpha1.Sync, d time.Duration) {
	r.syncs.observe(keyOf(s), famLoadDuration, d.Seconds())
}

// commitTime is when a revision was committed (zero when unknown).
type commitTime struct {
	revision string
	at       time.Time
}

// applied records the objects of one engine Apply at revision (or of the engine's answer
// for it: quiet) and its refusals and conflicts. A configured object at the revision last
// applied successfully is drift.
func (r *recorder) applied(s *v1alpha1.Sync, revision string, res *engine.Result, err error, quiet bool) {
	key := keyOf(s)
	if quiet {
		r.syncs.add(key, famQuietReconciles, 1)
	}
	conflicts := 0
	if res != nil {
		// Counted here first: a Sync of thousands of objects takes its series' lock a few
		// times, not once per object.
		actions, drifted := map[string]float64{}, map[string]float64{}
		drift := revision != "" && revision == s.Status.LastAppliedRevision
		for _, list := range [][]engine.Change{res.Changes, res.Pruned} {
			for _, c := range list {
				actions[string(c.Action)]++
				if drift && c.Action == engine.ActionConfigured {
					drifted[c.Object.GroupKind.Kind]++
				}
				if c.Err != nil && apierrors.IsConflict(c.Err) {
					conflicts++
				}
			}
		}
		for action, n := range actions {
			r.syncs.add(key, famObjectActions, n, action)
		}
		for kind, n := range drifted {
			r.syncs.add(key, famDrift, n, kind)
		}
	}
	if conflicts == 0 && apierrors.IsConflict(err) {
		conflicts = 1 // a conflict outside the objects, e.g. on the inventory
	}
	if conflicts > 0 {
		r.syncs.add(key, famApplyConflicts, float64(conflicts))
	}
	if errors.Is(err, engine.ErrPruneRefused) {
		r.syncs.add(key, famPruneRefusals, 1)
	}
}

// reconciled records one reconcile of s (as read before it) that ended in o, started at
// start; writeErr is the status write's error.
func (r *recorder) reconciled(s *v1alpha1.Sync, o status.Outcome, start time.Time, writeErr error, lead *leadClock) {
	key := keyOf(s)
	now := r.now()
	r.syncs.observe(key, famReconcileDuration, now.Sub(start).Seconds())
	result := resultSuccess
	if o.Ready != metav1.ConditionTrue {
		result = o.Reason
	}
	r.syncs.add(key, famReconciles, 1, result)
	// Rare events start at 0 so that rate() and increase() see their first one.
	for _, f := range []family{famPruneRefusals, famApplyConflicts, famStatusConflicts, famStatusFailures} {
		r.syncs.add(key, f, 0)
	}
	if writeErr != nil {
		r.syncs.add(key, famStatusFailures, 1)
	}
	r.setCondition(s, v1alpha1.ConditionReady, o.Ready)
	stalled := metav1.ConditionFalse
	if o.Stalled {
		stalled = metav1.ConditionTrue
	}
	r.setCondition(s, v1alpha1.ConditionStalled, stalled)
	r.syncs.set(key, famSuspended, 0)
	r.syncs.set(key, famInterval, s.Spec.Interval.Seconds())
	if o.AppliedRevision != "" {
		r.syncs.set(key, famLastApplied, float64(now.UnixNano())/1e9)
	}
	if o.Inventory != nil {
		r.syncs.set(key, famInventory, float64(o.Inventory.Entries))
	}
	rolledBack := s.Status.RolledBack != nil
	if o.RollbackKnown {
		rolledBack = o.RolledBack != nil
	}
	r.syncs.set(key, famRolledBack, map[bool]float64{false: 0, true: 1}[rolledBack])
	if o.DriftKnown {
		r.syncs.set(key, famDrifted, float64(o.Drift.Count()))
	}
	r.observeLeadTime(s, o, start, now, lead)
}

// observeLeadTime observes, once per revision, the time from the first reconcile that saw it
// to the first that left the Sync Ready at it. A revision that was already applied when the
// daemon first saw it (a restart) is not observed.
func (r *recorder) observeLeadTime(s *v1alpha1.Sync, o status.Outcome, start, now time.Time, lead *leadClock) {
	if o.AttemptedRevision == "" || lead == nil {
		return
	}
	seen := lead.seen
	if seen.revision != o.AttemptedRevision {
		seen = seenRevision{revision: o.AttemptedRevision, at: start, ready: o.AttemptedRevision == s.Status.LastAppliedRevision}
		if lead.loaded.revision == o.AttemptedRevision {
			seen.committed = lead.loaded.at
		}
	}
	if !seen.ready && o.Ready == metav1.ConditionTrue && o.AppliedRevision == seen.revision {
		r.syncs.observe(keyOf(s), famLeadTime, now.Sub(seen.at).Seconds())
		if !seen.committed.IsZero() {
			r.syncs.observe(keyOf(s), famCommitLeadTime, now.Sub(seen.committed).Seconds())
		}
		seen.ready = true
	}
	lead.seen = seen
}

func (r *recorder) setCondition(s *v1alpha1.Sync, typ string, st metav1.ConditionStatus) {
	for _, v := range []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown} {
		val := 0.0
		if v == st {
			val = 1
		}
		r.syncs.set(keyOf(s), famCondition, val, typ, string(v))
	}
}

// suspend records that s is suspended; its other metrics keep their last values.
func (r *recorder) suspend(s *v1alpha1.Sync) {
	r.syncs.set(keyOf(s), famSuspended, 1)
}

// deferred counts a reconcile deferred because namespace ns ran its share of the workers
// (one series per namespace, kept while the daemon runs).
func (r *recorder) deferred(ns string) {
	r.deferrals.WithLabelValues(ns).Inc()
}

// collectors are what the recorder registers.
func (r *recorder) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.syncs, r.deferrals, r.apiRequests}
}

// statusConflict counts a 409 conflict on a status write of the Sync ns/name.
func (r *recorder) statusConflict(ns, name string) {
	r.syncs.add(types.NamespacedName{Namespace: ns, Name: name}, famStatusConflicts, 1)
}

// notified counts a notification of the Sync ns/name by provider type and result.
func (r *recorder) notified(ns, name, provider, result string) {
	r.syncs.add(types.NamespacedName{Namespace: ns, Name: name}, famNotifications, 1, provider, result)
}

// forget drops every series of a deleted Sync.
func (r *recorder) forget(key types.NamespacedName) {
	r.syncs.forget(key)
}

// keyOf names the series of s.
func keyOf(s *v1alpha1.Sync) types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
}
