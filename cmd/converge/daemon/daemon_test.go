package daemon

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/webhook"
	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	serveRenderChild()            // renders are isolated: this binary serves as their child
	sopsfixture.ServeDecryption() // and as the SOPS decryption program
	cluster.Main(m, cluster.API, &env)
}

// fixture is one namespace, a git server with a repository "app", and a client.
type fixture struct {
	t   *testing.T
	ns  string
	git *gitserver.Server
	c   client.Client
	src string // working folder published as "app"
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cluster.Require(t, env)
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ns: env.Namespace(t), git: srv, c: c, src: t.TempDir()}
}

// publish writes files (name → content, "" deletes) into the source folder and commits it.
func (f *fixture) publish(files map[string]string) string {
	f.t.Helper()
	return synctest.Publish(f.t, f.git, f.src, f.ns, files)
}

// startDaemon runs the daemon in-process against cfg, reconciling only the fixture's
// namespace, until the test ends.
func (f *fixture) startDaemon(cfg *rest.Config, mutate ...func(*Options)) {
	f.t.Helper()
	f.startStoppableDaemon(cfg, mutate...)
}

func (f *fixture) createSync(interval time.Duration, mutate ...func(*v1alpha1.Sync)) *v1alpha1.Sync {
	f.t.Helper()
	s := synctest.NewSync(f.ns, f.git.RepoURL("app"), interval, mutate...)
	synctest.Create(f.t, f.c, s)
	return s
}

// waitSync polls the Sync until cond holds, failing with the last status otherwise.
func (f *fixture) waitSync(what string, cond func(*v1alpha1.Sync) bool) *v1alpha1.Sync {
	f.t.Helper()
	return synctest.Wait(f.t, f.c, client.ObjectKey{Namespace: f.ns, Name: "app"}, what, cond)
}

var readyAt = synctest.ReadyAt

func (f *fixture) configMap(name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, cm)
	return cm, err
}

// updateSync re-reads Sync name, applies mutate and updates it, again on every conflict (the
// daemon writes the Sync too).
func (f *fixture) updateSync(name string, mutate func(*v1alpha1.Sync)) {
	f.t.Helper()
	f.retryWrite(name, mutate, func(ctx context.Context, s *v1alpha1.Sync) error { return f.c.Update(ctx, s) })
}

// updateSyncStatus is updateSync on the status subresource, as a user or another tool
// writes it.
func (f *fixture) updateSyncStatus(name string, mutate func(*v1alpha1.Sync)) {
	f.t.Helper()
	f.retryWrite(name, mutate, func(ctx context.Context, s *v1alpha1.Sync) error { return f.c.Status().Update(ctx, s) })
}

func (f *fixture) retryWrite(name string, mutate func(*v1alpha1.Sync), write func(context.Context, *v1alpha1.Sync) error) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur := &v1alpha1.Sync{}
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, cur); err != nil {
			return false, err
		}
		mutate(cur)
		err := write(ctx, cur)
		return err == nil, ignoreConflict(err)
	})
	if err != nil {
		f.t.Fatalf("update Sync %s: %v", name, err)
	}
}

