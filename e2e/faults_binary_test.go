package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/checker"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// faultSchedule is S13 and S14 for the binary, in three phases counted from the moment it is
// installed: a blackhole on the whole API server; then watches expired with 410, failing with
// 503 or broken, lists failing with 503 (client-go relists with a watch, so both count as
// relists), 429 with Retry-After on 30% of requests and latency on some; then only the
// daemon's watches of ConfigMaps frozen, so its watch cache is stale while it applies and
// prunes.
const (
	blackholeFor = 8 * time.Second
	errorsFor    = 12 * time.Second
	frozenFor    = 6 * time.Second
)

func faultSchedule() []fault.Rule {
	after := blackholeFor
	return []fault.Rule{
		{Blackhole: true, For: blackholeFor},
		{Verb: "watch", ExpireWatch: true, Probability: 0.3, After: after, For: errorsFor},
		{Verb: "watch", Status: http.StatusServiceUnavailable, Probability: 0.3, After: after, For: errorsFor},
		{Verb: "watch", CloseAfter: 2 * time.Second, After: after, For: errorsFor},
		{Verb: "list", Status: http.StatusServiceUnavailable, Probability: 0.5, After: after, For: errorsFor},
		{Status: http.StatusTooManyRequests, Probability: 0.3, After: after, For: errorsFor},
		{Latency: 300 * time.Millisecond, Probability: 0.3, After: after, For: errorsFor},
		{Verb: "watch", Resource: "configmaps", FreezeWatch: true, After: after + errorsFor, For: frozenFor},
	}
}

// TestBinaryConvergesThroughAPIFaults runs the built binary against the API server through
// the fault proxy (S13, S14, and a stale watch cache). While a Sync is Ready, the repository
// moves on (an object dropped, one added) as the API server is blackholed for 8 s; 12 s of
// expired, failing and broken watches, 503 relists, 429s with Retry-After and latency follow;
// the repository moves on again as the daemon's ConfigMap watches are frozen for 6 s. An
// independent checker follows the namespace all along: nothing is deleted that was not ours
// and inventoried with its UID (I1), every live object carrying our owner annotation is
// inventoried at every resourceVersion (I2), status never goes back (I5). Once the faults
// stop: the Sync is Ready at the last revision with observedGeneration == generation (I4,
// I6), live state is the desired state and two look-alikes not owned by the Sync survive (I7,
// I1), the daemon is still up, no object is written again, and within the informers' relist
// back-off two consecutive reconciles write nothing (I7).
func TestBinaryConvergesThroughAPIFaults(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	proxy, kubeconfig := startProxy(t)
	repo := newRepo(t, ns)
	c := directClient(t)
	for name, owner := range map[string]string{"lookalike-other-sync": ns + "_other", "lookalike-unowned": ""} {
		lookalike := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "demo"}}}
		if owner != "" {
			lookalike.Annotations = map[string]string{checker.OwnerAnnotation: owner}
		}
		if err := c.Create(ctx, lookalike); err != nil {
			t.Fatal(err)
		}
	}
	chk, err := checker.Start(ctx, env.Config, checker.ForSync(ns, "app"))
	if err != nil {
		t.Fatal(err)
	}

	rev1 := repo.publish(map[string]string{"a": "1", "b": "1", "c": "1"})
	health := cluster.FreeAddr()
	daemon := binary.Start(t, "run", "--kubeconfig", kubeconfig, "-n", ns, "--watch-namespace", ns,
		"--git-url", repo.srv.RepoURL("app"), "--ref", "main", "--path", ".", "--name", "app", "--interval", "2s",
		"--leader-elect=false", "--metrics-addr", "0", "--health-addr", health, "--git-cache-dir", t.TempDir(), "--allow-local-git")
	start := time.Now()
	waitSyncReady(t, c, ns, rev1)
	t.Logf("%s: Ready at the first revision", time.Since(start).Round(time.Millisecond))

	proxy.Seed(14)
	proxy.SetRules(faultSchedule()...)
	end := time.Now().Add(blackholeFor + errorsFor + frozenFor)
	repo.publish(map[string]string{"a": "2", "c": "2", "d": "2"})         // b leaves, during the blackhole
	time.Sleep(blackholeFor + errorsFor + time.Second)                    // pacing the scenario, not a timing assertion
	rev3 := repo.publish(map[string]string{"a": "3", "d": "3", "e": "3"}) // c leaves, on a frozen cache
	time.Sleep(time.Until(end))
	proxy.SetRules()
	faults := proxy.Faults()
	t.Logf("faults injected: %v", faults)
	if faults["blackhole"] == 0 || faults["status 429"] == 0 {
		t.Fatalf("the fault schedule did not run: %v", faults)
	}

	waitSyncReady(t, c, ns, rev3)
	t.Logf("%s: Ready at the last revision, %s after the faults stopped", time.Since(start).Round(time.Millisecond), time.Since(end).Round(time.Millisecond))
	checkLive(t, c, ns, map[string]string{"a": "3", "b": "", "c": "", "d": "3", "e": "3"})
	for _, name := range []string{"lookalike-other-sync", "lookalike-unowned"} {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{}); err != nil {
			t.Errorf("I1: look-alike %s: %v", name, err)
		}
	}
	checkHealthy(t, health)
	checkQuiescent(t, proxy, daemon)

	report, err := chk.Stop(ctx)
	if err != nil {
		t.Fatalf("checker: %v", err)
	}
	for _, v := range report.Violations {
		t.Errorf("checker: %s", v)
	}
	if report.Gone < 2 {
		t.Errorf("the checker saw %d objects go away, want at least the two prunes: it did not follow the run", report.Gone)
	}
}

