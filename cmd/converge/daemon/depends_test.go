package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// dependsOn is a createSync mutation setting spec.dependsOn to refs, each "name" or
// "namespace/name".
func dependsOn(refs ...string) func(*v1alpha1.Sync) {
	return func(s *v1alpha1.Sync) {
		s.Spec.DependsOn = nil
		for _, r := range refs {
			ns, name, ok := strings.Cut(r, "/")
			if !ok {
				ns, name = "", r
			}
			s.Spec.DependsOn = append(s.Spec.DependsOn, v1alpha1.DependencyReference{Namespace: ns, Name: name})
		}
	}
}

// hourly is a createSync mutation with an interval and a retry interval of an hour: only an
// event (the dependency index) can reconcile such a Sync again within a test.
func hourly(s *v1alpha1.Sync) {
	s.Spec.Interval = metav1.Duration{Duration: time.Hour}
	s.Spec.RetryInterval = &metav1.Duration{Duration: time.Hour}
}

// stalled holds when the Sync is Stalled too.
func stalled(s *v1alpha1.Sync) bool {
	return meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
}

func both(a, b func(*v1alpha1.Sync) bool) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool { return a(s) && b(s) }
}

// absent fails the test for each ConfigMap of names that exists.
func (f *fixture) absent(why string, names ...string) {
	f.t.Helper()
	for _, n := range names {
		if _, err := f.configMap(n); !apierrors.IsNotFound(err) {
			f.t.Errorf("%s: configmap %s exists (get: %v), want it not applied", why, n, err)
		}
	}
}

// present fails the test for each ConfigMap of names that does not exist.
func (f *fixture) present(why string, names ...string) {
	f.t.Helper()
	for _, n := range names {
		if _, err := f.configMap(n); err != nil {
			f.t.Errorf("%s: configmap %s: %v, want it kept", why, n, err)
		}
	}
}

func (f *fixture) createConfigMap(name string) {
	f.t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	if err := f.c.Create(context.Background(), cm); err != nil {
		f.t.Fatal(err)
	}
}

// TestDaemonDependsOnWaitsThenAppliesAtOnce: a Sync whose dependency is not Ready is not
// fetched or applied (Ready=False DependencyNotReady with the dependency's message); once the
// dependency is Ready it is applied at once, although its interval and retry interval are an
// hour, so only the dependents' index can have triggered it. A dependency whose new
// generation is not reconciled yet (its readiness wait is running, its status still says
// Ready for the previous one) holds a new revision of the dependent back the same way.
// Before spec.dependsOn was honoured, app was applied at once (the first wait failed).
func TestDaemonDependsOnWaitsThenAppliesAtOnce(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"infra/infra.yaml": cmNamed("infra", "NS"), "app/app.yaml": cmNamed("app", "NS")})
	f.startDaemon(env.Config)
	f.createSync(2*time.Second, syncNamed("infra", "infra"), func(s *v1alpha1.Sync) {
		s.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Second}
		s.Spec.RetryInterval = &metav1.Duration{Duration: time.Second}
		s.Spec.HealthChecks = []v1alpha1.HealthCheck{{APIVersion: "v1", Kind: "ConfigMap", Name: "gate"}}
	})
	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn("infra"), hourly)
	s := f.waitSyncNamed("app", "waiting for infra", readyFalse(reasonDependencyNotReady,
		"dependency "+f.ns+"/infra is not Ready: "))
	if msg := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady).Message; !strings.Contains(msg, "ConfigMap "+f.ns+"/gate") {
		t.Errorf("the message does not carry the dependency's: %s", msg)
	}
	if stalled(s) || s.Status.LastAppliedRevision != "" || s.Status.LastAttemptedRevision != "" {
		t.Errorf("waiting: stalled %v, lastApplied %q, lastAttempted %q; want not stalled, nothing fetched", stalled(s), s.Status.LastAppliedRevision, s.Status.LastAttemptedRevision)
	}
	f.absent("waiting for infra", "app")

	f.createConfigMap("gate")
	f.waitSyncNamed("infra", "Ready", readyAt(rev))
	f.waitSyncNamed("app", "applied once infra is Ready", readyAt(rev))
	f.present("app applied", "app")

	// infra's next generation waits a minute for gate2: until infra reconciles it, its status
	// says Ready for generation 1, which is not enough; then it is Progressing, not Ready.
	f.updateSync("infra", func(s *v1alpha1.Sync) {
		s.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		s.Spec.HealthChecks = []v1alpha1.HealthCheck{{APIVersion: "v1", Kind: "ConfigMap", Name: "gate2"}}
	})
	rev2 := f.publish(map[string]string{"app/app2.yaml": cmNamed("app2", "NS")})
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Annotations = map[string]string{v1alpha1.RequestedAtAnnotation: "now"}
	})
	s = f.waitSyncNamed("app", "waiting for infra's generation 2", func(s *v1alpha1.Sync) bool {
		return readyFalse(reasonDependencyNotReady, "dependency "+f.ns+"/infra has not reconciled generation 2")(s) ||
			readyFalse(reasonDependencyNotReady, "dependency "+f.ns+"/infra is not Ready: waiting for 1 object")(s)
	})
	if s.Status.LastAppliedRevision != rev {
		t.Errorf("lastAppliedRevision %q while waiting, want %q kept", s.Status.LastAppliedRevision, rev)
	}
	f.absent("waiting for infra's generation 2", "app2")
	f.present("waiting for infra's generation 2 (nothing pruned)", "app")
	f.createConfigMap("gate2")
	f.waitSyncNamed("app", "applied once infra reconciled generation 2", readyAt(rev2))
}