func ignoreConflict(err error) error {
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

const cmA, cmB = synctest.ConfigMapA, synctest.ConfigMapB

// TestDaemonAppliesPrunesRevertsAndRecovers runs the daemon through a first commit, a change
// that removes a file, an out-of-band edit, a broken commit and a fix (I4, I6, I7, I8).
func TestDaemonAppliesPrunesRevertsAndRecovers(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(2 * time.Second)
	s := f.waitSync("Ready at the first commit", readyAt(rev1))
	if s.Status.Summary == nil || s.Status.Inventory == nil || s.Status.Inventory.Entries != 2 {
		t.Errorf("summary %+v, inventory %+v; want 2 inventory entries", s.Status.Summary, s.Status.Inventory)
	}

	// A new commit changes a and removes b: b is pruned.
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "2", 1), "b.yaml": ""})
	f.waitSync("Ready at the second commit", readyAt(rev2))
	if cm, err := f.configMap("a"); err != nil || cm.Data["version"] != "2" {
		t.Errorf("configmap a = %v, %v; want version 2", cm.Data, err)
	}
	if _, err := f.configMap("b"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap b was not pruned: %v", err)
	}

	// Someone edits a managed field by hand: the next resync reverts it.
	cm, err := f.configMap("a")
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["version"] = "edited"
	if err := f.c.Update(context.Background(), cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		cm, err := f.configMap("a")
		return err == nil && cm.Data["version"] == "2", nil
	})
	if err != nil {
		t.Errorf("out-of-band edit was not reverted: %v", err)
	}

	// A broken commit: Ready=False naming the file, nothing applied or pruned.
	rev3 := f.publish(map[string]string{"a.yaml": "", "bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: x}\n"})
	s = f.waitSync("Ready=False on the broken commit", func(s *v1alpha1.Sync) bool {
		return s.Status.LastAttemptedRevision == rev3 && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionReady)
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready.Reason != reasonBuildFailed || !strings.Contains(ready.Message, "bad.yaml") {
		t.Errorf("Ready = %s %q, want %s naming bad.yaml", ready.Reason, ready.Message, reasonBuildFailed)
	}
	if s.Status.LastAppliedRevision != rev2 || s.Status.ObservedGeneration != s.Generation {
		t.Errorf("lastAppliedRevision %s (want %s), observedGeneration %d of %d", s.Status.LastAppliedRevision, rev2, s.Status.ObservedGeneration, s.Generation)
	}
	if _, err := f.configMap("a"); err != nil {
		t.Errorf("a broken commit pruned configmap a: %v", err)
	}

	// The next good commit recovers.
	rev4 := f.publish(map[string]string{"bad.yaml": "", "a.yaml": strings.Replace(cmA, "VERSION", "4", 1)})
	f.waitSync("Ready after the fix", readyAt(rev4))
}

// TestDaemonStatusSurvivesConflicts is S01 through the daemon: the first five status writes
// get 409 and the spec changes mid-way; observedGeneration still reaches generation (I4, I10).
func TestDaemonStatusSurvivesConflicts(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	cfg, ft := fault.Config(env.Config)
	ft.SetRules(fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 5, Status: 409})
	f.startDaemon(cfg)
	f.createSync(time.Minute)
	f.waitSync("Ready despite conflicts", readyAt(rev))
	if ft.Injected() != 5 {
		t.Errorf("injected %d conflicts, want 5", ft.Injected())
	}

	ft.SetRules(fault.Rule{Verb: "patch", Resource: "syncs", Subresource: "status", Times: 7, Status: 409})
	s := &v1alpha1.Sync{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app"}, s); err != nil {
		t.Fatal(err)
	}
	s.Spec.Interval = metav1.Duration{Duration: 50 * time.Second}
	if err := f.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	f.waitSync("observing the new generation", func(got *v1alpha1.Sync) bool {
		return got.Generation == s.Generation && readyAt(rev)(got)
	})
}

