package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// driftedNaming is a waitSync condition: Drifted=True with a message holding every one of
// parts.
func driftedNaming(parts ...string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted)
		if c == nil || c.Status != "True" || c.Reason != v1alpha1.ReasonDriftDetected {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(c.Message, p) {
				return false
			}
		}
		return true
	}
}

// notDrifted is a waitSync condition: Ready at rev, no Drifted condition, no status.drift.
func notDrifted(rev string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		return readyAt(rev)(s) && s.Status.Drift == nil && meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted) == nil
	}
}

// editAs changes a live object with a plain update under manager, as `kubectl edit` does.
func (f *fixture) editAs(manager string, obj client.Object, mutate func()) {
	f.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate()
		return f.c.Update(context.Background(), obj, client.FieldOwner(manager))
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// reconcileAgain asks for a reconcile and waits until the daemon handled it at rev.
func (f *fixture) reconcileAgain(rev string) *v1alpha1.Sync {
	f.t.Helper()
	f.requestReconcile("app")
	return f.waitSync("the request handled", func(s *v1alpha1.Sync) bool {
		return s.Status.LastHandledRequest != "" && s.Status.LastHandledRequest == s.Annotations[v1alpha1.RequestedAtAnnotation] && readyAt(rev)(s)
	})
}

// TestDaemonDriftReport runs a Sync with driftPolicy Report: a field kubectl-edit changed is
// reported (status.drift, the Drifted condition, an event and converge_drifted_objects, each
// naming the field and kubectl-edit) and kept across reconciles, an object deleted out of
// band is reported missing and not recreated; a spec change (per-kind override: ConfigMaps
// Correct) applies everything and clears it, after which ConfigMap drift is corrected (event
// DriftCorrected naming field and manager) while ServiceAccount drift is reported in the same
// reconcile; moving the Sync to Correct corrects at once.
func TestDaemonDriftReport(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{
		"web.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: NS}\ndata: {replicas: \"3\"}\n",
		"bot.yaml": "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: bot, namespace: NS, labels: {team: a}}\n",
	})
	addr := cluster.FreeAddr()
	f.startDaemon(env.Config, func(o *Options) { o.MetricsAddr = addr })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	f.waitSync("Ready", notDrifted(rev))
	if got := f.scrape(addr, "converge_drifted_objects"); got != 0 {
		t.Errorf("converge_drifted_objects = %v before any drift, want 0", got)
	}

	web := &corev1.ConfigMap{}
	web.Namespace, web.Name = f.ns, "web"
	f.editAs("kubectl-edit", web, func() { web.Data["replicas"] = "7" })
	s := f.waitSync("Drifted naming the field and its manager", driftedNaming("ConfigMap "+f.ns+"/web: data.replicas (kubectl-edit)"))
	want := &v1alpha1.DriftStatus{Objects: []v1alpha1.DriftedObject{{Kind: "ConfigMap", Namespace: f.ns, Name: "web",
		Fields: []v1alpha1.DriftedField{{Path: "data.replicas", Manager: "kubectl-edit"}}}}}
	if s.Status.Drift == nil || len(s.Status.Drift.Objects) != 1 || s.Status.Drift.Objects[0].String() != want.Objects[0].String() {
		t.Errorf("status.drift = %+v, want %+v", s.Status.Drift, want)
	}
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, "drift reported, not corrected") {
		t.Errorf("Ready message %q does not say drift is reported", c.Message)
	}
	s = f.reconcileAgain(rev)
	if cm, err := f.configMap("web"); err != nil || cm.Data["replicas"] != "7" {
		t.Errorf("Report mode: web data %v (%v), want the edited replicas 7 kept", cm.Data, err)
	}
	if !driftedNaming("data.replicas (kubectl-edit)")(s) {
		t.Errorf("drift no longer reported after another reconcile: %+v", s.Status.Conditions)
	}
	if ev := f.syncEvents(); !strings.Contains(ev, "Warning Drifted ") || !strings.Contains(ev, "data.replicas (kubectl-edit)") {
		t.Errorf("events %q: want a Drifted event naming data.replicas and kubectl-edit", ev)
	}
	if got := f.scrape(addr, "converge_drifted_objects"); got != 1 {
		t.Errorf("converge_drifted_objects = %v, want 1", got)
	}

	bot := &corev1.ServiceAccount{}
	bot.Namespace, bot.Name = f.ns, "bot"
	if err := f.c.Delete(context.Background(), bot); err != nil {
		t.Fatal(err)
	}
	f.waitSync("the deleted object reported", driftedNaming("ServiceAccount "+f.ns+"/bot: deleted", "data.replicas (kubectl-edit)"))
	f.reconcileAgain(rev)
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(bot), bot); !apierrors.IsNotFound(err) {
		t.Errorf("Report mode recreated the ServiceAccount deleted out of band: %v", err)
	}
	if got := f.scrape(addr, "converge_drifted_objects"); got != 2 {
		t.Errorf("converge_drifted_objects = %v, want 2", got)
	}

	// A spec change is a new generation: everything is applied, the drift is gone.
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.DriftPolicyKinds = []v1alpha1.KindDriftPolicy{{Kind: "ConfigMap", Policy: v1alpha1.DriftCorrect}}
	})
	f.waitSync("drift cleared by the new generation", notDrifted(rev))
	if cm, err := f.configMap("web"); err != nil || cm.Data["replicas"] != "3" {
		t.Errorf("after the spec change: web data %v (%v), want replicas 3", cm.Data, err)
	}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(bot), bot); err != nil {
		t.Errorf("after the spec change the ServiceAccount is not back: %v", err)
	}

	f.editAs("kubectl-edit", web, func() { web.Data["replicas"] = "8" })
	f.editAs("kubectl-edit", bot, func() { bot.Labels["team"] = "b" })
	f.waitSync("the ServiceAccount reported, the ConfigMap corrected", func(s *v1alpha1.Sync) bool {
		cm, err := f.configMap("web")
		return driftedNaming("ServiceAccount "+f.ns+"/bot: metadata.labels.team (kubectl-edit)")(s) &&
			!strings.Contains(meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionDrifted).Message, "ConfigMap") &&
			err == nil && cm.Data["replicas"] == "3"
	})
	if ev := f.syncEvents(); !strings.Contains(ev, "Normal DriftCorrected ") || !strings.Contains(ev, "ConfigMap "+f.ns+"/web: data.replicas (kubectl-edit)") {
		t.Errorf("events %q: want a DriftCorrected event naming web's data.replicas and kubectl-edit", ev)
	}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(bot), bot); err != nil || bot.Labels["team"] != "b" {
		t.Errorf("the reported ServiceAccount's label team = %q (%v), want the edit b kept", bot.Labels["team"], err)
	}

	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.DriftPolicy, s.Spec.DriftPolicyKinds = v1alpha1.DriftCorrect, nil })
	f.waitSync("corrected at once", notDrifted(rev))
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return f.c.Get(ctx, client.ObjectKeyFromObject(bot), bot) == nil && bot.Labels["team"] == "a", nil
	})
	if err != nil {
		t.Errorf("after the move to Correct the ServiceAccount's label team = %q, want a", bot.Labels["team"])
	}
	if got := f.scrape(addr, "converge_drifted_objects"); got != 0 {
		t.Errorf("converge_drifted_objects = %v after the correction, want 0", got)
	}

	// Back to Report; a new commit applies everything and ends the drift too.
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	f.waitSync("Ready in Report mode", notDrifted(rev))
	f.editAs("kubectl-edit", web, func() { web.Data["replicas"] = "9" })
	f.waitSync("drift reported again", driftedNaming("data.replicas (kubectl-edit)"))
	rev2 := f.publish(map[string]string{"web.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: NS}\ndata: {replicas: \"3\", zone: b}\n"})
	f.requestReconcile("app")
	f.waitSync("the new commit applied, the drift gone", notDrifted(rev2))
	if cm, err := f.configMap("web"); err != nil || cm.Data["replicas"] != "3" || cm.Data["zone"] != "b" {
		t.Errorf("after the new commit: web data %v (%v), want replicas 3 and zone b", cm.Data, err)
	}
}

