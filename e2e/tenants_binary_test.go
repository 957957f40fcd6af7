package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// deploymentMemoryLimit is the shipped Deployment's memory limit (deploy/manager).
const deploymentMemoryLimit = 512 << 20

// hostileTenant is one attack: a repository (or a server) and the Sync that reads it, and
// what its Ready condition must say once the daemon refused it.
type hostileTenant struct {
	name string
	// files make the repository's one commit (path → content), unless url names a server.
	files map[string]string
	// zeros are files of that many zero bytes, beside files.
	zeros map[string]int64
	url   string
	spec  func(*v1alpha1.SyncSpec)
	// reasons are the Ready=False reasons accepted; words must all appear in the message
	// (the limit that was hit). Empty reasons: the Sync must only not be Ready.
	reasons []string
	words   []string
}

// TestBinaryHostileTenantsUnderMemoryLimit runs the built daemon in a memory cgroup of the
// shipped Deployment's limit (512 MiB, the daemon and every render child charged together),
// with every known attack of a tenant at once in one namespace, and a healthy tenant in
// another (I15). The daemon is never killed or restarted, each healthy commit is applied
// (its time is logged: figures belong in the benchmark), and every hostile Sync ends Ready=False
// with a reason naming the bound it hit; nothing of the healthy tenant waits for them.
func TestBinaryHostileTenantsUnderMemoryLimit(t *testing.T) {
	cluster.Require(t, env)
	cg := binary.NewCgroup(t, deploymentMemoryLimit)
	healthyNS, hostileNS := env.Namespace(t), env.Namespace(t)
	c := directClient(t)
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	selector := "converge-e2e/tenants=" + hostileNS

	health, webhook := cluster.FreeAddr(), cluster.FreeAddr()
	daemon := binary.StartIn(t, cg, "run", "--kubeconfig", env.Kubeconfig, "--watch-label-selector", selector,
		"--leader-election-namespace", hostileNS, "--metrics-addr", "0", "--health-addr", health,
		"--webhook-addr", webhook, "--git-cache-dir", t.TempDir(), "--allow-local-git")
	tenants := hostileTenants(t, hostileNS)
	for _, h := range tenants {
		url := h.url
		if url == "" {
			publishFiles(t, srv, h.name, h.files, h.zeros)
			url = srv.RepoURL(h.name)
		}
		createSync(t, c, hostileNS, h.name, selector, url, h.spec)
	}
	alive := func() {
		t.Helper()
		select {
		case <-daemon.Done():
			t.Fatalf("I15: the daemon died (cgroup peak %d MiB, OOM kills %d)", cg.Peak()>>20, cg.OOMKills())
		default:
		}
	}

	healthy := &repo{t: t, ns: healthyNS, srv: srv, dir: t.TempDir()}
	rev := healthy.publishAs("healthy", map[string]string{"a": "1"})
	createSync(t, c, healthyNS, "app", selector, srv.RepoURL("healthy"), nil)
	for i := 1; i <= 3; i++ {
		if i == 2 {
			holdConnections(t, webhook, 300) // the daemon serves by now
		}
		if i > 1 {
			rev = healthy.publishAs("healthy", map[string]string{"a": fmt.Sprint(i), "b": fmt.Sprint(i)})
			requestReconcile(t, c, healthyNS, "app")
		}
		start := time.Now()
		waitSyncReady(t, c, healthyNS, rev)
		alive()
		t.Logf("healthy commit %d applied %v after it was requested, under %d hostile Syncs", i, time.Since(start).Round(100*time.Millisecond), len(tenants))
	}

	for _, h := range tenants {
		checkRefused(t, c, hostileNS, h)
		alive()
	}
	checkHealthy(t, health)
	if n := cg.OOMKills(); n != 0 {
		t.Errorf("I15: the kernel OOM-killed %d processes of the daemon's tree (peak %d MiB of %d MiB): a render or fetch must fail by its own limit first",
			n, cg.Peak()>>20, deploymentMemoryLimit>>20)
	}
	t.Logf("the daemon's process tree peaked at %d MiB (limit %d MiB)", cg.Peak()>>20, deploymentMemoryLimit>>20)
}

