package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/cmd/converge/daemon/shard"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

const monitoringDir = "../../../deploy/monitoring"

// testSync is a Sync as the reconciler reads it, last applied at revision "main@sha1:1".
func testSync() *v1alpha1.Sync {
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}}
	s.Spec.Interval = metav1.Duration{Duration: time.Minute}
	s.Status.LastAppliedRevision = "main@sha1:1"
	return s
}

func cmChange(name string, action engine.Action, err error) engine.Change {
	return engine.Change{
		ID:     "apps_" + name + "__ConfigMap",
		Object: object.ObjMetadata{Namespace: "apps", Name: name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}},
		Action: action, Err: err,
	}
}

// observeAll makes at least one observation of every metric of rec.
func observeAll(t *testing.T, rec *recorder) {
	t.Helper()
	s := testSync()
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "c", errors.New("changed"))
	rec.sourceLoaded(s, time.Second)
	lead := &leadClock{loaded: commitTime{"main@sha1:2", time.Now().Add(-time.Minute)}}
	rec.applied(s, "main@sha1:1", &engine.Result{
		Changes: []engine.Change{cmChange("a", engine.ActionConfigured, nil), cmChange("c", engine.ActionFailed, conflict)},
		Pruned:  []engine.Change{cmChange("b", engine.ActionPruned, nil)},
	}, fmt.Errorf("prune: %w", engine.ErrPruneRefused), false)
	rec.applied(s, "main@sha1:1", &engine.Result{}, nil, true) // answered without the render
	rec.reconciled(s, status.Outcome{Ready: metav1.ConditionTrue, AttemptedRevision: "main@sha1:2", AppliedRevision: "main@sha1:2",
		Inventory: &v1alpha1.InventoryStatus{Entries: 3}, DriftKnown: true,
		Drift: &v1alpha1.DriftStatus{Objects: []v1alpha1.DriftedObject{{Kind: "ConfigMap", Name: "a"}}, MoreObjects: 1}},
		time.Now().Add(-time.Second), errors.New("status write failed"), lead)
	rec.suspend(s)
	rec.deferred(s.Namespace)
	rec.notified(s.Namespace, s.Name, "generic", "delivered")
	_ = conflictCounting{Client: conflictClient{}, rec: rec}.Status().Patch(context.Background(), s, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	resp, err := (&http.Client{Transport: rec.instrument(http.DefaultTransport)}).Get(srv.URL + "/api/v1/namespaces?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}

// conflictClient's status writer answers every patch with a 409.
type conflictClient struct{ client.Client }

func (conflictClient) Status() client.SubResourceWriter { return conflictWriter{} }

// conflictWriter answers every status patch with a 409.
type conflictWriter struct{ client.SubResourceWriter }

func (conflictWriter) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return apierrors.NewConflict(schema.GroupResource{Group: "converge.dev", Resource: "syncs"}, "web", errors.New("changed"))
}

// series returns the value of each series of family name as "label=value,…" → value; a
// histogram's value is its sample count.
func series(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = metricValue(m)
		}
	}
	return out
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestRecorder(t *testing.T) {
	reg, rec, err := newMetricsRegistry()
	if err != nil {
		t.Fatal(err)
	}
	observeAll(t, rec)
	const key = "name=web,namespace=apps"
	for _, tc := range []struct {
		metric string
		want   map[string]float64
	}{
		{"converge_object_actions_total", map[string]float64{
			"action=configured," + key: 1, "action=failed," + key: 1, "action=pruned," + key: 1}},
		// Configured at the revision last applied: drift. The failed one is not.
		{"converge_drift_corrections_total", map[string]float64{"kind=ConfigMap," + key: 1}},
		{"converge_apply_conflicts_total", map[string]float64{key: 1}},
		{"converge_prune_refusals_total", map[string]float64{key: 1}},
		{"converge_reconciles_total", map[string]float64{key + ",result=success": 1}},
		{"converge_sync_condition", map[string]float64{
			"condition=Ready," + key + ",status=True": 1, "condition=Ready," + key + ",status=False": 0, "condition=Ready," + key + ",status=Unknown": 0,
			"condition=Stalled," + key + ",status=True": 0, "condition=Stalled," + key + ",status=False": 1, "condition=Stalled," + key + ",status=Unknown": 0}},
		{"converge_sync_suspended", map[string]float64{key: 1}},
		{"converge_sync_interval_seconds", map[string]float64{key: 60}},
		{"converge_inventory_entries", map[string]float64{key: 3}},
		{"converge_sync_rolled_back", map[string]float64{key: 0}},
		{"converge_drifted_objects", map[string]float64{key: 2}}, // one listed, one more counted
		{"converge_revision_lead_time_seconds", map[string]float64{key: 1}},
		{"converge_commit_lead_time_seconds", map[string]float64{key: 1}},
		{"converge_status_write_conflicts_total", map[string]float64{key: 1}},
		{"converge_status_write_failures_total", map[string]float64{key: 1}},
		{"converge_api_requests_total", map[string]float64{"code=200,verb=watch": 1}},
		{"converge_reconciles_deferred_total", map[string]float64{"namespace=apps": 1}},
		{"converge_notifications_total", map[string]float64{key + ",provider=generic,result=delivered": 1}},
	} {
		if diff := cmp.Diff(tc.want, series(t, reg, tc.metric)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.metric, diff)
		}
	}

	// A failure at a new revision, then the same revision Ready twice: one more lead time.
	s := testSync()
	s.Status.LastAppliedRevision = "main@sha1:2"
	lead := &leadClock{}
	rec.reconciled(s, status.Outcome{Ready: metav1.ConditionFalse, Reason: reasonBuildFailed, Stalled: true, AttemptedRevision: "main@sha1:3"}, time.Now(), nil, lead)
	for range 2 {
		rec.reconciled(s, status.Outcome{Ready: metav1.ConditionTrue, AttemptedRevision: "main@sha1:3", AppliedRevision: "main@sha1:3"}, time.Now(), nil, lead)
	}
	if got := series(t, reg, "converge_revision_lead_time_seconds")[key]; got != 2 {
		t.Errorf("lead time observations = %v, want 2 (once per revision that became Ready)", got)
	}
	if got := series(t, reg, "converge_commit_lead_time_seconds")[key]; got != 1 {
		t.Errorf("commit lead time observations = %v, want 1 (main@sha1:3 has no known commit time)", got)
	}
	if got := series(t, reg, "converge_reconciles_total")[key+",result="+reasonBuildFailed]; got != 1 {
		t.Errorf("BuildFailed reconciles = %v, want 1", got)
	}
	// A rollback sets the gauge; a reconcile that does not learn it keeps the status' word.
	rec.reconciled(s, status.Outcome{Ready: metav1.ConditionTrue, RollbackKnown: true, RolledBack: &v1alpha1.RolledBack{}}, time.Now(), nil, lead)
	if got := series(t, reg, "converge_sync_rolled_back")[key]; got != 1 {
		t.Errorf("rolled back = %v after a reconcile that applied an earlier revision, want 1", got)
	}
	rec.reconciled(s, status.Outcome{Ready: metav1.ConditionTrue}, time.Now(), nil, lead)
	if got := series(t, reg, "converge_sync_rolled_back")[key]; got != 0 {
		t.Errorf("rolled back = %v after a reconcile of a Sync whose status is not rolled back, want 0", got)
	}
	// A new configured object at a new revision is not drift.
	rec.applied(s, "main@sha1:4", &engine.Result{Changes: []engine.Change{cmChange("a", engine.ActionConfigured, nil)}}, nil, false)
	if got := series(t, reg, "converge_drift_corrections_total")["kind=ConfigMap,"+key]; got != 1 {
		t.Errorf("drift = %v after a change at a new revision, want still 1", got)
	}
	// Every object of an apply counts, several of one action and kind too.
	rec.applied(s, "main@sha1:2", &engine.Result{Changes: []engine.Change{cmChange("a", engine.ActionConfigured, nil),
		cmChange("b", engine.ActionConfigured, nil), cmChange("c", engine.ActionUnchanged, nil)}}, nil, false)
	if got := series(t, reg, "converge_object_actions_total"); got["action=configured,"+key] != 4 || got["action=unchanged,"+key] != 1 {
		t.Errorf("object actions = %v, want 4 configured and 1 unchanged", got)
	}
	if got := series(t, reg, "converge_drift_corrections_total")["kind=ConfigMap,"+key]; got != 3 {
		t.Errorf("drift = %v after two objects configured at the applied revision, want 3", got)
	}

	rec.forget(types.NamespacedName{Namespace: "apps", Name: "web"})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "name" && l.GetValue() == "web" {
					t.Errorf("%s still has a series of the forgotten Sync", mf.GetName())
				}
			}
		}
	}
}

