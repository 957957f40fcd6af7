package daemon

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/types"
)

// clientGolangFamily is a per-Sync metric as the daemon defined it with client_golang's
// vectors: the reference the compact series must expose alike.
type clientGolangFamily struct {
	fam     family
	kind    string // counter, gauge, histogram
	name    string
	help    string
	extra   []string
	buckets []float64
}

var clientGolangFamilies = []clientGolangFamily{
	{famReconcileDuration, "histogram", "converge_reconcile_duration_seconds", "Duration of a reconcile of a Sync, fetch to status write.", nil, prometheus.ExponentialBuckets(0.05, 2, 12)},
	{famReconciles, "counter", "converge_reconciles_total", "Reconciles of a Sync by result: success, or the Ready condition reason of a failure.", []string{"result"}, nil},
	{famLoadDuration, "histogram", "converge_source_load_duration_seconds", "Duration of fetching and rendering the source of a Sync.", nil, prometheus.ExponentialBuckets(0.05, 2, 12)},
	{famObjectActions, "counter", "converge_object_actions_total", "Objects handled by the apply of a Sync, by action: created, configured, unchanged, pruned, skipped, failed.", []string{"action"}, nil},
	{famQuietReconciles, "counter", "converge_quiet_reconciles_total", "Reconciles of a Sync answered without decoding or applying its render: the render, the spec and every object unchanged since a reconcile that changed nothing.", nil, nil},
	{famLeadTime, "histogram", "converge_revision_lead_time_seconds", "Seconds from the daemon first seeing a revision of a Sync to the Sync being Ready at it.", nil, prometheus.ExponentialBuckets(1, 2, 14)},
	{famCommitLeadTime, "histogram", "converge_commit_lead_time_seconds", "Seconds from the commit time of a revision to the Sync being Ready at it (git sources).", nil, prometheus.ExponentialBuckets(1, 2, 16)},
	{famCondition, "gauge", "converge_sync_condition", "A condition of a Sync as of its last reconcile: 1 for the current status (True, False or Unknown), 0 for the others.", []string{"condition", "status"}, nil},
	{famSuspended, "gauge", "converge_sync_suspended", "1 when the Sync is suspended, else 0.", nil, nil},
	{famInterval, "gauge", "converge_sync_interval_seconds", "The resync interval of a Sync (spec.interval).", nil, nil},
	{famLastApplied, "gauge", "converge_sync_last_applied_timestamp_seconds", "Unix time of the last successful apply of a Sync by this daemon.", nil, nil},
	{famInventory, "gauge", "converge_inventory_entries", "Objects in the inventory of a Sync after its last successful apply.", nil, nil},
	{famRolledBack, "gauge", "converge_sync_rolled_back", "1 while the Sync applies an earlier revision than its source's (status.rolledBack), else 0.", nil, nil},
	{famDrift, "counter", "converge_drift_corrections_total", "Objects configured again at an unchanged revision (out-of-band drift taken back), by kind.", []string{"kind"}, nil},
	{famDrifted, "gauge", "converge_drifted_objects", "Objects a Sync's last reconcile of its applied revision found drifted and left so (driftPolicy Report); 0 when none.", nil, nil},
	{famPruneRefusals, "counter", "converge_prune_refusals_total", "Applies whose prune was refused (empty render or over the prune budget).", nil, nil},
	{famApplyConflicts, "counter", "converge_apply_conflicts_total", "Objects whose apply or prune got a 409 conflict.", nil, nil},
	{famStatusConflicts, "counter", "converge_status_write_conflicts_total", "409 conflicts on Sync status writes; each is re-read and retried within the writer's bound.", nil, nil},
	{famStatusFailures, "counter", "converge_status_write_failures_total", "Sync status writes that failed after their retries.", nil, nil},
	{famNotifications, "counter", "converge_notifications_total", "Notifications of a Sync's transitions by provider type and result: delivered, failed (after its retries) or dropped (a full queue).", []string{"provider", "result"}, nil},
}