// hostileTenants are the attacks of a repository and a Sync, each in its own repository.
func hostileTenants(t *testing.T, ns string) []hostileTenant {
	cm := func(name string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {a: b}\n", name, ns)
	}
	eightMB := strings.Repeat("x", 8_000_000)
	var generators strings.Builder
	generators.WriteString("resources: [cm.yaml]\nconfigMapGenerator:\n")
	for i := range 28 {
		fmt.Fprintf(&generators, "- name: g%d\n  files: [big.txt]\n", i)
	}
	return []hostileTenant{
		{name: "aliases", files: map[string]string{"cm.yaml": aliasBomb(ns)},
			reasons: []string{"BuildFailed"}, words: []string{"alias"}},
		{name: "generators", files: map[string]string{"kustomization.yaml": generators.String(), "cm.yaml": cm("g"), "big.txt": eightMB},
			reasons: []string{"BuildFailed"}, words: []string{"limit"}},
		{name: "anchors", files: map[string]string{"kustomization.yaml": "resources: [cm.yaml]\n", "cm.yaml": nestedAnchors(ns)},
			reasons: []string{"BuildFailed"}, words: []string{"limit"}},
		{name: "substitution", files: map[string]string{"cm.yaml": substitutionBomb(ns)},
			spec: func(s *v1alpha1.SyncSpec) {
				s.PostBuild = &v1alpha1.PostBuild{Substitute: map[string]string{"big": strings.Repeat("y", 500_000)}}
			},
			reasons: []string{"BuildFailed"}, words: []string{"limit"}},
		{name: "chart-loop", files: map[string]string{"Chart.yaml": "apiVersion: v2\nname: loop\nversion: 1.0.0\n",
			"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: loop}\ndata:\n  a: \"{{ range until 100000000 }}0123456789{{ end }}\"\n"},
			spec:    func(s *v1alpha1.SyncSpec) { s.Source.Helm = &v1alpha1.HelmSource{} },
			reasons: []string{"BuildFailed"}, words: []string{"--render-memory-limit"}},
		{name: "blob", files: map[string]string{"cm.yaml": cm("blob")}, zeros: map[string]int64{"zeros.bin": 700 << 20},
			reasons: []string{"FetchFailed"}, words: []string{"limit"}},
		{name: "hang", url: silentServer(t) + "/hang.git",
			reasons: []string{"FetchFailed"}, words: []string{"within"}},
		{name: "never-ready", files: map[string]string{"deploy.yaml": neverReady(ns, "never-ready")},
			spec: func(s *v1alpha1.SyncSpec) { s.Timeout = &metav1.Duration{Duration: time.Hour} }},
		{name: "never-ready-2", files: map[string]string{"deploy.yaml": neverReady(ns, "never-ready-2")},
			spec: func(s *v1alpha1.SyncSpec) { s.Timeout = &metav1.Duration{Duration: time.Hour} }},
		{name: "never-ready-3", files: map[string]string{"deploy.yaml": neverReady(ns, "never-ready-3")},
			spec: func(s *v1alpha1.SyncSpec) { s.Timeout = &metav1.Duration{Duration: time.Hour} }},
		{name: "never-ready-4", files: map[string]string{"deploy.yaml": neverReady(ns, "never-ready-4")},
			spec: func(s *v1alpha1.SyncSpec) { s.Timeout = &metav1.Duration{Duration: time.Hour} }},
	}
}

// aliasBomb is a ConfigMap of about 200 KB whose one 100 KB scalar is aliased 20,000 times:
// 2 GB once every alias is copied.
func aliasBomb(ns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: aliases, namespace: %s}\nx: &a %q\nlist: [", ns, strings.Repeat("z", 100_000))
	for i := range 20_000 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString("*a")
	}
	b.WriteString("]\n")
	return b.String()
}

// nestedAnchors nests lists of aliases nine levels deep, ten to a level: a few KB that kyaml
// expands to 10^9 scalars.
func nestedAnchors(ns string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: anchors, namespace: %s}\nl0: &l0 [lol,lol,lol,lol,lol,lol,lol,lol,lol,lol]\n", ns)
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [", i, i)
		for j := range 10 {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*l%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// substitutionBomb names a 500 KB variable 2,000 times: 1 GB once substituted.
func substitutionBomb(ns string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: subst, namespace: %s}\ndata: {v: %q}\n", ns, strings.Repeat("${big}", 2000))
}

// neverReady is a Deployment no controller of the test control plane ever makes Available.
func neverReady(ns, name string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}}
    spec: {containers: [{name: c, image: example.invalid/never}]}