// TestDaemonDependsOnMissing: a dependency that does not exist holds the Sync (Ready=False
// naming it, not Stalled, nothing applied); creating it later lets the Sync go at once.
func TestDaemonDependsOnMissing(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"infra/infra.yaml": cmNamed("infra", "NS"), "app/app.yaml": cmNamed("app", "NS")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn("later"), hourly)
	s := f.waitSyncNamed("app", "waiting for a missing dependency", readyFalse(reasonDependencyNotReady,
		"dependency "+f.ns+"/later not found"))
	if stalled(s) {
		t.Errorf("a missing dependency stalled the Sync; it may be created later")
	}
	f.absent("missing dependency", "app")
	f.createSync(time.Hour, syncNamed("later", "infra"))
	f.waitSyncNamed("app", "applied once the dependency exists and is Ready", readyAt(rev))
}

// TestDaemonDependsOnCycle: a cycle a → b → a, and a Sync depending on itself, are reported
// on every Sync of the cycle, naming the path, Stalled; nothing is fetched, applied or
// pruned (a keeps the objects of its last applied revision, although its next revision
// drops one). Removing one edge lets both go at once.
func TestDaemonDependsOnCycle(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a/a1.yaml": cmNamed("a1", "NS"), "b/b.yaml": cmNamed("bb", "NS"), "c/c.yaml": cmNamed("cc", "NS")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, syncNamed("a", "a"), hourly)
	f.waitSyncNamed("a", "Ready", readyAt(rev1))
	rev2 := f.publish(map[string]string{"a/a1.yaml": "", "a/a2.yaml": cmNamed("a2", "NS")})

	f.updateSync("a", dependsOn("b"))
	f.createSync(time.Hour, syncNamed("b", "b"), dependsOn("a"), hourly)
	f.createSync(time.Hour, syncNamed("c", "c"), dependsOn("c"), hourly)
	ns := f.ns
	s := f.waitSyncNamed("a", "reporting the cycle", both(stalled, readyFalse(reasonDependencyNotReady,
		"dependency cycle: "+ns+"/a → "+ns+"/b → "+ns+"/a")))
	f.waitSyncNamed("b", "reporting the cycle", both(stalled, readyFalse(reasonDependencyNotReady,
		"dependency cycle: "+ns+"/b → "+ns+"/a → "+ns+"/b")))
	f.waitSyncNamed("c", "reporting the self-dependency", both(stalled, readyFalse(reasonDependencyNotReady,
		"dependency cycle: "+ns+"/c → "+ns+"/c")))
	if s.Status.LastAppliedRevision != rev1 {
		t.Errorf("a: lastAppliedRevision %q, want %q kept", s.Status.LastAppliedRevision, rev1)
	}
	f.present("in a cycle (nothing pruned)", "a1")
	f.absent("in a cycle", "a2", "bb", "cc")

	f.updateSync("a", dependsOn())
	f.waitSyncNamed("a", "Ready once the cycle is broken", readyAt(rev2))
	f.waitSyncNamed("b", "Ready once the cycle is broken", readyAt(rev2))
	f.absent("a's next revision", "a1")
}