// TestSyncSeriesAsClientGolang: the per-Sync series, kept as plain numbers and turned into
// samples when scraped, expose what client_golang's own vectors exposed for the same
// updates, family by family: names, help, types, labels, every bucket's cumulative count
// (a value on a bound counts in that bucket; one above the last bound, or NaN, in none),
// the sum and the count, counters added to and gauges set, and a created timestamp on
// counters and histograms.
func TestSyncSeriesAsClientGolang(t *testing.T) {
	if len(clientGolangFamilies) != int(numFamilies) {
		t.Fatalf("%d reference families for %d families", len(clientGolangFamilies), numFamilies)
	}
	keys := []types.NamespacedName{{Namespace: "apps", Name: "web"}, {Namespace: "apps", Name: "db"}}
	observations := []float64{-1, 0, 0.05, 0.07, 0.1, 1, 3, 99, 102.4, 250, 16384, 65536, 1e6, math.Inf(1), math.NaN()}
	values := [][2]string{{"success", "x"}, {"BuildFailed", "y"}, {"success", "x"}, {"", ""}}

	ours := newSyncSeries()
	before := time.Now()
	var theirs []prometheus.Collector
	for _, ref := range clientGolangFamilies {
		labels := append(append([]string{}, syncLabels...), ref.extra...)
		lv := func(key types.NamespacedName, v [2]string) []string {
			return append([]string{key.Namespace, key.Name}, v[:len(ref.extra)]...)
		}
		switch ref.kind {
		case "histogram":
			vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ref.name, Help: ref.help, Buckets: ref.buckets}, labels)
			theirs = append(theirs, vec)
			for i, x := range observations {
				key := keys[i%2]
				ours.observe(key, ref.fam, x)
				vec.WithLabelValues(lv(key, values[0])...).Observe(x)
			}
		case "counter":
			vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: ref.name, Help: ref.help}, labels)
			theirs = append(theirs, vec)
			for i, v := range values {
				key := keys[i%2]
				ours.add(key, ref.fam, float64(i), v[:len(ref.extra)]...)
				vec.WithLabelValues(lv(key, v)...).Add(float64(i))
			}
		default:
			vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: ref.name, Help: ref.help}, labels)
			theirs = append(theirs, vec)
			for i, v := range values {
				key := keys[i%2]
				ours.set(key, ref.fam, float64(10-i), v[:len(ref.extra)]...)
				vec.WithLabelValues(lv(key, v)...).Set(float64(10 - i))
			}
		}
	}

	gather := func(cs ...prometheus.Collector) []*dto.MetricFamily {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				t.Fatal(err)
			}
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		return mfs
	}
	got, want := gather(ours), gather(theirs...)
	if len(got) != int(numFamilies) {
		t.Errorf("%d families exposed, want %d", len(got), numFamilies)
	}
	// The creation times differ by when each was made; that each has one is checked below.
	created := cmp.Options{protocmp.IgnoreFields(&dto.Counter{}, "created_timestamp"), protocmp.IgnoreFields(&dto.Histogram{}, "created_timestamp")}
	if diff := cmp.Diff(want, got, protocmp.Transform(), created, cmpopts.EquateNaNs()); diff != "" {
		t.Errorf("per-Sync series differ from client_golang's (-client_golang +ours):\n%s", diff)
	}
	after := time.Now()
	for _, mf := range got {
		for _, m := range mf.GetMetric() {
			ts := m.GetCounter().GetCreatedTimestamp()
			if m.Histogram != nil {
				ts = m.GetHistogram().GetCreatedTimestamp()
			}
			if m.Gauge != nil {
				continue
			}
			if at := ts.AsTime(); ts == nil || at.Before(before.Truncate(time.Microsecond)) || at.After(after) {
				t.Errorf("%s %v: created at %v, not when it was first updated (between %v and %v)", mf.GetName(), m.GetLabel(), at, before, after)
			}
		}
	}

	for _, key := range keys {
		ours.forget(key)
	}
	if mfs := gather(ours); len(mfs) != 0 {
		t.Errorf("series left after forget: %v", mfs)
	}
}

// TestSyncSeriesMisuse: an update that does not fit its family panics where it is made, as
// client_golang's vectors did, instead of making a series that would fail every scrape.
func TestSyncSeriesMisuse(t *testing.T) {
	s := newSyncSeries()
	key := types.NamespacedName{Namespace: "apps", Name: "web"}
	for name, f := range map[string]func(){
		"label missing":    func() { s.add(key, famObjectActions, 1) },
		"label too many":   func() { s.add(key, famQuietReconciles, 1, "x") },
		"counter negative": func() { s.add(key, famQuietReconciles, -1) },
		"counter set":      func() { s.set(key, famQuietReconciles, 1) },
		"gauge added":      func() { s.add(key, famSuspended, 1) },
		"gauge observed":   func() { s.observe(key, famSuspended, 1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestSyncSeriesConcurrentScrape: reconciles update and forget the series of their Syncs
// while /metrics is scraped; under -race (as make test runs it) an update or a copy made
// without its lock fails the test.
func TestSyncSeriesConcurrentScrape(t *testing.T) {
	s := newSyncSeries()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			key := types.NamespacedName{Namespace: "apps", Name: string(rune('a' + w))}
			for i := range 500 {
				s.observe(key, famReconcileDuration, float64(i)/100)
				s.add(key, famObjectActions, 1, "configured")
				s.set(key, famCondition, 1, "Ready", "True")
				if i%100 == 99 {
					s.forget(key)
				}
			}
		})
	}
	for range 20 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestSyncSeriesInvalidLabelValueKeepsTheScrape: a label value that is not valid UTF-8 (a
// kind as an object named it) is exposed with its invalid bytes replaced; kept as it was,
// it would fail every scrape of /metrics.
func TestSyncSeriesInvalidLabelValueKeepsTheScrape(t *testing.T) {
	s := newSyncSeries()
	reg := prometheus.NewRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	s.add(types.NamespacedName{Namespace: "apps", Name: "web"}, famDrift, 1, "Config\xffMap")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("scrape failed: %v", err)
	}
	if got := mfs[0].GetMetric()[0].GetLabel()[0].GetValue(); got != "Config\uFFFDMap" {
		t.Errorf("kind label = %q, want the invalid byte replaced", got)
	}
}