`, name, ns)
}

// silentServer accepts connections and never answers; it returns its http:// address.
func silentServer(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, conn) // held open, never read or written
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + l.Addr().String()
}

// holdConnections opens n connections to addr that send a request line and then nothing,
// held until the test ends (slow clients of the webhook).
func holdConnections(t *testing.T, addr string, n int) {
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return // refused or full: the cap at work
		}
		_, _ = c.Write([]byte("POST /hooks/x/y HTTP/1.1\r\nHost: x\r\n"))
		conns = append(conns, c)
	}
}

// publishFiles commits files as the one commit of repository name.
func publishFiles(t *testing.T, srv *gitserver.Server, name string, files map[string]string, zeros map[string]int64) {
	t.Helper()
	dir := t.TempDir()
	for path, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for path, size := range zeros {
		f, err := os.Create(filepath.Join(dir, path))
		if err == nil {
			err = f.Truncate(size)
			_ = f.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Publish(name, "main", dir, name); err != nil {
		t.Fatal(err)
	}
}

// publishAs is publish into repository name.
func (r *repo) publishAs(name string, versions map[string]string) string {
	r.t.Helper()
	dir := r.t.TempDir()
	for cm, v := range versions {
		y := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s, namespace: %s}\ndata: {version: %q}\n", cm, r.ns, v)
		if err := os.WriteFile(filepath.Join(dir, cm+".yaml"), []byte(y), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	sha, err := r.srv.Publish(name, "main", dir, fmt.Sprint(versions))
	if err != nil {
		r.t.Fatal(err)
	}
	return "main@sha1:" + sha
}

// createSync creates Sync ns/name of url's main branch, labelled for the test's daemon.
func createSync(t *testing.T, c client.Client, ns, name, selector, url string, edit func(*v1alpha1.SyncSpec)) {
	t.Helper()
	key, value, _ := strings.Cut(selector, "=")
	s := &v1alpha1.Sync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{key: value}},
		Spec: v1alpha1.SyncSpec{
			Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: url, Ref: v1alpha1.GitRef{Branch: "main"}}},
			Interval: metav1.Duration{Duration: time.Minute},
			Prune:    true,
			Wait:     true,
		},
	}
	if edit != nil {
		edit(&s.Spec)
	}
	var last error // the daemon installs the CRD as it starts
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.Create(ctx, s)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("create Sync %s/%s: %v", ns, name, last)
	}
}

// requestReconcile asks for a reconcile of ns/name now, as `converge reconcile` and the
// webhook do.
func requestReconcile(t *testing.T, c client.Client, ns, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, v1alpha1.RequestedAtAnnotation, time.Now().Format(time.RFC3339Nano))
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Patch(t.Context(), s, client.RawPatch("application/merge-patch+json", []byte(patch))); err != nil {
		t.Fatal(err)
	}
}

// checkRefused waits for h's Sync to be refused as h says: Ready=False with one of its
// reasons and its words, for its generation; or, without reasons, not Ready.
func checkRefused(t *testing.T, c client.Client, ns string, h hostileTenant) {
	t.Helper()
	s := &v1alpha1.Sync{}
	var ready *metav1.Condition
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: h.name}, s); err != nil {
			return false, nil
		}
		ready = meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		if ready == nil || s.Status.ObservedGeneration != s.Generation {
			return false, nil
		}
		if len(h.reasons) == 0 { // waiting: Progressing, holding no worker
			return ready.Status == metav1.ConditionUnknown && ready.Reason == "Progressing", nil
		}
		return ready.Status == metav1.ConditionFalse && refusedAs(ready, h), nil
	})
	if err != nil {
		t.Errorf("I15: hostile Sync %s: Ready %+v, want %v naming %q", h.name, ready, h.reasons, h.words)
		return
	}
	t.Logf("hostile Sync %s: %s: %s", h.name, ready.Reason, ready.Message)
}

func refusedAs(ready *metav1.Condition, h hostileTenant) bool {
	reasonOK := false
	for _, r := range h.reasons {
		reasonOK = reasonOK || ready.Reason == r
	}
	for _, w := range h.words {
		if !strings.Contains(ready.Message, w) {
			return false
		}
	}
	return reasonOK
}
