package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonRenderTimeout: the daemon's load stops a render that does not end at
// --build-timeout, with a transient RenderTimeout error naming the kustomization.
func TestDaemonRenderTimeout(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"stuck/kustomization.yaml": "resources: [cm.yaml]\n",
		"stuck/cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
		"stuck/" + hangMarker:      "the build blocks (test binary only, see serveRenderChild)\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rs := renderSettings{timeout: time.Second}
	_, err := rs.load(t.Context(), sources.NewLoader(t.TempDir()), sources.Source{Dir: dir, Path: "stuck"}, types.NamespacedName{Namespace: "apps", Name: "stuck"}, nil)
	if err == nil || !strings.Contains(err.Error(), "RenderTimeout: fetch and render did not finish within 1s") ||
		!strings.Contains(err.Error(), "stuck/kustomization.yaml") || !errors.Is(err, context.DeadlineExceeded) || sources.IsTerminal(err) {
		t.Errorf("load: %v; want a transient RenderTimeout naming stuck/kustomization.yaml", err)
	}
}

// TestDaemonFetchTimeout: a git server that accepts and never answers costs a Sync's load
// --fetch-timeout, not --build-timeout, with a transient error naming the URL, the deadline
// and the flag, which the Sync's FetchFailed message repeats. Without it, the fetch over HTTP
// failed only at --build-timeout (over SSH never), with "context deadline exceeded".
func TestDaemonFetchTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	url := "http://" + ln.Addr().String() + "/repo.git"

	// The daemon: the Sync fails with FetchFailed naming the deadline.
	f := newFixture(t)
	f.startDaemon(env.Config, func(o *Options) { o.FetchTimeout = 2 * time.Second })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.Source.Git.URL = url })
	f.waitSync("FetchFailed naming the deadline", func(s *v1alpha1.Sync) bool {
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == reasonFetchFailed &&
			strings.Contains(ready.Message, "no answer within 2s (--fetch-timeout)")
	})

	rs := renderSettings{timeout: time.Minute, fetchTimeout: 2 * time.Second, allowLocalGit: true}
	done := make(chan error, 1)
	go func() {
		_, err := rs.load(t.Context(), sources.NewLoader(t.TempDir()), sources.Source{Git: git.Repository{URL: url}, Path: "."}, types.NamespacedName{Namespace: "apps", Name: "hung"}, nil)
		done <- err
	}()
	select {
	case err := <-done:
		want := "fetch " + url + " default branch: no answer within 2s (--fetch-timeout)"
		if err == nil || !strings.Contains(err.Error(), want) || sources.IsTerminal(err) || strings.Contains(err.Error(), "RenderTimeout") {
			t.Errorf("load: %v; want a transient error containing %q", err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("load still running 28s after its 2s fetch deadline")
	}
}

// TestDaemonRenderIsIsolated: a Sync whose repository names a URL where only the render
// child's transport stops it (a transformer config listed by a folder) reports BuildFailed
// naming the file and field, with no request and nothing pruned; a render that hangs is cut
// at --build-timeout with RenderTimeout (I8, I13).
func TestDaemonRenderIsIsolated(t *testing.T) {
	url, hits := synctest.CountingServer(t, "[]")
	f := newFixture(t)
	rev1 := f.publish(map[string]string{"kustomization.yaml": "resources: [a.yaml]\n", "a.yaml": strings.Replace(cmA, "VERSION", "1", 1)})
	f.startDaemon(env.Config, func(o *Options) { o.BuildTimeout = 3 * time.Second })
	f.createSync(2 * time.Second)
	f.waitSync("Ready at the first commit", readyAt(rev1))

	rev2 := f.publish(map[string]string{
		"kustomization.yaml":         "resources: [a.yaml]\ntransformers: [plugins]\n",
		"plugins/kustomization.yaml": "resources: [patch.yaml]\n",
		"plugins/patch.yaml":         "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + url + "/p.yaml\ntarget: {kind: ConfigMap}\n",
	})
	s := f.waitSync("Ready=False on the remote patch", func(s *v1alpha1.Sync) bool {
		// A render cut at the build timeout (a loaded machine: the render child starts the
		// whole binary) is transient and retried; what counts is the render that finished.
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.LastAttemptedRevision == rev2 && ready != nil && ready.Status == metav1.ConditionFalse &&
			!strings.Contains(ready.Message, "RenderTimeout")
	})
	ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready.Reason != reasonBuildFailed || !strings.Contains(ready.Message, "plugins/patch.yaml: path: remote bases are disabled") || hits.Load() != 0 {
		t.Errorf("Ready = %s %q after %d requests; want %s naming plugins/patch.yaml and no request", ready.Reason, ready.Message, hits.Load(), reasonBuildFailed)
	}
	if _, err := f.configMap("a"); err != nil {
		t.Errorf("a refused render pruned configmap a: %v", err)
	}

	// The root kustomization's build blocks (test binary only, see serveRenderChild).
	rev3 := f.publish(map[string]string{"kustomization.yaml": "resources: [a.yaml]\n", hangMarker: "hang\n", "plugins/kustomization.yaml": "", "plugins/patch.yaml": ""})
	s = f.waitSync("Ready=False on the stuck render", func(s *v1alpha1.Sync) bool {
		r := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.LastAttemptedRevision == rev3 && r != nil && strings.Contains(r.Message, "RenderTimeout")
	})
	ready = meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if ready.Reason != reasonBuildFailed || !strings.Contains(ready.Message, "kustomization.yaml: kustomize build stopped") {
		t.Errorf("Ready = %s %q; want %s, RenderTimeout naming kustomization.yaml", ready.Reason, ready.Message, reasonBuildFailed)
	}
}
