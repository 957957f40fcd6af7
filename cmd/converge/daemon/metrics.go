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
	reconcileDuration *prometheus.HistogramVec
	reconciles        *prometheus.CounterVec
	loadDuration      *prometheus.HistogramVec
	objectActions     *prometheus.CounterVec
	quietReconciles   *prometheus.CounterVec
	condition         *prometheus.GaugeVec
	suspended         *prometheus.GaugeVec
	interval          *prometheus.GaugeVec
	lastApplied       *prometheus.GaugeVec
	inventory         *prometheus.GaugeVec
	rolledBack        *prometheus.GaugeVec
	drift             *prometheus.CounterVec
	drifted           *prometheus.GaugeVec
	pruneRefusals     *prometheus.CounterVec
	deferrals         *prometheus.CounterVec
	applyConflicts    *prometheus.CounterVec
	statusConflicts   *prometheus.CounterVec
	statusFailures    *prometheus.CounterVec
	leadTime          *prometheus.HistogramVec
	commitLeadTime    *prometheus.HistogramVec
	apiRequests       *prometheus.CounterVec
	notifications     *prometheus.CounterVec

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

var syncLabels = []string{"namespace", "name"}

func withSync(extra ...string) []string { return append(append([]string{}, syncLabels...), extra...) }

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
	r := &recorder{now: time.Now}
	r.reconcileMetrics()
	r.stateMetrics()
	r.eventMetrics()
	for _, c := range r.collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// reconcileMetrics defines the metrics of each reconcile: its duration and result, the
// source load, the objects handled and the lead times.
func (r *recorder) reconcileMetrics() {
	durations := prometheus.ExponentialBuckets(0.05, 2, 12) // 50ms … ~100s
	r.reconcileDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "converge_reconcile_duration_seconds", Help: "Duration of a reconcile of a Sync, fetch to status write.", Buckets: durations,
	}, syncLabels)
	r.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_reconciles_total", Help: "Reconciles of a Sync by result: success, or the Ready condition reason of a failure.",
	}, withSync("result"))
	r.loadDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "converge_source_load_duration_seconds", Help: "Duration of fetching and rendering the source of a Sync.", Buckets: durations,
	}, syncLabels)
	r.objectActions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_object_actions_total", Help: "Objects handled by the apply of a Sync, by action: created, configured, unchanged, pruned, skipped, failed.",
	}, withSync("action"))
	r.quietReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_quiet_reconciles_total", Help: "Reconciles of a Sync answered without decoding or applying its render: the render, the spec and every object unchanged since a reconcile that changed nothing.",
	}, syncLabels)
	r.leadTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "converge_revision_lead_time_seconds", Help: "Seconds from the daemon first seeing a revision of a Sync to the Sync being Ready at it.",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1s … ~2h
	}, syncLabels)
	r.commitLeadTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "converge_commit_lead_time_seconds", Help: "Seconds from the commit time of a revision to the Sync being Ready at it (git sources).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 16), // 1s … ~9h
	}, syncLabels)
}

// stateMetrics defines the gauges of each Sync's state as of its last reconcile.
func (r *recorder) stateMetrics() {
	r.condition = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_condition", Help: "A condition of a Sync as of its last reconcile: 1 for the current status (True, False or Unknown), 0 for the others.",
	}, withSync("condition", "status"))
	r.suspended = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_suspended", Help: "1 when the Sync is suspended, else 0.",
	}, syncLabels)
	r.interval = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_interval_seconds", Help: "The resync interval of a Sync (spec.interval).",
	}, syncLabels)
	r.lastApplied = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_last_applied_timestamp_seconds", Help: "Unix time of the last successful apply of a Sync by this daemon.",
	}, syncLabels)
	r.inventory = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_inventory_entries", Help: "Objects in the inventory of a Sync after its last successful apply.",
	}, syncLabels)
	r.rolledBack = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_sync_rolled_back", Help: "1 while the Sync applies an earlier revision than its source's (status.rolledBack), else 0.",
	}, syncLabels)
}

// eventMetrics defines the counters of rarer events: drift taken back, prune refusals,
// conflicts, failed status writes, and the API requests of the daemon.
func (r *recorder) eventMetrics() {
	r.drift = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_drift_corrections_total", Help: "Objects configured again at an unchanged revision (out-of-band drift taken back), by kind.",
	}, withSync("kind"))
	r.drifted = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "converge_drifted_objects", Help: "Objects a Sync's last reconcile of its applied revision found drifted and left so (driftPolicy Report); 0 when none.",
	}, syncLabels)
	r.pruneRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_prune_refusals_total", Help: "Applies whose prune was refused (empty render or over the prune budget).",
	}, syncLabels)
	r.applyConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_apply_conflicts_total", Help: "Objects whose apply or prune got a 409 conflict.",
	}, syncLabels)
	r.statusConflicts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_status_write_conflicts_total", Help: "409 conflicts on Sync status writes; each is re-read and retried within the writer's bound.",
	}, syncLabels)
	r.statusFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_status_write_failures_total", Help: "Sync status writes that failed after their retries.",
	}, syncLabels)
	r.deferrals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_reconciles_deferred_total", Help: "Reconciles deferred, reading and writing nothing, because their namespace ran its share of the workers (--max-concurrent-per-namespace).",
	}, []string{"namespace"})
	r.apiRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_api_requests_total", Help: "Kubernetes API requests of the daemon by verb and HTTP code (\"error\" when no response came).",
	}, []string{"verb", "code"})
	r.notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_notifications_total", Help: "Notifications of a Sync's transitions by provider type and result: delivered, failed (after its retries) or dropped (a full queue).",
	}, withSync("provider", "result"))
}