// TestDriftDetectedOnACacheBehindOurWrite: right after the status write of a new
// generation's apply, an object is edited; the reconcile the edit starts may read the Sync
// from a cache still behind that write, whose status says the generation was never applied.
// Deciding on it would apply everything and correct drift the policy says to report only
// (and announce a correction as a plain apply). The reconcile decides on the API server's
// copy instead, and detects the drift.
func TestDriftDetectedOnACacheBehindOurWrite(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := installSyncCRD(ctx, env.Config, f.c); err != nil { // no daemon runs here to install it
		t.Fatal(err)
	}
	created := f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	key := client.ObjectKeyFromObject(created)
	lagging := &v1alpha1.Sync{}
	if err := f.c.Get(ctx, key, lagging); err != nil { // the cache, before our write
		t.Fatal(err)
	}
	w := &status.Writer{Live: f.c, Client: f.c}
	r := &reconciler{states: newSyncStates(), writer: w, live: f.c}
	const rev = "main@sha1:1111111111111111111111111111111111111111"
	o := status.Outcome{UID: created.UID, Generation: lagging.Generation, Ready: metav1.ConditionTrue, Reason: reasonSucceeded,
		AttemptedRevision: rev, AppliedRevision: rev}
	if err := w.Write(ctx, key, o); err != nil {
		t.Fatal(err)
	}
	if driftOptions(lagging, rev).Detect {
		t.Fatal("the lagging copy already detects drift: the test shows nothing")
	}
	s, err := r.latest(ctx, lagging)
	if err != nil || s == nil {
		t.Fatalf("latest: %v, %v", s, err)
	}
	if d := driftOptions(s, rev); !d.Detect || d.Report == nil {
		t.Errorf("a reconcile right after our write decides on applied generation %d (want %d): drift detected %v, reported %v",
			s.Status.LastAppliedGeneration, lagging.Generation, d.Detect, d.Report != nil)
	}
}