// monitoring are the dashboard and the alert rules, parsed.
type monitoring struct {
	dashboard dashboard
	rules     ruleFile
}

type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	Title   string           `json:"title"`
	Type    string           `json:"type"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// query is one PromQL expression of the dashboard or the rules and where it comes from.
type query struct{ source, expr string }

func loadMonitoring(t *testing.T) monitoring {
	t.Helper()
	var m monitoring
	raw, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &m.dashboard); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	raw, err = os.ReadFile(filepath.Join(monitoringDir, "rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &m.rules); err != nil {
		t.Fatalf("rules.yaml: %v", err)
	}
	return m
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_]+)\)$`)

// queries lists every panel target, template variable and alert expression.
func (m monitoring) queries() []query {
	var out []query
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				out = append(out, query{fmt.Sprintf("panel %q target %d", p.Title, i), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(m.dashboard.Panels)
	for _, v := range m.dashboard.Templating.List {
		if v.Type == "query" {
			out = append(out, query{"variable " + v.Name, labelValuesRE.ReplaceAllString(v.Definition, "$1")})
		}
	}
	for _, g := range m.rules.Groups {
		for _, r := range g.Rules {
			out = append(out, query{"alert " + r.Alert, r.Expr})
		}
	}
	return out
}

// metricNameRE finds metric names in PromQL: the daemon's own and the Go and process
// collectors'. Label names and functions never start with these prefixes.
var metricNameRE = regexp.MustCompile(`\b(?:converge|go|process)_[a-z0-9_]+`)

// TestMonitoringUsesExportedMetrics checks that every metric the dashboard and the alert rules
// name is one the daemon exports, and that every panel has a query.
func TestMonitoringUsesExportedMetrics(t *testing.T) {
	reg, rec, err := newMetricsRegistry()
	if err != nil {
		t.Fatal(err)
	}
	observeAll(t, rec)
	shardReg := prometheus.NewRegistry() // served beside reg with --sharding=auto
	sm, err := shard.NewMetrics(shardReg)
	if err != nil {
		t.Fatal(err)
	}
	mfs, err := prometheus.Gatherers{reg, shardReg}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				exported[mf.GetName()+suffix] = true
			}
		}
	}
	m := loadMonitoring(t)
	qs := m.queries()
	if len(qs) < 20 {
		t.Fatalf("found %d queries; the dashboard or rules did not parse as expected", len(qs))
	}
	used := map[string]bool{}
	for _, q := range qs {
		names := metricNameRE.FindAllString(q.expr, -1)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", q.source, q.expr)
		}
		for _, name := range names {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")] = true
			if !exported[name] {
				t.Errorf("%s uses %s, which the daemon does not export", q.source, name)
			}
		}
	}
	for _, c := range append(rec.collectors(), sm.Collectors()...) {
		ch := make(chan *prometheus.Desc)
		go func() {
			c.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			if name := metricNameRE.FindString(d.String()); !used[name] {
				t.Errorf("%s is exported but neither the dashboard nor an alert shows it", name)
			}
		}
	}
}

