package main

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/e2e/sopsfixture"
	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// The CLI verbs' tests that need a running daemon (status, reconcile, an inventory taken
// over by a Sync) start it through the daemon package's API. The daemon's own tests, with
// their crash points, live in package daemon.

var env *cluster.Cluster

func TestMain(m *testing.M) {
	sources.ServeChild()          // renders are isolated: this binary serves as their child
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
// namespace, until the test ends: daemon.Run with `converge run`'s defaults, no leader
// election and no listeners.
func (f *fixture) startDaemon(cfg *rest.Config) {
	f.t.Helper()
	o := daemon.DefaultOptions()
	o.MetricsAddr, o.HealthAddr, o.LeaderElect = "0", "0", false
	o.WatchNamespace, o.Concurrency, o.CacheDir = f.ns, 2, f.t.TempDir()
	o.QuickStart.Namespace = f.ns
	o.AllowLocalGit = true // the fixture's git server listens on loopback
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg, o) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			f.t.Errorf("daemon: %v", err)
		}
	})
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

const cmA, cmB = synctest.ConfigMapA, synctest.ConfigMapB
