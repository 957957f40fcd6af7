package shard

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the metrics of sharding (--sharding=auto), on a registry of their own that
// is served only then. Each replica reports its own; scraping adds the pod label.
type Metrics struct {
	shards    prometheus.Gauge
	held      prometheus.Gauge
	owned     prometheus.Gauge
	handovers *prometheus.CounterVec
}

// NewMetrics registers the metrics of sharding on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		shards: prometheus.NewGauge(prometheus.GaugeOpts{Name: "converge_shards",
			Help: "Shards the Syncs are split into (--shards), with --sharding=auto."}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "converge_shards_held",
			Help: "Shards whose Lease this replica holds (those being released included)."}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "converge_syncs_owned",
			Help: "Syncs of the shards this replica holds, as its cache knows them."}),
		handovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "converge_shard_handovers_total",
			Help: "Shards this replica acquired, released (its share shrank, or it stopped) or lost (its Lease taken or not renewed within the renew deadline)."},
			[]string{"event"}),
	}
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