// TestMonitoringOverlay checks the PrometheusRule embeds rules.yaml's groups and that the
// overlay renders the ServiceMonitor, the PrometheusRule and the labelled dashboard ConfigMap.
func TestMonitoringOverlay(t *testing.T) {
	var plain, operator map[string]any
	for file, into := range map[string]*map[string]any{"rules.yaml": &plain, "alerts.yaml": &operator} {
		raw, err := os.ReadFile(filepath.Join(monitoringDir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(raw, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if diff := cmp.Diff(plain["groups"], operator["spec"].(map[string]any)["groups"]); diff != "" {
		t.Errorf("alerts.yaml spec.groups differ from rules.yaml groups (-rules +alerts):\n%s", diff)
	}

	objs, err := sources.Render(context.Background(), monitoringDir, ".", sources.DefaultRenderOptions())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	dashboardJSON, err := os.ReadFile(filepath.Join(monitoringDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
		if o.GetKind() != "ConfigMap" {
			continue
		}
		if o.GetLabels()["grafana_dashboard"] != "1" {
			t.Errorf("dashboard ConfigMap labels %v, want grafana_dashboard: \"1\"", o.GetLabels())
		}
		data, _ := o.Object["data"].(map[string]any)
		if data["converge.json"] != string(dashboardJSON) {
			t.Errorf("dashboard ConfigMap does not hold dashboard.json as converge.json")
		}
	}
	sort.Strings(kinds)
	want := []string{"ConfigMap/converge-dashboard", "PrometheusRule/converge", "ServiceMonitor/converge"}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}
}

// TestMetricsProvenByPrometheus runs a real Prometheus scraping the daemon while it syncs a
// good commit, drift, a broken commit, a refused prune, a recovery, drift reported and a
// rollback, and evaluates every dashboard query and alert expression against it.
func TestMetricsProvenByPrometheus(t *testing.T) {
	bin := prometheusBinary(t)
	f := newFixture(t)
	cmC := strings.ReplaceAll(cmB, "name: b", "name: c")
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB, "c.yaml": cmC})
	addr := cluster.FreeAddr()
	f.startDaemon(env.Config, func(o *Options) { o.MetricsAddr = addr })
	prom := startPrometheus(t, bin, addr)
	m := loadMonitoring(t)
	f.createSync(2 * time.Second)
	f.waitSync("Ready at the first commit", readyAt(rev1))

	sel := fmt.Sprintf(`namespace=%q,name="app"`, f.ns)
	prom.waitFor("up", `up{job="converge"} == 1`, nonEmpty)
	prom.waitRulesHealthy()
	prom.waitFor("Ready=1", `converge_sync_condition{`+sel+`,condition="Ready",status="True"} == 1`, nonEmpty)

	// Out-of-band drift is taken back at the same revision and counted by kind.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := f.configMap("a")
		if err != nil {
			return err
		}
		cm.Data["version"] = "edited"
		return f.c.Update(context.Background(), cm, client.FieldOwner("kubectl-edit"))
	})
	if err != nil {
		t.Fatal(err)
	}
	prom.waitFor("drift corrected", `converge_drift_corrections_total{`+sel+`,kind="ConfigMap"} >= 1`, nonEmpty)

	// A broken commit: the not-ready, failure and stale-apply alerts fire (their expressions).
	rev2 := f.publish(map[string]string{"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n"})
	f.waitSync("Ready=False on the broken commit", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAttemptedRevision == rev2 && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	for _, alert := range []string{"ConvergeSyncNotReady", "ConvergeReconcileFailures", "ConvergeNoSuccessfulApply"} {
		prom.waitFor(alert+" during the broken commit", m.alert(t, alert), hasSeries(f.ns, "app"))
	}
	prom.waitFor("Syncs not ready", m.panel(t, "Syncs not ready", f.ns), atLeast(1))
	prom.evaluateAll(t, m, f.ns)

	// The fix removes b and c, over a prune budget of 1: the prune is refused.
	setPruneBudget(t, f, 1) // observed before the next commit, which the daemon must not prune
	rev3 := f.publish(map[string]string{"bad.yaml": "", "b.yaml": "", "c.yaml": ""})
	f.waitSync("refusing the prune", func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.LastAttemptedRevision == rev3 && r != nil && r.Status == metav1.ConditionFalse && strings.Contains(r.Message, "prune refused")
	})
	prom.waitFor("ConvergePruneRefused", m.alert(t, "ConvergePruneRefused"), hasSeries(f.ns, "app"))

	// Lifting the budget recovers: Ready flips back to 1 and the not-ready alert clears.
	setPruneBudget(t, f, 0)
	f.waitSync("Ready after the fix", readyAt(rev3))
	prom.waitFor("Ready=1 after recovery", `converge_sync_condition{`+sel+`,condition="Ready",status="True"} == 1`, nonEmpty)
	prom.waitFor("ConvergeSyncNotReady cleared", m.alert(t, "ConvergeSyncNotReady"), isEmpty)
	prom.waitFor("Syncs ready", m.panel(t, "Syncs ready", f.ns), atLeast(1))
	prom.waitFor("a failure among the reconcile results", `converge_reconciles_total{`+sel+`,result="BuildFailed"} >= 1`, nonEmpty)
	prom.waitFor("lead time of two revisions", `converge_revision_lead_time_seconds_count{`+sel+`} >= 2`, nonEmpty)
	prom.waitFor("inventory of one object", `converge_inventory_entries{`+sel+`} == 1`, nonEmpty)
	prom.waitFor("reconciles answered without the render", `converge_quiet_reconciles_total{`+sel+`} >= 3`, nonEmpty)
	prom.waitFor("API requests by verb and code", `converge_api_requests_total{verb="patch",code="200"} > 0`, nonEmpty)
	// controller-runtime's and client-go's metrics are served beside Converge's own.
	for _, expr := range []string{`controller_runtime_reconcile_total{controller="sync",result="requeue_after"} > 0`,
		`controller_runtime_reconcile_time_seconds_count{controller="sync"} > 0`, `workqueue_adds_total{name="sync"} > 0`,
		`rest_client_requests_total{code="200"} > 0`} {
		prom.waitFor("library metric "+expr, expr, nonEmpty)
	}

	// Drift left as it is (driftPolicy Report), then a rollback, show on the History and
	// drift row with values, not only as series.
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	f.waitSync("the Report policy observed", func(s *v1alpha1.Sync) bool { return readyAt(rev3)(s) })
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := f.configMap("a")
		if err != nil {
			return err
		}
		cm.Data["version"] = "reported"
		return f.c.Update(context.Background(), cm, client.FieldOwner("kubectl-edit"))
	})
	if err != nil {
		t.Fatal(err)
	}
	prom.waitFor("Drifted objects", m.panel(t, "Drifted objects", f.ns), atLeast(1))
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Rollback = &v1alpha1.Rollback{Revision: rev1} })
	f.waitSync("rolled back to the first commit", func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return readyAt(rev1)(s) && r.Reason == reasonRolledBack
	})
	prom.waitFor("Rolled back", m.panel(t, "Rolled back", f.ns), atLeast(1))

	// Every query parses and, after the run, every panel but the not-ready list, API errors,
	// the Sharding row (this daemon runs with --sharding=off; see
	// TestShardingMetricsProvenByPrometheus), the deferrals for a namespace's share of the
	// workers (one namespace here, never over its share; counted in TestRecorder) and the
	// notifications (no Sync here has spec.notifications; counted in TestRecorder and
	// TestNotificationReceiverDown) shows data.
	got := prom.evaluateAll(t, m, f.ns)
	for _, q := range m.queries() {
		if strings.Contains(q.expr, "converge_reconciles_deferred_total") || strings.Contains(q.expr, "converge_notifications_total") {
			delete(got, q.source)
		}
	}
	sharding := m.rowPanels("Sharding")
	if len(sharding) == 0 {
		t.Errorf("dashboard.json has no Sharding row")
	}
	for source, n := range got {
		if n == 0 && !strings.Contains(source, `"Not ready Syncs"`) && !strings.Contains(source, `"API errors"`) && !strings.HasPrefix(source, "alert ") &&
			!slices.ContainsFunc(sharding, func(title string) bool { return strings.HasPrefix(source, fmt.Sprintf("panel %q", title)) }) {
			t.Errorf("%s returned no series after the run", source)
		}
	}
}

