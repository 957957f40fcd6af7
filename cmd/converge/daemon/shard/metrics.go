package shard

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the metrics of sharding (--sharding=auto), on a registry of their own that
// is served only then. Each replica reports its own; scraping adds the pod label.
type Metrics struct {
	shards    prometheus.Gauge
	held      prometheus.Gauge
	owned     prometheus.GaugeFunc
	handovers *prometheus.CounterVec
	// countOwned, set by the Coordinator, counts the Syncs of the shards held when owned is
	// collected: counting them at every step copied every cached Sync every retry period.
	countOwned atomic.Pointer[func() int]
}

// NewMetrics registers the metrics of sharding on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "converge_shards",
			Help: "Shards the Syncs are split into (--shards), with --sharding=auto."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "converge_shards_held",
			Help: "Shards whose Lease this replica holds (those being released included)."}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "converge_shard_handovers_total",
			Help: "Shards this replica acquired, released (its share shrank, or it stopped) or lost (its Lease taken or not renewed within the renew deadline)."},
			[]string{"event"}),
	}
	m.owned = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "converge_syncs_owned",
		Help: "Syncs of the shards this replica holds, as its cache knows them."}, m.ownedNow)
	for _, e := range []string{"acquired", "released", "lost"} {
		m.handovers.WithLabelValues(e)
	}
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Collectors are the metrics of sharding, for a registry.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.shards, m.held, m.owned, m.handovers}
}

// ownedNow is the value of converge_syncs_owned: 0 until a Coordinator counts.
func (m *Metrics) ownedNow() float64 {
	if count := m.countOwned.Load(); count != nil {
		return float64((*count)())
	}
	return 0
}
