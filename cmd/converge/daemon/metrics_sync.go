package daemon

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"
)

// family is one of the daemon's per-Sync metrics (familySpecs).
type family uint8

const (
	famReconcileDuration family = iota
	famReconciles
	famLoadDuration
	famObjectActions
	famQuietReconciles
	famLeadTime
	famCommitLeadTime
	famCondition
	famSuspended
	famInterval
	famLastApplied
	famInventory
	famRolledBack
	famDrift
	famDrifted
	famPruneRefusals
	famApplyConflicts
	famStatusConflicts
	famStatusFailures
	famNotifications
	numFamilies
)

// familySpec says what a per-Sync metric is: its kind, its labels beyond the Sync's
// namespace and name, and a histogram's buckets.
type familySpec struct {
	name, help string
	kind       prometheus.ValueType // CounterValue, GaugeValue, or UntypedValue for a histogram
	extra      []string
	buckets    []float64
}

// histogram marks a familySpec as a histogram.
const histogram = prometheus.UntypedValue

var (
	durationBuckets = prometheus.ExponentialBuckets(0.05, 2, 12) // 50ms … ~100s

	familySpecs = [numFamilies]familySpec{
		famReconcileDuration: {name: "converge_reconcile_duration_seconds", kind: histogram, buckets: durationBuckets,
			help: "Duration of a reconcile of a Sync, fetch to status write."},
		famReconciles: {name: "converge_reconciles_total", kind: prometheus.CounterValue, extra: []string{"result"},
			help: "Reconciles of a Sync by result: success, or the Ready condition reason of a failure."},
		famLoadDuration: {name: "converge_source_load_duration_seconds", kind: histogram, buckets: durationBuckets,
			help: "Duration of fetching and rendering the source of a Sync."},
		famObjectActions: {name: "converge_object_actions_total", kind: prometheus.CounterValue, extra: []string{"action"},
			help: "Objects handled by the apply of a Sync, by action: created, configured, unchanged, pruned, skipped, failed."},
		famQuietReconciles: {name: "converge_quiet_reconciles_total", kind: prometheus.CounterValue,
			help: "Reconciles of a Sync answered without decoding or applying its render: the render, the spec and every object unchanged since a reconcile that changed nothing."},
		famLeadTime: {name: "converge_revision_lead_time_seconds", kind: histogram,
			buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1s … ~2h
			help:    "Seconds from the daemon first seeing a revision of a Sync to the Sync being Ready at it."},
		famCommitLeadTime: {name: "converge_commit_lead_time_seconds", kind: histogram,
			buckets: prometheus.ExponentialBuckets(1, 2, 16), // 1s … ~9h
			help:    "Seconds from the commit time of a revision to the Sync being Ready at it (git sources)."},
		famCondition: {name: "converge_sync_condition", kind: prometheus.GaugeValue, extra: []string{"condition", "status"},
			help: "A condition of a Sync as of its last reconcile: 1 for the current status (True, False or Unknown), 0 for the others."},
		famSuspended: {name: "converge_sync_suspended", kind: prometheus.GaugeValue,
			help: "1 when the Sync is suspended, else 0."},
		famInterval: {name: "converge_sync_interval_seconds", kind: prometheus.GaugeValue,
			help: "The resync interval of a Sync (spec.interval)."},
		famLastApplied: {name: "converge_sync_last_applied_timestamp_seconds", kind: prometheus.GaugeValue,
			help: "Unix time of the last successful apply of a Sync by this daemon."},
		famInventory: {name: "converge_inventory_entries", kind: prometheus.GaugeValue,
			help: "Objects in the inventory of a Sync after its last successful apply."},
		famRolledBack: {name: "converge_sync_rolled_back", kind: prometheus.GaugeValue,
			help: "1 while the Sync applies an earlier revision than its source's (status.rolledBack), else 0."},
		famDrift: {name: "converge_drift_corrections_total", kind: prometheus.CounterValue, extra: []string{"kind"},
			help: "Objects configured again at an unchanged revision (out-of-band drift taken back), by kind."},
		famDrifted: {name: "converge_drifted_objects", kind: prometheus.GaugeValue,
			help: "Objects a Sync's last reconcile of its applied revision found drifted and left so (driftPolicy Report); 0 when none."},
		famPruneRefusals: {name: "converge_prune_refusals_total", kind: prometheus.CounterValue,
			help: "Applies whose prune was refused (empty render or over the prune budget)."},
		famApplyConflicts: {name: "converge_apply_conflicts_total", kind: prometheus.CounterValue,
			help: "Objects whose apply or prune got a 409 conflict."},
		famStatusConflicts: {name: "converge_status_write_conflicts_total", kind: prometheus.CounterValue,
			help: "409 conflicts on Sync status writes; each is re-read and retried within the writer's bound."},
		famStatusFailures: {name: "converge_status_write_failures_total", kind: prometheus.CounterValue,
			help: "Sync status writes that failed after their retries."},
		famNotifications: {name: "converge_notifications_total", kind: prometheus.CounterValue, extra: []string{"provider", "result"},
			help: "Notifications of a Sync's transitions by provider type and result: delivered, failed (after its retries) or dropped (a full queue)."},
	}
)

