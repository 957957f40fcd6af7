package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/deploy"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var env *cluster.Cluster

func TestMain(m *testing.M) { cluster.Main(m, cluster.API, &env) }

var installOnce sync.Once

// setup installs the Sync CRD once, creates a namespace and a Sync, and returns a client
// whose requests go through a fault transport.
func setup(t *testing.T) (client.Client, *fault.Transport, types.NamespacedName) {
	t.Helper()
	cluster.Require(t, env)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	installOnce.Do(func() { installCRD(t, scheme) })
	cfg, ft := fault.Config(env.Config)
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := env.Namespace(t)
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec:       v1alpha1.SyncSpec{Source: v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/apps.git"}}, Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	ft.Reset()
	return c, ft, client.ObjectKeyFromObject(s)
}

func installCRD(t *testing.T, scheme *runtime.Scheme) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(deploy.SyncCRD, crd); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(crd), crd); err != nil {
			return false, err
		}
		for _, cond := range crd.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("CRD not established: %v", err)
	}
}

func get(t *testing.T, c client.Client, key types.NamespacedName) *v1alpha1.Sync {
	t.Helper()
	s := &v1alpha1.Sync{}
	if err := c.Get(context.Background(), key, s); err != nil {
		t.Fatal(err)
	}
	return s
}

func ready(gen int64, rev string) Outcome {
	return Outcome{Generation: gen, Ready: metav1.ConditionTrue, Reason: "Applied", Message: "applied " + rev,
		AttemptedRevision: rev, AppliedRevision: rev, Summary: &v1alpha1.Summary{Created: 3}}
}

// TestWriteRecordsOutcome checks one write sets observedGeneration, conditions and revisions
// (I4, I6), and an identical outcome then writes nothing (I7 quiescence).
func TestWriteRecordsOutcome(t *testing.T) {
	c, ft, key := setup(t)
	w := &Writer{Live: c, Client: c}
	rev := "main@sha1:0123456789012345678901234567890123456789"
	if err := w.Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	s := get(t, c, key)
	got := struct {
		Gen            int64
		Ready, Reason  string
		Applied, Tried string
		Reconciling    bool
	}{s.Status.ObservedGeneration, string(meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady).Status),
		meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady).Reason, s.Status.LastAppliedRevision,
		s.Status.LastAttemptedRevision, meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReconciling) != nil}
	want := struct {
		Gen            int64
		Ready, Reason  string
		Applied, Tried string
		Reconciling    bool
	}{1, "True", "Applied", rev, rev, false}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}

	ft.Reset()
	if err := w.Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	if n := ft.Mutating(); n != 0 {
		t.Errorf("an unchanged outcome sent %d writes, want 0", n)
	}
}

// TestForgetDropsTheRecordOfAWrite checks Forget drops the resourceVersion a Write
// remembered for a Sync (the daemon forgets a deleted Sync so; a Write never sees it again).
func TestForgetDropsTheRecordOfAWrite(t *testing.T) {
	c, _, key := setup(t)
	w := &Writer{Live: c, Client: c}
	if err := w.Write(context.Background(), key, ready(1, "main@sha1:0123456789012345678901234567890123456789")); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.written[key]; !ok {
		t.Fatalf("the write was not remembered")
	}
	w.Forget(key)
	if n := len(w.written); n != 0 {
		t.Errorf("after Forget the writer remembers %d writes, want 0", n)
	}
}

// TestWriteSurvivesConflictsAndStaleCache is S01/S02: the first reads come from a frozen
// cache, the first five status writes get 409, and another writer's condition is added
// concurrently. observedGeneration still reaches the generation (I4), the other writer's
// condition survives, and the retries re-read from the API server (I10).
func TestWriteSurvivesConflictsAndStaleCache(t *testing.T) {
	c, ft, key := setup(t)
	stale := get(t, c, key) // the "cache": frozen before the other writer's update

	other := get(t, c, key)
	meta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: "ExternalCheck", Status: metav1.ConditionTrue, Reason: "Passed", Message: "ok"})
	if err := c.Status().Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	other.Spec.Path = "apps" // bump generation to 2
	if err := c.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}

	ft.SetRules(fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 5, Status: 409})
	w := &Writer{Cached: frozenReader{stale}, Live: c, Client: c}
	rev := "main@sha1:1111111111111111111111111111111111111111"
	if err := w.Write(context.Background(), key, ready(2, rev)); err != nil {
		t.Fatalf("write with 5 conflicts: %v", err)
	}
	s := get(t, c, key)
	if s.Status.ObservedGeneration != s.Generation || s.Generation != 2 {
		t.Errorf("observedGeneration = %d, generation = %d; want both 2", s.Status.ObservedGeneration, s.Generation)
	}
	if meta.FindStatusCondition(s.Status.Conditions, "ExternalCheck") == nil {
		t.Errorf("another writer's condition was lost: %+v", s.Status.Conditions)
	}
	if !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("Ready is not True: %+v", s.Status.Conditions)
	}
	if ft.Injected() != 5 {
		t.Errorf("injected %d conflicts, want 5", ft.Injected())
	}
}