// setPruneBudget sets spec.pruneBudget and waits until the daemon has reconciled that
// generation.
func setPruneBudget(t *testing.T, f *fixture, budget int) {
	t.Helper()
	s := &v1alpha1.Sync{}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app"}, s); err != nil {
			return err
		}
		s.Spec.PruneBudget = budget
		return f.c.Update(context.Background(), s)
	})
	if err != nil {
		t.Fatal(err)
	}
	f.waitSync("observing the prune budget", func(got *v1alpha1.Sync) bool {
		return got.Generation >= s.Generation && got.Status.ObservedGeneration == got.Generation
	})
}

// alert returns the expression of the named alert.
func (m monitoring) alert(t *testing.T, name string) string {
	t.Helper()
	for _, g := range m.rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == name {
				return r.Expr
			}
		}
	}
	t.Fatalf("no alert %s in rules.yaml", name)
	return ""
}

// rowPanels lists the titles of the panels under the row titled row: those after it, up to
// the next row, in the dashboard's (flat, expanded) panel list.
func (m monitoring) rowPanels(row string) []string {
	var out []string
	in := false
	for _, p := range m.dashboard.Panels {
		if p.Type == "row" {
			in = p.Title == row
			continue
		}
		if in {
			out = append(out, p.Title)
		}
	}
	return out
}

