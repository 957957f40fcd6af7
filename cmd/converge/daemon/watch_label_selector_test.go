package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonWatchLabelSelector runs two leader-elected daemons, one per shard label, as
// Flux's static sharding does: each leads (one Lease per selector) and reconciles only the
// Syncs its selector matches; a Sync relabelled to the other shard is taken over by it.
// Without --watch-label-selector, both daemons would compete for one Lease.
func TestDaemonWatchLabelSelector(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"in-a/a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "in-b/b.yaml": cmB})
	shard := func(sel string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.LeaderNamespace, o.WatchLabelSelector = true, f.ns, sel
			o.QuickStart = QuickStart{}
		}
	}
	cfgA, ftA := fault.Config(env.Config)
	cfgB, ftB := fault.Config(env.Config)
	f.startDaemon(cfgA, shard("sharding.fluxcd.io/key in (shard-a)"))
	f.startDaemon(cfgB, shard("sharding.fluxcd.io/key=shard-b"))
	labelled := func(name, key string) *v1alpha1.Sync {
		return synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) {
			s.Name = name
			s.Labels = map[string]string{"sharding.fluxcd.io/key": key}
			s.Spec.Path = name
			s.Spec.TargetNamespace = f.ns
		})
	}
	for _, s := range []*v1alpha1.Sync{labelled("in-a", "shard-a"), labelled("in-b", "shard-b")} {
		synctest.Create(t, f.c, s)
	}
	for _, name := range []string{"in-a", "in-b"} {
		synctest.Wait(t, f.c, client.ObjectKey{Namespace: f.ns, Name: name}, name+" Ready", readyAt(rev))
	}
	wrote := func(ft *fault.Transport, name string) bool {
		for _, w := range ft.Writes() {
			if strings.Contains(w, "/syncs/"+name) {
				return true
			}
		}
		return false
	}
	if wrote(ftA, "in-b") || wrote(ftB, "in-a") {
		t.Errorf("a daemon wrote a Sync of the other shard: A %v, B %v", ftA.Writes(), ftB.Writes())
	}

	// Move in-a to shard b: B takes it (a new request, handled by B alone).
	f.retryWrite("in-a", func(s *v1alpha1.Sync) {
		s.Labels["sharding.fluxcd.io/key"] = "shard-b"
		s.Annotations = map[string]string{v1alpha1.RequestedAtAnnotation: "moved"}
	}, func(ctx context.Context, s *v1alpha1.Sync) error { return f.c.Update(ctx, s) })
	synctest.Wait(t, f.c, client.ObjectKey{Namespace: f.ns, Name: "in-a"}, "the request handled after the move",
		func(s *v1alpha1.Sync) bool { return s.Status.LastHandledRequest == "moved" })
	if !wrote(ftB, "in-a") {
		t.Errorf("shard b never wrote the Sync moved to it: %v", ftB.Writes())
	}
}

// TestLeaderElectionIDPerSelector: the same selector however written gives the same Lease,
// another selector another one, none the historical name.
func TestLeaderElectionIDPerSelector(t *testing.T) {
	id := func(sel string) string { return Options{WatchLabelSelector: sel}.leaderElectionID() }
	if id("") != "converge-leader" {
		t.Errorf("no selector: %q, want converge-leader (unchanged for unsharded daemons)", id(""))
	}
	if id("a=1,b=2") != id("b=2, a=1") {
		t.Errorf("one selector, two Leases: %q vs %q", id("a=1,b=2"), id("b=2, a=1"))
	}
	if id("a=1") == id("a=2") || id("a=1") == id("") {
		t.Errorf("two shards share a Lease: %q %q %q", id("a=1"), id("a=2"), id(""))
	}
	if err := (Options{WatchLabelSelector: "a in (b"}).Validate(); err == nil || !strings.Contains(err.Error(), "--watch-label-selector") {
		t.Errorf("a broken selector: %v, want an error naming --watch-label-selector", err)
	}
}

// TestRenderCacheSizeNotNegative: a negative --render-cache-size stops the daemon at start
// instead of turning the render cache off.
func TestRenderCacheSizeNotNegative(t *testing.T) {
	if err := (Options{RenderCacheSize: -1}).Validate(); err == nil || !strings.Contains(err.Error(), "--render-cache-size") {
		t.Errorf("Validate: %v, want an error naming --render-cache-size", err)
	}
}