// TestWriteGivesUpAfterBoundedConflicts checks a 409 storm is surfaced as an error after a
// bounded number of attempts, not retried forever (I10).
func TestWriteGivesUpAfterBoundedConflicts(t *testing.T) {
	c, ft, key := setup(t)
	ft.SetRules(fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Status: 409})
	w := &Writer{Live: c, Client: c, Backoff: wait.Backoff{Steps: 3, Duration: time.Millisecond}}
	err := w.Write(context.Background(), key, ready(1, "main@sha1:2222222222222222222222222222222222222222"))
	if err == nil {
		t.Fatal("write under a permanent conflict storm returned nil")
	}
	if n := ft.Count("patch"); n != 3 {
		t.Errorf("sent %d patches, want 3 (the bounded attempts)", n)
	}
}

// TestWriteNeverRegresses checks a reconcile of an older generation never overwrites a status
// written for a newer one (I5), and a failure keeps lastAppliedRevision (I5, I6).
func TestWriteNeverRegresses(t *testing.T) {
	c, _, key := setup(t)
	bumpGeneration(t, c, key, 3) // observedGeneration 3 must be a generation that existed
	w := &Writer{Live: c, Client: c}
	newRev := "main@sha1:3333333333333333333333333333333333333333"
	if err := w.Write(context.Background(), key, ready(3, newRev)); err != nil {
		t.Fatal(err)
	}
	old := ready(2, "main@sha1:4444444444444444444444444444444444444444")
	if err := w.Write(context.Background(), key, old); err != nil {
		t.Fatal(err)
	}
	s := get(t, c, key)
	if s.Status.ObservedGeneration != 3 || s.Status.LastAppliedRevision != newRev {
		t.Errorf("stale write regressed status: observedGeneration %d, lastAppliedRevision %s", s.Status.ObservedGeneration, s.Status.LastAppliedRevision)
	}

	failed := Outcome{Generation: 3, Ready: metav1.ConditionFalse, Reason: "BuildFailed", Message: "apps/web.yaml: document 1: missing metadata.name",
		Stalled: true, AttemptedRevision: "main@sha1:5555555555555555555555555555555555555555"}
	if err := w.Write(context.Background(), key, failed); err != nil {
		t.Fatal(err)
	}
	s = get(t, c, key)
	readyCond := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if readyCond.Status != metav1.ConditionFalse || readyCond.Message != failed.Message || !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled) {
		t.Errorf("failure not recorded: %+v", s.Status.Conditions)
	}
	if s.Status.LastAppliedRevision != newRev {
		t.Errorf("lastAppliedRevision moved to %q on a failure, want %q", s.Status.LastAppliedRevision, newRev)
	}
}

// frozenReader serves one fixed Sync, like an informer cache that stopped updating.
type frozenReader struct{ s *v1alpha1.Sync }

func (f frozenReader) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	f.s.DeepCopyInto(obj.(*v1alpha1.Sync))
	return nil
}

func (f frozenReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return nil
}

// TestWriteWaitsOutALaggingCache is the churn the fault harness saw after a watch outage: the
// cache still shows the status from before our last write, so the same outcome looked like a
// change and each reconcile sent a PATCH bound to fail with 409. The writer now knows the
// cache is behind its own write, reads the API server instead, and writes nothing (I7).
func TestWriteWaitsOutALaggingCache(t *testing.T) {
	c, ft, key := setup(t)
	lagging := get(t, c, key) // the cache, stuck before our first write
	w := &Writer{Cached: frozenReader{lagging}, Live: c, Client: c}
	rev := "main@sha1:2222222222222222222222222222222222222222"
	if err := w.Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	ft.Reset()
	if err := w.Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	if writes := ft.Writes(); len(writes) != 0 {
		t.Errorf("the same outcome on a lagging cache sent writes: %v", writes)
	}
	if g := ft.CountResource("get", "syncs", ""); g != 1 {
		t.Errorf("%d GETs of the v1alpha1.Sync, want 1 (the API server instead of the lagging cache)", g)
	}
}