// TestDaemonWebhookTriggersReconcile checks a signed push webhook makes a new commit land at
// once although the interval is an hour, the request is mirrored to lastHandledRequest, and an
// unsigned or wrongly signed request is refused. The secret is the Sync's own
// (spec.webhook.secretRef); daemon/webhook's tests cover the tenant cases.
func TestDaemonWebhookTriggersReconcile(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"b.yaml": cmB})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "app-webhook", Namespace: f.ns},
		StringData: map[string]string{webhook.TokenKey: "s3cret\n"}}
	if err := f.c.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	addr := cluster.FreeAddr()
	f.startDaemon(env.Config, func(o *Options) { o.WebhookAddr = addr })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) {
		s.Spec.Webhook = &v1alpha1.Webhook{SecretRef: v1alpha1.LocalObjectReference{Name: secret.Name}}
	})
	f.waitSync("Ready at the first commit", readyAt(rev1))

	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	url := "http://" + addr + "/hooks/" + f.ns + "/app"
	body := []byte(`{"ref":"refs/heads/main"}`)
	for _, tc := range []struct {
		name, header, value string
		want                int
	}{
		{"unsigned", "", "", http.StatusUnauthorized},
		{"wrong signature", "X-Hub-Signature-256", "sha256=" + sign([]byte("wrong"), body), http.StatusUnauthorized},
		{"wrong gitlab token", "X-Gitlab-Token", "nope", http.StatusUnauthorized},
		{"github signature", "X-Hub-Signature-256", "sha256=" + sign([]byte("s3cret"), body), http.StatusAccepted},
	} {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if tc.header != "" {
			req.Header.Set(tc.header, tc.value)
		}
		var resp *http.Response
		err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			var err error
			resp, err = http.DefaultClient.Do(req.Clone(context.Background()))
			if err == nil {
				req.Body = io.NopCloser(bytes.NewReader(body))
			}
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("%s: webhook unreachable: %v", tc.name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	s := f.waitSync("Ready at the pushed commit", readyAt(rev2))
	if s.Status.LastHandledRequest == "" || s.Status.LastHandledRequest != s.Annotations[v1alpha1.RequestedAtAnnotation] {
		t.Errorf("lastHandledRequest %q, annotation %q", s.Status.LastHandledRequest, s.Annotations[v1alpha1.RequestedAtAnnotation])
	}
}

func sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// TestDaemonLeaderElection runs two daemons: exactly one reconciles; stopping it hands over
// and the other applies the next commit (S03 safety: only one writer at a time).
func TestDaemonLeaderElection(t *testing.T) {
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"b.yaml": cmB})
	leaderOpts := func(o *Options) { o.LeaderElect, o.LeaderNamespace = true, f.ns }
	cfgA, ftA := fault.Config(env.Config)
	cfgB, ftB := fault.Config(env.Config)
	stopA := f.startStoppableDaemon(cfgA, leaderOpts)
	f.createSync(2 * time.Second)
	f.waitSync("Ready under daemon A", readyAt(rev1))
	f.startDaemon(cfgB, leaderOpts)
	// Let B run a while: as a follower it must not write any Sync status.
	rev2 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.waitSync("Ready at the second commit", readyAt(rev2))
	if n := ftB.CountResource("patch", "syncs", ""); n != 0 {
		t.Errorf("the follower sent %d patches while A led", n)
	}
	if ftA.CountResource("patch", "syncs", "") == 0 {
		t.Errorf("the leader sent no patch")
	}

	stopA()
	rev3 := f.publish(map[string]string{"a.yaml": strings.Replace(cmA, "VERSION", "3", 1)})
	f.waitSync("Ready at the third commit after the handover", readyAt(rev3))
	if ftB.CountResource("patch", "syncs", "") == 0 {
		t.Errorf("daemon B never wrote after taking over")
	}
}

// startStoppableDaemon is startDaemon with an explicit stop (it waits for the exit).
func (f *fixture) startStoppableDaemon(cfg *rest.Config, mutate ...func(*Options)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o := Options{MetricsAddr: "0", HealthAddr: "0", InstallCRD: true, WatchCache: true, DriftReconcile: true, WatchNamespace: f.ns, Concurrency: 2, CacheDir: f.t.TempDir(),
		QuickStart:    QuickStart{Namespace: f.ns},
		AllowLocalGit: true} // the fixture's git server listens on loopback
	for _, m := range mutate {
		m(&o)
	}
	go func() { done <- Run(ctx, cfg, o) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			f.t.Errorf("daemon: %v", err)
		}
	}
	f.t.Cleanup(stop)
	return stop
}

// TestDaemonDeletionPolicy deletes Syncs: with Delete their objects and inventory go, then the
// finalizer; with Orphan the objects stay (I12).
func TestDaemonDeletionPolicy(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	s := f.createSync(time.Minute)
	f.waitSync("Ready", readyAt(rev))

	for _, policy := range []string{v1alpha1.DeletionPolicyOrphan, v1alpha1.DeletionPolicyDelete} {
		if policy == v1alpha1.DeletionPolicyDelete {
			s = f.createSync(time.Minute)
			f.waitSync("Ready again", readyAt(rev))
		}
		f.setDeletionPolicy(s.Name, policy)
		f.deleteSync(s.Name, time.Minute)
		_, err := f.configMap("b")
		switch {
		case policy == v1alpha1.DeletionPolicyOrphan && err != nil:
			t.Errorf("Orphan: configmap b is gone: %v", err)
		case policy == v1alpha1.DeletionPolicyDelete && !apierrors.IsNotFound(err):
			t.Errorf("Delete: configmap b survived: %v", err)
		}
	}
	if _, err := f.configMap("app-inventory"); !apierrors.IsNotFound(err) {
		t.Errorf("the inventory ConfigMap survived the Delete policy: %v", err)
	}
}
