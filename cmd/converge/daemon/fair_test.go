package daemon

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// hangingGit is a git server that accepts connections and never answers: each fetch from it
// holds its worker until --fetch-timeout. It returns the URL and the count of connections.
func hangingGit(t *testing.T) (string, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			t.Cleanup(func() { _ = conn.Close() })
		}
	}()
	return "http://" + ln.Addr().String() + "/repo.git", &accepted
}

// TestDaemonNamespaceShare: a namespace whose six Syncs fetch from a server that never
// answers (--fetch-timeout 3m) does not hold both workers while another namespace holds a
// Sync: that namespace's new Sync, queued behind them, is applied while they still hang.
func TestDaemonNamespaceShare(t *testing.T) {
	url, accepted := hangingGit(t)
	// The hanging fetches give up after hang: the other Sync must be Ready before, whatever
	// the machine's load (it takes seconds).
	const hang = 3 * time.Minute
	f := newFixture(t)
	other := env.Namespace(t)
	rev := f.publish(map[string]string{"other/cm.yaml": noNamespace})
	f.startDaemon(env.Config, func(o *Options) {
		o.Concurrency, o.FetchTimeout, o.test.alsoWatch = 2, hang, []string{other}
	})
	// The other namespace is a tenant already (a suspended Sync): the daemon keeps a worker
	// for it. A namespace that is the only one holding Syncs uses every worker.
	synctest.Create(t, f.c, synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) {
		s.Name, s.Spec.Path, s.Spec.Suspend = "parked", "other", true
	}))
	for i := range 6 {
		synctest.Create(t, f.c, synctest.NewSync(f.ns, url, time.Hour, func(s *v1alpha1.Sync) {
			s.Name = "hung-" + strconv.Itoa(i)
		}))
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return accepted.Load() > 0, nil
	})
	if err != nil {
		t.Fatal("no fetch reached the hanging server")
	}

	start := time.Now()
	synctest.Create(t, f.c, synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) { s.Spec.Path = "other" }))
	synctest.Wait(t, f.c, client.ObjectKey{Namespace: other, Name: "app"}, "Ready while the first namespace's fetches hang", readyAt(rev))
	if d := time.Since(start); d >= hang {
		t.Errorf("the other namespace's Sync was Ready after %s, once the hanging fetches gave up", d.Round(time.Second))
	}
}