// TestLatestReadsPastALaggingCache: a cache that still shows the status from before our
// last write is no base for a reconcile's decisions (the generation and revision last
// applied): Latest reads the API server instead, once, and then trusts the cache at what it
// read; a cache that shows our write is read from alone.
func TestLatestReadsPastALaggingCache(t *testing.T) {
	c, ft, key := setup(t)
	ctx := context.Background()
	lagging := get(t, c, key) // the cache, stuck before our write
	w := &Writer{Live: c, Client: c}
	rev := "main@sha1:6666666666666666666666666666666666666666"
	if err := w.Write(ctx, key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	ft.Reset()
	s, err := w.Latest(ctx, key, lagging)
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.LastAppliedRevision != rev || s.Status.LastAppliedGeneration != 1 {
		t.Errorf("Latest on a lagging cache: applied %q at generation %d, want %q at 1 (our last write)",
			s.Status.LastAppliedRevision, s.Status.LastAppliedGeneration, rev)
	}
	if g := ft.CountResource("get", "syncs", ""); g != 1 {
		t.Errorf("%d GETs of the Sync on a lagging cache, want 1", g)
	}
	caughtUp := get(t, c, key)
	ft.Reset()
	if s, err := w.Latest(ctx, key, caughtUp); err != nil || s != caughtUp {
		t.Errorf("Latest on a cache that shows our write: %v, want the cached Sync itself", err)
	}
	if g := ft.CountResource("get", "syncs", ""); g != 0 {
		t.Errorf("%d GETs of the Sync on a cache that shows our write, want 0", g)
	}
}

// TestWriteTrustsACachePastAnotherWriter: after our write, another writer changes the Sync
// (a label). The cache shows that newer resourceVersion, never ours; once the API server
// confirmed there is nothing to write, the cache at that version is trusted again, and a
// quiet reconcile reads nothing (I7).
func TestWriteTrustsACachePastAnotherWriter(t *testing.T) {
	c, ft, key := setup(t)
	ctx := context.Background()
	w := &Writer{Live: c, Client: c}
	rev := "main@sha1:5555555555555555555555555555555555555555"
	if err := w.Write(ctx, key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	labelled := get(t, c, key)
	labelled.Labels = map[string]string{"team": "web"}
	if err := c.Update(ctx, labelled); err != nil {
		t.Fatal(err)
	}
	w.Cached = frozenReader{get(t, c, key)} // the cache, caught up with the label
	for i := range 2 {
		ft.Reset()
		if err := w.Write(ctx, key, ready(1, rev)); err != nil {
			t.Fatal(err)
		}
		if n := ft.Mutating(); n != 0 {
			t.Errorf("write %d of the same outcome sent %d writes", i+1, n)
		}
		if g, want := ft.CountResource("get", "syncs", ""), 1-i; g != want {
			t.Errorf("write %d of the same outcome: %d GETs of the Sync, want %d", i+1, g, want)
		}
	}
}

// TestWriteNeverSkipsOnALaggingCache is the other half: an outcome that equals the stale
// cached status but not the status we wrote since must still be written (I4, I6). The cache
// shows Ready=True; we write Ready=False; the next outcome, Ready=True again, must land.
func TestWriteNeverSkipsOnALaggingCache(t *testing.T) {
	c, _, key := setup(t)
	rev := "main@sha1:3333333333333333333333333333333333333333"
	if err := (&Writer{Live: c, Client: c}).Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	w := &Writer{Cached: frozenReader{get(t, c, key)}, Live: c, Client: c}
	failed := Outcome{Generation: 1, Ready: metav1.ConditionFalse, Reason: "ApplyFailed", Message: "boom", AttemptedRevision: rev}
	if err := w.Write(context.Background(), key, failed); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(context.Background(), key, ready(1, rev)); err != nil {
		t.Fatal(err)
	}
	if s := get(t, c, key); !meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("Ready is not True after the last outcome: %+v", s.Status.Conditions)
	}
}

// bumpGeneration changes the Sync's spec until metadata.generation is gen.
func bumpGeneration(t *testing.T, c client.Client, key types.NamespacedName, gen int64) {
	t.Helper()
	for s := get(t, c, key); s.Generation < gen; s = get(t, c, key) {
		s.Spec.Path = fmt.Sprintf("apps-%d", s.Generation+1)
		if err := c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
}

// recreate deletes the Sync key and creates another one under the same name with another
// spec, as a user does who strips the finalizer of a Sync whose deletion "hangs".
func recreate(t *testing.T, c client.Client, key types.NamespacedName) *v1alpha1.Sync {
	t.Helper()
	ctx := context.Background()
	old := get(t, c, key)
	if err := c.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, key, &v1alpha1.Sync{})), nil
	})
	if err != nil {
		t.Fatalf("the v1alpha1.Sync was never deleted: %v", err)
	}
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Spec:       v1alpha1.SyncSpec{Source: v1alpha1.Source{Git: &v1alpha1.GitSource{URL: "https://git.example/other.git"}}, Interval: metav1.Duration{Duration: time.Minute}},
	}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if s.UID == old.UID {
		t.Fatalf("the re-created v1alpha1.Sync has the old UID %s", s.UID)
	}
	return s
}

