package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/checker"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/fault"
)

// pausedObjects is the size of the set: enough for a reconcile to be caught mid-apply.
const pausedObjects = 60

// TestBinaryPausedLeaderIsFenced is S03 with a paused old leader: leader A (through the fault
// proxy, its applies slowed) is stopped with SIGSTOP in the middle of applying revision 2;
// follower B takes over and makes the Sync Ready at revision 3; then A resumes with the rest
// of its revision-2 reconcile planned, and its elector slowed to learn that it lost the
// lease. A must send no write at all after the pause (no revision-2 object over B's revision
// 3, no status going back: I5, I1, I2) and exit. The checker follows the whole run.
func TestBinaryPausedLeaderIsFenced(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	ns := env.Namespace(t)
	proxy, viaProxy := startProxy(t)
	repo := newRepo(t, ns)
	c := directClient(t)
	chk, err := checker.Start(ctx, env.Config, checker.ForSync(ns, "app"))
	if err != nil {
		t.Fatal(err)
	}
	version := func(v string) map[string]string {
		m := map[string]string{}
		for i := range pausedObjects {
			m[fmt.Sprintf("cm-%02d", i)] = v
		}
		return m
	}
	args := func(kubeconfig string) []string {
		return []string{"run", "--kubeconfig", kubeconfig, "-n", ns, "--watch-namespace", ns,
			"--git-url", repo.srv.RepoURL("app"), "--ref", "main", "--path", ".", "--name", "app", "--interval", "2s",
			"--leader-election-namespace", ns, "--leader-election-lease-duration", "4s",
			"--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms",
			"--concurrent", "1", "--metrics-addr", "0", "--health-addr", cluster.FreeAddr(), "--git-cache-dir", t.TempDir(), "--allow-local-git"}
	}

	rev1 := repo.publish(version("1"))
	a := binary.Start(t, args(viaProxy)...)
	waitSyncReady(t, c, ns, rev1)
	b := binary.Start(t, args(env.Kubeconfig)...)

	// A applies revision 2 slowly; stop it half-way.
	proxy.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Latency: 150 * time.Millisecond})
	repo.publish(version("2"))
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n := countVersion(ctx, c, ns, "2")
		return n >= 5 && n < pausedObjects-10, nil
	})
	if err != nil {
		t.Fatalf("never caught leader A in the middle of revision 2: %v", err)
	}
	if err := a.Pause(); err != nil {
		t.Fatal(err)
	}
	paused := countVersion(ctx, c, ns, "2")

	rev3 := repo.publish(version("3"))
	waitSyncReady(t, c, ns, rev3) // B took over
	checkLive(t, c, ns, version("3"))

	// A resumes; its elector learns late that it lost the lease (slow lease reads).
	proxy.SetRules(fault.Rule{Resource: "leases", Latency: 3 * time.Second})
	proxy.Reset()
	before := configMapVersions(ctx, t, c, ns) // B has converged: it writes nothing more (I7)
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the paused leader did not exit after it resumed")
	}
	if w := landed(t, proxy, landedOptions{}); len(w) != 0 {
		t.Errorf("writes of the paused leader landed after it resumed (%d revision-2 objects written before the pause): %v", paused, w)
	}
	// The API server's word: a write the proxy saw cancelled may still have committed.
	unchangedConfigMaps(ctx, t, c, ns, before)
	if !strings.Contains(a.Log(), "fenced") {
		t.Errorf("the paused leader's log does not say it was fenced:\n%s", tail(a.Log(), 2000))
	}
	waitSyncReady(t, c, ns, rev3)
	checkLive(t, c, ns, version("3"))
	if err := chk.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	report, err := chk.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range report.Violations {
		t.Errorf("%s", v)
	}
	if n := strings.Count(b.Log(), `"reconciled"`); n == 0 {
		t.Error("the follower never reconciled")
	}
}

// landedOptions say which of a proxy's writes landed reads.
type landedOptions struct {
	// From is the index in the proxy's TimedWrites of the first write to read: the writes
	// before it (sent before the pause) are not the fence's.
	From int
	// Ignore, when set, leaves out a write by its request ("VERB /path"): one the test
	// allows after the resume (a sharded replica's Lease requests).
	Ignore func(request string) bool
}

// landed lists the writes of proxy (from opts.From) that landed: answered 2xx by the API
// server, or still pending after a bounded wait (one might land yet). That is the
// statement of the pause fence: no write of the paused process lands after it resumed. The
// proxy also lists a write a worker had already passed through the fence's first check when
// SIGSTOP came: the process put nothing on the wire while stopped, so it reaches the proxy
// after the resume, where the fence's check at the body cuts it (or the fenced process,
// stopping, cancels it). Those are logged; whether one committed all the same is the API
// server's to say (the tests compare resourceVersions: configMapVersions).
func landed(t *testing.T, proxy *fault.Proxy, opts landedOptions) []string {
	t.Helper()
	var ws []fault.TimedWrite
	_ = wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ws = proxy.TimedWrites()[opts.From:]
		for _, w := range ws {
			if w.End.IsZero() {
				return false, nil
			}
		}
		return true, nil
	})
	var out []string
	for _, w := range ws {
		if opts.Ignore != nil && opts.Ignore(w.Request) {
			t.Logf("after resuming, the paused process sent %s (allowed): %s", w.Request, w.Result)
			continue
		}
		if code, err := strconv.Atoi(w.Result); err == nil && code >= 200 && code < 300 {
			out = append(out, w.Request+": "+w.Result)
			continue
		}
		if w.End.IsZero() {
			out = append(out, w.Request+": still pending")
			continue
		}
		t.Logf("after resuming, the paused process sent %s, which did not land: %s", w.Request, w.Result)
	}
	return out
}

// unchangedConfigMaps fails t for every ConfigMap of ns whose resourceVersion differs from
// before (configMapVersions), or that is gone: the API server's word on writes a proxy saw
// cut or cancelled, which may still have committed.
func unchangedConfigMaps(ctx context.Context, t *testing.T, c client.Client, ns string, before map[string]string) {
	t.Helper()
	after := configMapVersions(ctx, t, c, ns)
	for name, rv := range after {
		if before[name] != rv {
			t.Errorf("ConfigMap %s changed after the paused process resumed (resourceVersion %q, then %q)", name, before[name], rv)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			t.Errorf("ConfigMap %s was deleted after the paused process resumed", name)
		}
	}
}

// configMapVersions maps the name of every ConfigMap of ns (the objects and the inventory)
// to its resourceVersion.
func configMapVersions(ctx context.Context, t *testing.T, c client.Client, ns string) map[string]string {
	t.Helper()
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range cms.Items {
		out[cm.Name] = cm.ResourceVersion
	}
	return out
}

// countVersion counts the ConfigMaps of ns at data.version v.
func countVersion(ctx context.Context, c client.Client, ns, v string) int {
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms, client.InNamespace(ns)); err != nil {
		return 0
	}
	n := 0
	for _, cm := range cms.Items {
		if cm.Data["version"] == v {
			n++
		}
	}
	return n
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
