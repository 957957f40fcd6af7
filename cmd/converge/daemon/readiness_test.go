package daemon

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// noNamespace is a ConfigMap without a namespace: it lands in its Sync's.
const noNamespace = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {k: v}\n"

// progressing reports a Sync of its current generation that was applied and waits for its
// objects: Ready=Unknown and Reconciling=True, reason Progressing, naming the Deployment.
func progressing(ns string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		rec := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReconciling)
		return s.Status.ObservedGeneration == s.Generation && r != nil && r.Status == metav1.ConditionUnknown &&
			r.Reason == reasonProgressing && strings.Contains(r.Message, "Deployment "+ns+"/web") &&
			rec != nil && rec.Status == metav1.ConditionTrue
	}
}

// TestDaemonReadinessHoldsNoWorker is I15: with one worker, a Sync whose Deployment never
// becomes ready (timeout 1h) is recorded as Progressing and does not stop a Sync of another
// namespace from being applied.
func TestDaemonReadinessHoldsNoWorker(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	rev := f.publish(map[string]string{"slow/web.yaml": neverReady, "other/cm.yaml": noNamespace})
	f.startDaemon(env.Config, func(o *Options) { o.Concurrency = 1; o.test.alsoWatch = []string{other} })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Path, s.Spec.Timeout = "slow", &metav1.Duration{Duration: time.Hour}
	})
	f.waitSync("Progressing on the never-ready Deployment", progressing(f.ns))

	synctest.Create(t, f.c, synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "other" }))
	synctest.Wait(t, f.c, client.ObjectKey{Namespace: other, Name: "app"}, "Ready while the other waits", readyAt(rev))
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: other, Name: "other"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the other namespace's ConfigMap: %v", err)
	}
	f.waitSync("still Progressing", progressing(f.ns))
}

// TestDaemonReadinessTimeout: the never-ready Sync is Progressing, then HealthCheckFailed
// naming the Deployment once its spec.timeout has passed since it was applied (I6: never
// Ready).
func TestDaemonReadinessTimeout(t *testing.T) {
	f := newFixture(t)
	f.publish(map[string]string{"web.yaml": neverReady})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Second} })
	s := f.waitSync("HealthCheckFailed after the timeout", readyFalse(reasonHealthCheck, "Deployment "+f.ns+"/web InProgress"))
	if r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(r.Message, "spec.timeout (3s)") {
		t.Errorf("Ready message %q does not name the timeout", r.Message)
	}
	if meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReconciling) != nil {
		t.Errorf("Reconciling kept after the timeout: %+v", s.Status.Conditions)
	}
	if s.Status.LastAppliedRevision != "" {
		t.Errorf("lastAppliedRevision %q for a revision whose objects never became ready (I6)", s.Status.LastAppliedRevision)
	}
}

// TestDaemonReplacedWhileWaiting: a Sync deleted while it waits for a never-ready Deployment
// (timeout 1h) is finalized at once, and a Sync re-created under its name converges without
// waiting out the old one's timeout.
func TestDaemonReplacedWhileWaiting(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"old/web.yaml": neverReady, "new/b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Path, s.Spec.Timeout = "old", &metav1.Duration{Duration: time.Hour}
	})
	f.waitSync("Progressing", progressing(f.ns))
	f.deleteSync("app", time.Minute)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "new" })
	f.waitSync("Ready at the re-created Sync", readyAt(rev))
}

// TestDaemonWaitingWritesOnce is I7 while waiting: the Progressing status is written once;
// the reconciles that judge readiness again and find the same objects pending write nothing.
func TestDaemonWaitingWritesOnce(t *testing.T) {
	f := newFixture(t)
	f.publish(map[string]string{"web.yaml": neverReady})
	var judged atomic.Int32
	f.startDaemon(env.Config, func(o *Options) {
		o.test.crash.BeforeStatusWrite = func(*v1alpha1.Sync) error { judged.Add(1); return nil }
	})
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Timeout = &metav1.Duration{Duration: time.Hour} })
	s := f.waitSync("Progressing", progressing(f.ns))
	from := judged.Load()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return judged.Load() >= from+3, nil
	})
	if err != nil {
		t.Fatalf("readiness was judged %d more times, want 3: no poll", judged.Load()-from)
	}
	after := &v1alpha1.Sync{}
	if err := f.c.Get(context.Background(), client.ObjectKeyFromObject(s), after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != s.ResourceVersion {
		t.Errorf("the Sync changed while waiting (resourceVersion %s → %s): status %+v", s.ResourceVersion, after.ResourceVersion, after.Status)
	}
}