// TestWriteDropsTheOutcomeOfAReplacedSync is I14: an outcome computed for a Sync that was
// deleted and re-created under the same name is never written onto the new one, whether
// the writer reads the new Sync at once or a cache still shows the old one (the patch's
// resourceVersion precondition then fails and the re-read finds another UID). The new Sync's
// own outcome is written although the cache shows the old one.
func TestWriteDropsTheOutcomeOfAReplacedSync(t *testing.T) {
	c, ft, key := setup(t)
	old := get(t, c, key)
	oldOutcome := Outcome{UID: old.UID, Generation: old.Generation, Ready: metav1.ConditionFalse, Reason: "HealthCheckFailed",
		Message: "Deployment web/api not ready", AttemptedRevision: "main@sha1:6666666666666666666666666666666666666666"}
	cur := recreate(t, c, key)
	for name, w := range map[string]*Writer{
		"live read":         {Live: c, Client: c},
		"stale cached read": {Cached: frozenReader{old}, Live: c, Client: c},
	} {
		ft.Reset()
		err := w.Write(context.Background(), key, oldOutcome)
		if !errors.Is(err, ErrReplaced) {
			t.Errorf("%s: Write of the old v1alpha1.Sync's outcome = %v, want ErrReplaced", name, err)
		}
		if s := get(t, c, key); s.Status.ObservedGeneration != 0 || len(s.Status.Conditions) != 0 {
			t.Errorf("%s: the old v1alpha1.Sync's outcome landed on the new one: %+v", name, s.Status)
		}
		if ft.CountResource("patch", "syncs", "status") > 1 {
			t.Errorf("%s: writes %v, want at most the one rejected by its resourceVersion", name, ft.Writes())
		}
	}

	rev := "main@sha1:7777777777777777777777777777777777777777"
	mine := ready(cur.Generation, rev)
	mine.UID = cur.UID
	w := &Writer{Cached: frozenReader{old}, Live: c, Client: c}
	if err := w.Write(context.Background(), key, mine); err != nil {
		t.Fatalf("Write of the new v1alpha1.Sync's outcome: %v", err)
	}
	if s := get(t, c, key); s.Status.ObservedGeneration != cur.Generation || s.Status.LastAppliedRevision != rev {
		t.Errorf("the new v1alpha1.Sync's outcome was not written: %+v", s.Status)
	}
}

// TestWriteRepairsAnImpossibleObservedGeneration is I14: a status whose observedGeneration is
// above metadata.generation (written by hand through the status subresource) describes no
// generation that ever existed; the next outcome overwrites it instead of deferring to it.
func TestWriteRepairsAnImpossibleObservedGeneration(t *testing.T) {
	c, _, key := setup(t)
	s := get(t, c, key)
	s.Status.ObservedGeneration = 999
	s.Status.LastHandledRequest = "bogus"
	if err := c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	o := ready(s.Generation, "main@sha1:8888888888888888888888888888888888888888")
	o.HandledRequest = "2026-11-23T13:00:00Z"
	if err := (&Writer{Live: c, Client: c}).Write(context.Background(), key, o); err != nil {
		t.Fatal(err)
	}
	got := get(t, c, key)
	if got.Status.ObservedGeneration != got.Generation || got.Status.LastHandledRequest != o.HandledRequest {
		t.Errorf("observedGeneration %d (generation %d), lastHandledRequest %q; want the outcome written",
			got.Status.ObservedGeneration, got.Generation, got.Status.LastHandledRequest)
	}
}