func (r *recorder) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reconcileDuration, r.reconciles, r.loadDuration, r.objectActions, r.quietReconciles, r.condition,
		r.suspended, r.interval, r.lastApplied, r.inventory, r.rolledBack, r.drift, r.drifted, r.pruneRefusals, r.applyConflicts,
		r.statusConflicts, r.statusFailures, r.leadTime, r.commitLeadTime, r.apiRequests, r.deferrals, r.notifications}
}

// partialDeleter is a metric vector whose series forget can drop by Sync.
type partialDeleter interface {
	DeletePartialMatch(prometheus.Labels) int
}

// sourceLoaded records the duration of one fetch and render.
func (r *recorder) sourceLoaded(s *v1alpha1.Sync, d time.Duration) {
	r.loadDuration.WithLabelValues(s.Namespace, s.Name).Observe(d.Seconds())
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
	ns, name := s.Namespace, s.Name
	if quiet {
		r.quietReconciles.WithLabelValues(ns, name).Inc()
	}
	conflicts := 0
	if res != nil {
		drift := revision != "" && revision == s.Status.LastAppliedRevision
		for _, list := range [][]engine.Change{res.Changes, res.Pruned} {
			for _, c := range list {
				r.objectActions.WithLabelValues(ns, name, string(c.Action)).Inc()
				if drift && c.Action == engine.ActionConfigured {
					r.drift.WithLabelValues(ns, name, c.Object.GroupKind.Kind).Inc()
				}
				if c.Err != nil && apierrors.IsConflict(c.Err) {
					conflicts++
				}
			}
		}
	}
	if conflicts == 0 && apierrors.IsConflict(err) {
		conflicts = 1 // a conflict outside the objects, e.g. on the inventory
	}
	if conflicts > 0 {
		r.applyConflicts.WithLabelValues(ns, name).Add(float64(conflicts))
	}
	if errors.Is(err, engine.ErrPruneRefused) {
		r.pruneRefusals.WithLabelValues(ns, name).Inc()
	}
}

// reconciled records one reconcile of s (as read before it) that ended in o, started at
// start; writeErr is the status write's error.
func (r *recorder) reconciled(s *v1alpha1.Sync, o status.Outcome, start time.Time, writeErr error, lead *leadClock) {
	ns, name := s.Namespace, s.Name
	now := r.now()
	r.reconcileDuration.WithLabelValues(ns, name).Observe(now.Sub(start).Seconds())
	result := resultSuccess
	if o.Ready != metav1.ConditionTrue {
		result = o.Reason
	}
	r.reconciles.WithLabelValues(ns, name, result).Inc()
	// Rare events start at 0 so that rate() and increase() see their first one.
	for _, c := range []*prometheus.CounterVec{r.pruneRefusals, r.applyConflicts, r.statusConflicts, r.statusFailures} {
		c.WithLabelValues(ns, name)
	}
	if writeErr != nil {
		r.statusFailures.WithLabelValues(ns, name).Inc()
	}
	r.setCondition(s, v1alpha1.ConditionReady, o.Ready)
	stalled := metav1.ConditionFalse
	if o.Stalled {
		stalled = metav1.ConditionTrue
	}
	r.setCondition(s, v1alpha1.ConditionStalled, stalled)
	r.suspended.WithLabelValues(ns, name).Set(0)
	r.interval.WithLabelValues(ns, name).Set(s.Spec.Interval.Seconds())
	if o.AppliedRevision != "" {
		r.lastApplied.WithLabelValues(ns, name).Set(float64(now.UnixNano()) / 1e9)
	}
	if o.Inventory != nil {
		r.inventory.WithLabelValues(ns, name).Set(float64(o.Inventory.Entries))
	}
	rolledBack := s.Status.RolledBack != nil
	if o.RollbackKnown {
		rolledBack = o.RolledBack != nil
	}
	r.rolledBack.WithLabelValues(ns, name).Set(map[bool]float64{false: 0, true: 1}[rolledBack])
	if o.DriftKnown {
		r.drifted.WithLabelValues(ns, name).Set(float64(o.Drift.Count()))
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
		r.leadTime.WithLabelValues(s.Namespace, s.Name).Observe(now.Sub(seen.at).Seconds())
		if !seen.committed.IsZero() {
			r.commitLeadTime.WithLabelValues(s.Namespace, s.Name).Observe(now.Sub(seen.committed).Seconds())
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
		r.condition.WithLabelValues(s.Namespace, s.Name, typ, string(v)).Set(val)
	}
}

// suspend records that s is suspended; its other metrics keep their last values.
func (r *recorder) suspend(s *v1alpha1.Sync) {
	r.suspended.WithLabelValues(s.Namespace, s.Name).Set(1)
}

// deferred counts a reconcile deferred because namespace ns ran its share of the workers
// (one series per namespace, kept while the daemon runs).
func (r *recorder) deferred(ns string) {
	r.deferrals.WithLabelValues(ns).Inc()
}

// forget drops every series of a deleted Sync.
func (r *recorder) forget(key types.NamespacedName) {
	labels := prometheus.Labels{"namespace": key.Namespace, "name": key.Name}
	for _, c := range r.collectors() {
		if v, ok := c.(partialDeleter); ok && c != r.apiRequests && c != r.deferrals {
			v.DeletePartialMatch(labels)
		}
	}
}