// TestDaemonDeletionWaitsForDependents: deleting a Sync (deletionPolicy Delete) that another
// Sync depends on deletes nothing while the dependent exists (a condition names it; the
// dependent, whose dependency is being deleted, applies nothing more); once the dependent is
// deleted, the deletion proceeds at once (retry interval an hour: only the watch can trigger
// it). Orphan does not wait. Two Syncs depending on each other, deleted together (as with
// their namespace), are both deleted: no deadlock. Without it, infra was deleted first and its
// ConfigMap went while app still depended on it.
func TestDaemonDeletionWaitsForDependents(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"infra/infra.yaml": cmNamed("infra", "NS"), "app/app.yaml": cmNamed("app", "NS"),
		"o/o.yaml": cmNamed("o", "NS"), "d/d.yaml": cmNamed("d", "NS"), "x/x.yaml": cmNamed("x", "NS"), "y/y.yaml": cmNamed("y", "NS")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, syncNamed("infra", "infra"), hourly)
	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn("infra"), hourly)
	f.waitSyncNamed("app", "Ready", readyAt(rev))

	ctx := context.Background()
	if err := f.c.Delete(ctx, &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "infra"}}); err != nil {
		t.Fatal(err)
	}
	f.waitSyncNamed("infra", "waiting for app", readyFalse(reasonWaitingForDependents,
		"waiting for dependents "+f.ns+"/app to be deleted first"))
	f.waitSyncNamed("app", "waiting: its dependency is being deleted", readyFalse(reasonDependencyNotReady,
		"dependency "+f.ns+"/infra is being deleted"))
	f.present("infra waits for app", "infra", "app")

	f.deleteSync("app", time.Minute)
	f.waitGone("infra", 30*time.Second)
	f.absent("both deleted", "infra", "app")

	// Orphan does not wait.
	f.createSync(time.Hour, syncNamed("o", "o"), hourly, func(s *v1alpha1.Sync) { s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan })
	f.createSync(time.Hour, syncNamed("d", "d"), dependsOn("o"), hourly)
	f.waitSyncNamed("d", "Ready", readyAt(rev))
	f.deleteSync("o", 30*time.Second)
	f.present("Orphan", "o", "d")

	// A cycle deleted together.
	f.createSync(time.Hour, syncNamed("x", "x"), dependsOn("y"), hourly)
	f.createSync(time.Hour, syncNamed("y", "y"), dependsOn("x"), hourly)
	f.waitSyncNamed("y", "reporting the cycle", stalled)
	for _, n := range []string{"x", "y"} {
		if err := f.c.Delete(ctx, &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"x", "y"} {
		f.waitGone(n, 30*time.Second)
	}
}

// TestDaemonCrossNamespaceDependencies: a dependency in another namespace is allowed by
// default (as in Flux) and refused with --no-cross-namespace-refs: the Sync is Stalled with a
// message naming the entry and the flag, nothing fetched or applied.
func TestDaemonCrossNamespaceDependencies(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	rev := f.publish(map[string]string{"infra/infra.yaml": cmNamed("infra", other), "app/app.yaml": cmNamed("app", "NS")})
	stop := f.startStoppableDaemon(env.Config, func(o *Options) { o.NoCrossNamespaceRefs = true; o.test.alsoWatch = []string{other} })
	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn(other+"/infra"), hourly)
	s := f.waitSyncNamed("app", "refusing the cross-namespace dependency", both(stalled, readyFalse(reasonDependencyNotReady,
		"spec.dependsOn[0]: Sync "+other+"/infra is in another namespace: cross-namespace references are refused (converge run --no-cross-namespace-refs)")))
	if s.Status.LastAttemptedRevision != "" {
		t.Errorf("lastAttemptedRevision %q: the refused Sync was fetched", s.Status.LastAttemptedRevision)
	}
	f.absent("refused", "app")

	stop()
	f.startDaemon(env.Config, func(o *Options) { o.test.alsoWatch = []string{other} })
	f.waitSyncNamed("app", "waiting for the missing dependency", readyFalse(reasonDependencyNotReady,
		"dependency "+other+"/infra not found"))
	synctest.Create(t, f.c, synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, syncNamed("infra", "infra")))
	f.waitSyncNamed("app", "applied once the other namespace's dependency is Ready", readyAt(rev))
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: other, Name: "infra"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the dependency's ConfigMap: %v", err)
	}
}