// TestWriteKeepsTheSummaryOfTheLastChange is I7 and "status tells the truth": a no-op after
// an apply that pruned keeps "pruned" and writes nothing; the first apply of a new revision
// replaces the summary even when it changed nothing; a NotReady count follows the latest
// reconcile.
func TestWriteKeepsTheSummaryOfTheLastChange(t *testing.T) {
	c, ft, key := setup(t)
	w := &Writer{Live: c, Client: c}
	rev1, rev2 := "main@sha1:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "main@sha1:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	at := func(rev string, sum v1alpha1.Summary) Outcome {
		o := ready(1, rev)
		o.Summary = &sum
		return o
	}
	steps := []struct {
		name   string
		o      Outcome
		writes int
		want   v1alpha1.Summary
	}{
		{"a prune", at(rev1, v1alpha1.Summary{Unchanged: 2, Pruned: 100}), 1, v1alpha1.Summary{Unchanged: 2, Pruned: 100}},
		{"a no-op", at(rev1, v1alpha1.Summary{Unchanged: 2}), 0, v1alpha1.Summary{Unchanged: 2, Pruned: 100}},
		{"a no-op with objects not ready", at(rev1, v1alpha1.Summary{Unchanged: 2, NotReady: 1}), 1, v1alpha1.Summary{Unchanged: 2, Pruned: 100, NotReady: 1}},
		{"a change", at(rev1, v1alpha1.Summary{Configured: 1, Unchanged: 1}), 1, v1alpha1.Summary{Configured: 1, Unchanged: 1}},
		{"a new revision that changes nothing", at(rev2, v1alpha1.Summary{Unchanged: 2}), 1, v1alpha1.Summary{Unchanged: 2}},
		{"a failure", at(rev2, v1alpha1.Summary{Unchanged: 1, Failed: 1}), 1, v1alpha1.Summary{Unchanged: 1, Failed: 1}},
		{"a no-op after the failure", at(rev2, v1alpha1.Summary{Unchanged: 2}), 1, v1alpha1.Summary{Unchanged: 2}},
	}
	for _, st := range steps {
		ft.Reset()
		if err := w.Write(context.Background(), key, st.o); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if n := ft.Mutating(); n != st.writes {
			t.Errorf("%s: %d writes, want %d", st.name, n, st.writes)
		}
		s := get(t, c, key)
		if diff := cmp.Diff(&st.want, s.Status.Summary); diff != "" {
			t.Errorf("%s: summary (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestWriteKeepsTheWaitThroughFailures: a transient failure while the same generation and
// revision wait for readiness keeps Reconciling and its transition time, the start of the
// readiness deadline; a new revision starts it anew. Without it: a FetchFailed between two
// Progressing polls removed Reconciling, and the next poll's deadline began again.
func TestWriteKeepsTheWaitThroughFailures(t *testing.T) {
	c, _, key := setup(t)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w := &Writer{Live: c, Client: c, Now: func() time.Time { return clock }}
	rev := "main@sha1:0123456789012345678901234567890123456789"
	waiting := Outcome{Generation: 1, Ready: metav1.ConditionUnknown, Reason: "Progressing", Message: "waiting", AttemptedRevision: rev}
	failed := Outcome{Generation: 1, Ready: metav1.ConditionFalse, Reason: "FetchFailed", Message: "no answer"}
	began := func() time.Time {
		t.Helper()
		r := meta.FindStatusCondition(get(t, c, key).Status.Conditions, v1alpha1.ConditionReconciling)
		if r == nil {
			t.Fatal("no Reconciling condition")
		}
		return r.LastTransitionTime.UTC()
	}
	for i, o := range []Outcome{waiting, failed, waiting} {
		if err := w.Write(context.Background(), key, o); err != nil {
			t.Fatal(err)
		}
		if got := began(); !got.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
			t.Errorf("write %d (%s): the wait began at %v, want when the first poll wrote it", i, o.Reason, got)
		}
		clock = clock.Add(time.Minute)
	}
	other := waiting
	other.AttemptedRevision = "main@sha1:1111111111111111111111111111111111111111"
	if err := w.Write(context.Background(), key, other); err != nil {
		t.Fatal(err)
	}
	if got := began(); !got.Equal(clock) {
		t.Errorf("a new revision's wait began at %v, want %v", got, clock)
	}
}

// TestTruncateMessageKeepsCharacters checks that a condition message over maxMessage is cut
// on a character boundary: a message of multi-byte characters cut at a byte count fell in the
// middle of one and left invalid UTF-8 in the status.
func TestTruncateMessageKeepsCharacters(t *testing.T) {
	long := strings.Repeat("é", maxMessage) // 2 bytes each
	got := truncateMessage(long)
	if !utf8.ValidString(got) || len(got) > maxMessage || !strings.HasSuffix(got, " …(truncated)") {
		t.Errorf("truncated message: valid UTF-8 %v, %d bytes (max %d), suffix %q", utf8.ValidString(got), len(got), maxMessage, got[max(0, len(got)-16):])
	}
	if short := "short"; truncateMessage(short) != short {
		t.Errorf("a short message changed")
	}
}