// TestDriftOptions checks when a reconcile detects drift (the revision and generation last
// applied, read from the status) and which objects it only reports.
func TestDriftOptions(t *testing.T) {
	cm := object.ObjMetadata{Namespace: "apps", Name: "web", GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	deploy := object.ObjMetadata{Namespace: "apps", Name: "web", GroupKind: schema.GroupKind{Group: "apps", Kind: "Deployment"}}
	const rev = "main@sha1:1"
	sync := func(policy v1alpha1.DriftPolicy, kinds []v1alpha1.KindDriftPolicy, appliedRev string, appliedGen int64) *v1alpha1.Sync {
		s := testSync()
		s.Generation = 2
		s.Spec.DriftPolicy, s.Spec.DriftPolicyKinds = policy, kinds
		s.Status.LastAppliedRevision, s.Status.LastAppliedGeneration = appliedRev, appliedGen
		s.Status.LastAttemptedRevision = appliedRev
		return s
	}
	attemptedOther := sync(v1alpha1.DriftReport, nil, rev, 2)
	attemptedOther.Status.LastAttemptedRevision = "main@sha1:2" // partly applied, then the branch was reset
	for _, tc := range []struct {
		name          string
		s             *v1alpha1.Sync
		detect        bool
		reportCM      bool
		reportDeploy  bool
		reportFuncNil bool
	}{
		{name: "new revision", s: sync(v1alpha1.DriftReport, nil, "main@sha1:0", 2)},
		{name: "new generation", s: sync(v1alpha1.DriftReport, nil, rev, 1)},
		{name: "never recorded its generation", s: sync(v1alpha1.DriftReport, nil, rev, 0)},
		{name: "another revision attempted since", s: attemptedOther},
		{name: "default Correct", s: sync("", nil, rev, 2), detect: true, reportFuncNil: true},
		{name: "Report", s: sync(v1alpha1.DriftReport, nil, rev, 2), detect: true, reportCM: true, reportDeploy: true},
		{name: "Report, ConfigMaps Correct", s: sync(v1alpha1.DriftReport, []v1alpha1.KindDriftPolicy{{Kind: "ConfigMap", Policy: v1alpha1.DriftCorrect}}, rev, 2),
			detect: true, reportDeploy: true},
		{name: "Correct, Deployments Report", s: sync(v1alpha1.DriftCorrect, []v1alpha1.KindDriftPolicy{{Group: "apps", Kind: "Deployment", Policy: v1alpha1.DriftReport}}, rev, 2),
			detect: true, reportDeploy: true},
		{name: "a kind of another group", s: sync(v1alpha1.DriftCorrect, []v1alpha1.KindDriftPolicy{{Kind: "Deployment", Policy: v1alpha1.DriftReport}}, rev, 2),
			detect: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := driftOptions(tc.s, rev)
			if d.Detect != tc.detect {
				t.Fatalf("Detect = %v, want %v", d.Detect, tc.detect)
			}
			if !tc.detect {
				if d.Report != nil {
					t.Error("a reconcile that does not detect drift has a Report selector")
				}
				return
			}
			if tc.reportFuncNil {
				if d.Report != nil {
					t.Error("Correct everywhere: want no Report selector")
				}
				return
			}
			if d.Report == nil {
				t.Fatal("want a Report selector")
			}
			if got := d.Report(cm); got != tc.reportCM {
				t.Errorf("ConfigMap reported = %v, want %v", got, tc.reportCM)
			}
			if got := d.Report(deploy); got != tc.reportDeploy {
				t.Errorf("Deployment reported = %v, want %v", got, tc.reportDeploy)
			}
		})
	}
}