// syncSeries holds every per-Sync series of the daemon as plain numbers, and turns them into
// samples only when /metrics is scraped. A Sync's series are its values and bucket counts:
// about 3 KB for its 25 series after a reconcile, where a client_golang vector's child
// per series (its label pairs, a histogram's hot and cold counts) took about 17 KB.
//
// Each Sync's values have their own lock; the map's lock is taken for writing only to add
// or drop a Sync. A scrape copies each Sync's numbers under that Sync's lock, and makes
// the samples after it let go: it holds up no update for longer than one Sync's copy.
type syncSeries struct {
	descs [numFamilies]*prometheus.Desc
	now   func() time.Time // the created timestamps of counters and histograms

	mu    sync.RWMutex
	syncs map[types.NamespacedName]*syncValues
}

// syncValues are one Sync's series: a value per counter or gauge series (with the labels it
// has beyond the Sync's), and a histogram per histogram family observed.
type syncValues struct {
	mu     sync.Mutex
	points []point
	hists  []histogramValues
}

type point struct {
	fam     family
	a, b    string // the values of the family's extra labels, in order
	v       float64
	created int64 // Unix nanoseconds; counters only
}

type histogramValues struct {
	fam     family
	counts  []uint64 // per bucket, not cumulative; observations above the last bucket count in total only
	total   uint64
	sum     float64
	created int64 // Unix nanoseconds
}

func newSyncSeries() *syncSeries {
	s := &syncSeries{syncs: map[types.NamespacedName]*syncValues{}, now: time.Now}
	for f, spec := range familySpecs {
		s.descs[f] = prometheus.NewDesc(spec.name, spec.help, append(slices.Clone(syncLabels), spec.extra...), nil)
	}
	return s
}

// lock returns key's values, created if need be, with their lock held.
func (s *syncSeries) lock(key types.NamespacedName) *syncValues {
	s.mu.RLock()
	v := s.syncs[key]
	s.mu.RUnlock()
	if v == nil {
		s.mu.Lock()
		if v = s.syncs[key]; v == nil {
			v = &syncValues{}
			s.syncs[key] = v
		}
		s.mu.Unlock()
	}
	v.mu.Lock()
	return v
}

// point returns the series of fam with extra labels a and b, creating it at 0 (at now).
// Called with v.mu held.
func (v *syncValues) point(fam family, a, b string, now func() time.Time) *point {
	for i := range v.points {
		if p := &v.points[i]; p.fam == fam && p.a == a && p.b == b {
			return p
		}
	}
	p := point{fam: fam, a: a, b: b}
	if familySpecs[fam].kind == prometheus.CounterValue {
		p.created = now().UnixNano()
	}
	v.points = append(v.points, p)
	return &v.points[len(v.points)-1]
}

// add adds d ≥ 0 to a counter series of key (creating it; d may be 0). extra are the
// values of the family's labels beyond the Sync's. A call that does not fit the family
// panics, as client_golang's vectors did: a series without its labels would fail every
// scrape.
func (s *syncSeries) add(key types.NamespacedName, fam family, d float64, extra ...string) {
	if d < 0 || math.IsNaN(d) {
		panic(fmt.Sprintf("%s: a counter cannot add %v", familySpecs[fam].name, d))
	}
	v, p := s.series(key, fam, prometheus.CounterValue, extra)
	p.v += d
	v.mu.Unlock()
}

