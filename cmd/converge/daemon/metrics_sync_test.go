package daemon

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/testing/protocmp"
	"k8s.io/apimachinery/pkg/types"
)

// TestSyncSeriesAsClientGolang: the per-Sync series, kept as plain numbers and turned into
// samples when scraped, expose what client_golang's own vectors expose for the same
// observations: every bucket's cumulative count (a value on a bound counts in that bucket,
// one above the last bound in none), the sum and the count, counters added to, gauges set,
// and the labels of each series.
func TestSyncSeriesAsClientGolang(t *testing.T) {
	key := types.NamespacedName{Namespace: "apps", Name: "web"}
	observations := []float64{0, 0.05, 0.07, 0.1, 3, 99, 102.4, 250, math.Inf(1)}

	ours := newSyncSeries()
	theirs := map[family]prometheus.Collector{}
	for _, f := range []family{famReconcileDuration, famCommitLeadTime, famReconciles, famNotifications, famCondition} {
		spec := familySpecs[f]
		labels := append(append([]string{}, syncLabels...), spec.extra...)
		switch spec.kind {
		case histogram:
			theirs[f] = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: spec.name, Help: spec.help, Buckets: spec.buckets}, labels)
		case prometheus.CounterValue:
			theirs[f] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: spec.name, Help: spec.help}, labels)
		default:
			theirs[f] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: spec.name, Help: spec.help}, labels)
		}
	}
	for _, x := range observations {
		for _, f := range []family{famReconcileDuration, famCommitLeadTime} {
			ours.observe(key, f, x)
			theirs[f].(*prometheus.HistogramVec).WithLabelValues(key.Namespace, key.Name).Observe(x)
		}
	}
	for _, result := range []string{"success", "BuildFailed", "success"} {
		ours.add(key, famReconciles, 1, result)
		theirs[famReconciles].(*prometheus.CounterVec).WithLabelValues(key.Namespace, key.Name, result).Inc()
	}
	ours.add(key, famNotifications, 0, "slack", "failed")
	ours.add(key, famNotifications, 2, "generic", "delivered")
	theirs[famNotifications].(*prometheus.CounterVec).WithLabelValues(key.Namespace, key.Name, "slack", "failed")
	theirs[famNotifications].(*prometheus.CounterVec).WithLabelValues(key.Namespace, key.Name, "generic", "delivered").Add(2)
	for _, v := range []float64{1, 0} {
		ours.set(key, famCondition, v, "Ready", "True")
		theirs[famCondition].(*prometheus.GaugeVec).WithLabelValues(key.Namespace, key.Name, "Ready", "True").Set(v)
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
	var want []prometheus.Collector
	for _, c := range theirs {
		want = append(want, c)
	}
	// client_golang stamps its own counters and histograms with their creation time; a
	// scrape of const samples carries none.
	noCreated := protocmp.IgnoreFields(&dto.Counter{}, "created_timestamp")
	noCreatedH := protocmp.IgnoreFields(&dto.Histogram{}, "created_timestamp")
	if diff := cmp.Diff(gather(want...), gather(ours), protocmp.Transform(), noCreated, noCreatedH); diff != "" {
		t.Errorf("per-Sync series differ from client_golang's (-client_golang +ours):\n%s", diff)
	}

	ours.forget(key)
	if mfs := gather(ours); len(mfs) != 0 {
		t.Errorf("series left after forget: %v", mfs)
	}
}

// TestSyncSeriesConcurrentScrape: reconciles update, forget and scrape the series at once
// (run with -race); a scrape sees whole series only.
func TestSyncSeriesConcurrentScrape(t *testing.T) {
	s := newSyncSeries()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	for w := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			key := types.NamespacedName{Namespace: "apps", Name: string(rune('a' + w))}
			for i := range 500 {
				s.observe(key, famReconcileDuration, float64(i)/100)
				s.add(key, famObjectActions, 1, "configured")
				s.set(key, famCondition, 1, "Ready", "True")
				if i%100 == 99 {
					s.forget(key)
				}
			}
		}()
	}
	for range 20 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil && h.GetSampleCount() < h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount() {
					t.Errorf("%s: %d samples, fewer than its last bucket's %d", mf.GetName(), h.GetSampleCount(), h.GetBucket()[len(h.GetBucket())-1].GetCumulativeCount())
				}
			}
		}
	}
	for range 4 {
		<-done
	}
}