// repo is a git repository of ConfigMaps named by key, data.version the value.
type repo struct {
	t   *testing.T
	ns  string
	srv *gitserver.Server
	dir string
}

// startProxy starts the fault proxy in front of the test API server for the rest of the test
// and writes a kubeconfig that goes through it.
func startProxy(t *testing.T) (*fault.Proxy, string) {
	t.Helper()
	proxy, err := fault.NewProxy(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := proxy.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return proxy, kubeconfig
}

func newRepo(t *testing.T, ns string) *repo {
	t.Helper()
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &repo{t: t, ns: ns, srv: srv, dir: t.TempDir()}
}

// publish commits exactly the ConfigMaps of versions and returns the revision.
func (r *repo) publish(versions map[string]string) string {
	r.t.Helper()
	if err := os.RemoveAll(r.dir); err != nil {
		r.t.Fatal(err)
	}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		r.t.Fatal(err)
	}
	var msg []string
	for name, v := range versions {
		cm := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s, labels: {app: demo}}\ndata: {version: %q}\n", name, r.ns, v)
		if err := os.WriteFile(filepath.Join(r.dir, name+".yaml"), []byte(cm), 0o644); err != nil {
			r.t.Fatal(err)
		}
		msg = append(msg, name+"="+v)
	}
	sha, err := r.srv.Publish("app", "main", r.dir, strings.Join(msg, " "))
	if err != nil {
		r.t.Fatal(err)
	}
	return "main@sha1:" + sha
}

// directClient is an uncached client straight to the API server, never through the proxy.
func directClient(t *testing.T) client.Client { return env.Client(t, v1alpha1.AddToScheme) }

// waitSyncReady waits up to 90 s for the Sync "app" to be Ready at rev for its generation.
func waitSyncReady(t *testing.T, c client.Client, ns, rev string) {
	t.Helper()
	s := &v1alpha1.Sync{}
	err := wait.PollUntilContextTimeout(t.Context(), 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, s); err != nil {
			return false, nil
		}
		return s.Status.ObservedGeneration == s.Generation && s.Status.LastAppliedRevision == rev &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionReady), nil
	})
	if err != nil {
		t.Fatalf("Sync never Ready at %s: generation %d, status %+v", rev, s.Generation, s.Status)
	}
}

// checkLive checks each ConfigMap has data.version as given, or is gone when it is "" (I7).
func checkLive(t *testing.T, c client.Client, ns string, versions map[string]string) {
	t.Helper()
	for name, want := range versions {
		cm := &corev1.ConfigMap{}
		err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cm)
		switch {
		case want == "" && !apierrors.IsNotFound(err):
			t.Errorf("I7: %s left the repository but was not pruned (err %v)", name, err)
		case want != "" && (err != nil || cm.Data["version"] != want):
			t.Errorf("I7: %s: version %q (err %v), want %q", name, cm.Data["version"], err, want)
		}
	}
}

// checkHealthy checks the daemon's /healthz answers.
func checkHealthy(t *testing.T, addr string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("the daemon did not survive the faults: /healthz %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz answered %d after the faults", resp.StatusCode)
	}
}

// checkQuiescent is I7's quiescence for a converged daemon: from now on no object is written
// through the proxy, and within a bound (the informers' relist back-off after faults, at most
// 30 s) two consecutive reconciles send no write at all. Status writes before that are logged.
func checkQuiescent(t *testing.T, proxy *fault.Proxy, daemon *binary.Process) {
	t.Helper()
	reconciles := func() int { return strings.Count(daemon.Log(), `"reconciled"`) }
	proxy.Reset()
	quiet := false
	for deadline := time.Now().Add(45 * time.Second); !quiet && time.Now().Before(deadline); {
		mark, before := len(proxy.Writes()), reconciles()
		err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return reconciles() >= before+2, nil
		})
		if err != nil {
			t.Fatalf("no two reconciles after convergence: %v", err)
		}
		quiet = len(proxy.Writes()) == mark
	}
	writes := proxy.WriteResults()
	for _, w := range writes {
		if !strings.Contains(w, "/syncs/app/status:") {
			t.Errorf("I7: a write after convergence: %s", w)
		}
	}
	if !quiet {
		t.Errorf("I7: no two consecutive reconciles without writes within 45 s of convergence: %v", writes)
	}
	t.Logf("status writes after convergence, before quiescence: %v", writes)
}