// set sets a gauge series of key.
func (s *syncSeries) set(key types.NamespacedName, fam family, val float64, extra ...string) {
	v, p := s.series(key, fam, prometheus.GaugeValue, extra)
	p.v = val
	v.mu.Unlock()
}

// series returns the series of fam (of kind, with extra labels) of key, created if need
// be, with key's values locked.
func (s *syncSeries) series(key types.NamespacedName, fam family, kind prometheus.ValueType, extra []string) (*syncValues, *point) {
	check(fam, kind, extra)
	a, b := extraLabels(extra)
	v := s.lock(key)
	return v, v.point(fam, a, b, s.now)
}

// observe counts x in the histogram fam of key: in the first bucket whose upper bound is
// at least x, in none when x is above the last bound or NaN (as client_golang does).
func (s *syncSeries) observe(key types.NamespacedName, fam family, x float64) {
	check(fam, histogram, nil)
	buckets := familySpecs[fam].buckets
	v := s.lock(key)
	defer v.mu.Unlock()
	var h *histogramValues
	for i := range v.hists {
		if v.hists[i].fam == fam {
			h = &v.hists[i]
		}
	}
	if h == nil {
		v.hists = append(v.hists, histogramValues{fam: fam, counts: make([]uint64, len(buckets)), created: s.now().UnixNano()})
		h = &v.hists[len(v.hists)-1]
	}
	if i := sort.SearchFloat64s(buckets, x); i < len(buckets) {
		h.counts[i]++
	}
	h.total++
	h.sum += x
}

// check panics on a call that does not fit family fam: another kind of metric, or another
// number of extra labels.
func check(fam family, kind prometheus.ValueType, extra []string) {
	if spec := familySpecs[fam]; spec.kind != kind || len(extra) != len(spec.extra) {
		panic(fmt.Sprintf("%s: called as a %v with labels %q; it is a %v with labels %q", spec.name, kind, extra, spec.kind, spec.extra))
	}
}

// forget drops every series of key.
func (s *syncSeries) forget(key types.NamespacedName) {
	s.mu.Lock()
	delete(s.syncs, key)
	s.mu.Unlock()
}

// extraLabels returns the values of a family's extra labels, made valid UTF-8: one invalid
// value would fail every scrape, as client_golang's vectors would have panicked on it.
func extraLabels(extra []string) (a, b string) {
	switch len(extra) {
	case 0:
	case 1:
		a = extra[0]
	default:
		a, b = extra[0], extra[1]
	}
	return strings.ToValidUTF8(a, "\uFFFD"), strings.ToValidUTF8(b, "\uFFFD")
}

// Describe implements prometheus.Collector.
func (s *syncSeries) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range s.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: every series of every Sync, as of now. The
// samples share what they can (a Sync's namespace and name pairs, each extra label pair,
// the buckets' bounds), which the registry only reads: a scrape allocates little more than
// the samples themselves.
func (s *syncSeries) Collect(ch chan<- prometheus.Metric) {
	pairs := labelPairs{}
	for _, c := range s.copies() {
		sync := [2]*dto.LabelPair{pairs.get("namespace", c.key.Namespace), pairs.get("name", c.key.Name)}
		for _, p := range c.points {
			ch <- &scraped{desc: s.descs[p.fam], kind: familySpecs[p.fam].kind, v: p.v, created: p.created,
				labels: pairs.of(p.fam, sync, p.a, p.b)}
		}
		for i := range c.hists {
			h := &c.hists[i]
			ch <- &scraped{desc: s.descs[h.fam], kind: histogram, h: h.sample(), labels: pairs.of(h.fam, sync, "", "")}
		}
	}
}

// copied is one Sync's series as a scrape copied them.
type copied struct {
	key    types.NamespacedName
	points []point
	hists  []histogramValues
}