// panel returns the first query of the named panel with the variables set for namespace.
func (m monitoring) panel(t *testing.T, title, namespace string) string {
	t.Helper()
	for _, q := range m.queries() {
		if strings.HasPrefix(q.source, fmt.Sprintf("panel %q", title)) {
			return substitute(q.expr, namespace)
		}
	}
	t.Fatalf("no panel %q in dashboard.json", title)
	return ""
}

// substitute sets the dashboard variables as Grafana would for one Sync "app" in namespace.
func substitute(expr, namespace string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$job", "converge", "$namespace", regexp.QuoteMeta(namespace), "$sync", "app").Replace(expr)
}

// TestPprofOnlyWhenAsked checks that Go's profiles are served on the metrics address with
// --pprof and not without.
func TestPprofOnlyWhenAsked(t *testing.T) {
	reg, _, err := newMetricsRegistry()
	if err != nil {
		t.Fatal(err)
	}
	for _, on := range []bool{false, true} {
		srv := httptest.NewServer(newMetricsServer("", reg, on).Handler)
		resp, err := http.Get(srv.URL + "/debug/pprof/heap")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.StatusCode == http.StatusOK; got != on {
			t.Errorf("--pprof=%t: GET /debug/pprof/heap: %s", on, resp.Status)
		}
		metrics, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics.Body.Close()
		if metrics.StatusCode != http.StatusOK {
			t.Errorf("--pprof=%t: GET /metrics: %s", on, metrics.Status)
		}
		srv.Close()
	}
}