// waitGone waits until Sync name, already being deleted, is gone.
func (f *fixture) waitGone(name string, within time.Duration) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, &v1alpha1.Sync{})), nil
	})
	if err != nil {
		f.t.Fatalf("Sync %s was never finalized within %s", name, within)
	}
}

// TestDaemonDependencyCheckCostsNoRequest: a Sync waiting for a dependency reads it (and
// walks the graph for a cycle) from the manager's cache. When the dependency's message
// changes (a status-only update, by hand here), the dependent is triggered through the index
// and records the new message: the daemon sends no GET or LIST of Syncs, and no write but
// that status patch and its event.
func TestDaemonDependencyCheckCostsNoRequest(t *testing.T) {
	f := newFixture(t)
	f.publish(map[string]string{"app/app.yaml": cmNamed("app", "NS")})
	cfg, ft := fault.Config(env.Config)
	f.startDaemon(cfg)
	f.createSync(time.Hour, syncNamed("infra", "no-such-folder"), hourly)
	f.waitSyncNamed("infra", "failing", func(s *v1alpha1.Sync) bool {
		return s.Status.ObservedGeneration == s.Generation && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn("infra"), hourly)
	f.waitSyncNamed("app", "waiting for infra", readyFalse(reasonDependencyNotReady, "dependency "+f.ns+"/infra is not Ready: "))

	ft.Reset()
	f.updateSyncStatus("infra", func(s *v1alpha1.Sync) {
		meta.SetStatusCondition(&s.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady,
			Status: metav1.ConditionFalse, Reason: "ByHand", Message: "stopped by hand"})
	})
	f.waitSyncNamed("app", "repeating the new message", readyFalse(reasonDependencyNotReady, "is not Ready: stopped by hand"))
	reads := ft.CountResource("get", "syncs", "") + ft.CountResource("list", "syncs", "")
	var writes []string
	for _, w := range ft.Writes() {
		if !strings.Contains(w, "/events") {
			writes = append(writes, w)
		}
	}
	if reads != 0 || len(writes) != 1 || !strings.HasSuffix(writes[0], "/syncs/app/status") {
		t.Errorf("a waiting reconcile sent %d reads of Syncs and writes %q; want none and app's status patch (all: %v)", reads, writes, ft.Counts())
	}
	f.absent("waiting", "app")
}

// TestDependencyMessageAcrossNamespaces: a dependency in another namespace is reported by
// its state alone, never by its Ready message, which may carry another tenant's URLs and
// errors; one in the Sync's own namespace is reported with it. Not found in a sharded
// daemon says that a dependency must be in the same shard. Without it, the message of another
// namespace's Sync was copied into the dependent's status.
func TestDependencyMessageAcrossNamespaces(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	const secret = "https://internal.example/tenant-b.git: authentication required"
	for _, ns := range []string{f.ns, other} {
		s := synctest.NewSync(ns, f.git.RepoURL("app"), time.Hour, syncNamed("infra", "infra"))
		synctest.Create(t, f.c, s)
		s.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "FetchFailed", Message: secret, LastTransitionTime: metav1.Now()}}
		s.Status.ObservedGeneration = s.Generation
		if err := f.c.Status().Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	app := synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Hour, syncNamed("app", "app"))
	d := dependencies{cache: f.c}
	for _, tc := range []struct {
		dep        string
		wantSecret bool
	}{{"infra", true}, {other + "/infra", false}} {
		dependsOn(tc.dep)(app)
		b := d.check(context.Background(), app)
		if b == nil {
			t.Fatalf("%s: no wait for a dependency that is not Ready", tc.dep)
		}
		if strings.Contains(b.message, secret) != tc.wantSecret || !strings.Contains(b.message, "is not Ready") {
			t.Errorf("%s: message %q; want its Ready message shown: %v", tc.dep, b.message, tc.wantSecret)
		}
	}
	dependsOn("missing")(app)
	d.sharded = true
	if b := d.check(context.Background(), app); b == nil || !strings.Contains(b.message, "same shard") {
		t.Errorf("a missing dependency in a sharded daemon: %+v, want a message naming the shard rule", b)
	}
}