// copies copies every Sync's series, each under its own lock, after the map's lock is let
// go: a Sync added or forgotten meanwhile waits for no copy.
func (s *syncSeries) copies() []copied {
	type held struct {
		key types.NamespacedName
		v   *syncValues
	}
	s.mu.RLock()
	all := make([]held, 0, len(s.syncs))
	for key, v := range s.syncs {
		all = append(all, held{key, v})
	}
	s.mu.RUnlock()
	out := make([]copied, 0, len(all))
	for _, h := range all {
		h.v.mu.Lock()
		c := copied{key: h.key, points: slices.Clone(h.v.points), hists: slices.Clone(h.v.hists)}
		for i := range c.hists {
			c.hists[i].counts = slices.Clone(c.hists[i].counts)
		}
		h.v.mu.Unlock()
		out = append(out, c)
	}
	return out
}

// scraped is one series as scraped: prometheus.Metric over values copied at Collect.
type scraped struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair // sorted by name
	kind    prometheus.ValueType
	v       float64
	h       *dto.Histogram
	created int64 // Unix nanoseconds, of a counter
}

func (m *scraped) Desc() *prometheus.Desc { return m.desc }

func (m *scraped) Write(out *dto.Metric) error {
	out.Label = m.labels
	switch m.kind {
	case prometheus.CounterValue:
		out.Counter = &dto.Counter{Value: &m.v, CreatedTimestamp: timestamppb.New(time.Unix(0, m.created))}
	case prometheus.GaugeValue:
		out.Gauge = &dto.Gauge{Value: &m.v}
	default:
		out.Histogram = m.h
	}
	return nil
}

// sample copies h into a histogram sample with cumulative bucket counts.
func (h *histogramValues) sample() *dto.Histogram {
	bounds := bucketBounds[h.fam]
	counts := make([]uint64, len(bounds)+1)
	buckets := make([]dto.Bucket, len(bounds))
	out := &dto.Histogram{Bucket: make([]*dto.Bucket, len(bounds))}
	var n uint64
	for i := range bounds {
		n += h.counts[i]
		counts[i] = n
		buckets[i] = dto.Bucket{CumulativeCount: &counts[i], UpperBound: bounds[i]}
		out.Bucket[i] = &buckets[i]
	}
	counts[len(bounds)] = h.total
	out.SampleCount = &counts[len(bounds)]
	sum := h.sum
	out.SampleSum = &sum
	out.CreatedTimestamp = timestamppb.New(time.Unix(0, h.created))
	return out
}

// bucketBounds are the upper bounds of each histogram family, as the samples point to them.
var bucketBounds = func() (out [numFamilies][]*float64) {
	for f, spec := range familySpecs {
		for i := range spec.buckets {
			out[f] = append(out[f], &spec.buckets[i])
		}
	}
	return out
}()

// labelOrder lists, per family, the positions of its labels (namespace, name, then its
// extra labels) in the order of their names, as a sample's labels must be.
var labelOrder = func() (out [numFamilies][]int) {
	for f, spec := range familySpecs {
		names := append(slices.Clone(syncLabels), spec.extra...)
		order := make([]int, len(names))
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return strings.Compare(names[a], names[b]) })
		out[f] = order
	}
	return out
}()

// labelPairs makes each label pair of one scrape once.
type labelPairs map[[2]string]*dto.LabelPair

func (l labelPairs) get(name, value string) *dto.LabelPair {
	k := [2]string{name, value}
	p := l[k]
	if p == nil {
		p = &dto.LabelPair{Name: &name, Value: &value}
		l[k] = p
	}
	return p
}

// of returns the labels of a series of fam: the Sync's pairs and the extra values a and b.
func (l labelPairs) of(fam family, sync [2]*dto.LabelPair, a, b string) []*dto.LabelPair {
	extra := familySpecs[fam].extra
	all := [4]*dto.LabelPair{sync[0], sync[1]}
	for i, v := range []string{a, b}[:len(extra)] {
		all[2+i] = l.get(extra[i], v)
	}
	out := make([]*dto.LabelPair, len(labelOrder[fam]))
	for i, at := range labelOrder[fam] {
		out[i] = all[at]
	}
	return out
}