// TestNotificationDriftedOnce: a Sync in Report mode whose object kubectl-edit changes sends
// one Drifted notification naming the field and the manager, and nothing more while the
// drift lasts (reconciles every 2 s find it again).
func TestNotificationDriftedOnce(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url, got := hmacReceiver(t)
	addr := f.notifyingDaemon(url, env.Config)
	f.waitSync("Ready", readyAt(rev))
	receive(t, got, "BecameReady")
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.DriftPolicy = v1alpha1.DriftReport })
	f.waitSync("Ready in Report mode", readyAt(rev))

	a := &corev1.ConfigMap{}
	a.Namespace, a.Name = f.ns, "a"
	f.editAs("kubectl-edit", a, func() { a.Data["version"] = "edited" })
	n := receive(t, got, "Drifted")
	if n.Transition != "Drifted" || n.Reason != v1alpha1.ReasonDriftDetected || !strings.Contains(n.Message, "data.version (kubectl-edit)") {
		t.Errorf("notification %+v, want Drifted (DriftDetected) naming data.version and kubectl-edit", n)
	}
	done := f.scrape(addr, "converge_reconciles_total", `result="success"`)
	f.waitMetric(addr, "converge_reconciles_total", done+3, `result="success"`)
	select {
	case n := <-got:
		t.Errorf("a reconcile that found the same drift sent %+v", n)
	default:
	}
	if s := f.waitSync("still drifted", driftedNaming("data.version (kubectl-edit)")); s.Status.Drift == nil {
		t.Error("status.drift is empty")
	}
}

// TestCorrectedDriftAnnotationBounded: the corrected drift a DriftCorrected event carries
// stays within 64 KiB of JSON however long its paths (JSON escapes <, > and & to six bytes
// each), objects left out from the end; the API server refuses an event whose annotations
// pass 256 KiB. Without the bound: 20 objects of 5 such fields made about 370 KB.
func TestCorrectedDriftAnnotationBounded(t *testing.T) {
	var objs []v1alpha1.DriftedObject
	for i := range v1alpha1.MaxDriftObjects {
		o := v1alpha1.DriftedObject{Kind: "ConfigMap", Namespace: "ns", Name: fmt.Sprintf("cm-%d", i)}
		for range v1alpha1.MaxDriftFields {
			o.Fields = append(o.Fields, v1alpha1.DriftedField{Path: strings.Repeat("<", 500), Manager: strings.Repeat("&", 120)})
		}
		objs = append(objs, o)
	}
	ann := correctedDriftAnnotation(objs)
	got := ann[v1alpha1.CorrectedDriftAnnotation]
	var back []v1alpha1.DriftedObject
	if len(got) == 0 || len(got) > maxCorrectedDriftBytes || json.Unmarshal([]byte(got), &back) != nil || len(back) == 0 || back[0].Name != "cm-0" {
		t.Errorf("annotation of %d bytes (bound %d), %d objects kept", len(got), maxCorrectedDriftBytes, len(back))
	}
	if small := correctedDriftAnnotation(objs[:1]); len(small[v1alpha1.CorrectedDriftAnnotation]) == 0 {
		t.Error("one object left out")
	}
}
