package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestDaemonStatusNamesTheOwner runs two daemons with different --replica-name, statically
// sharded by label: each Sync's status.owner is the Replica of the daemon that reconciles it,
// and a Sync moved to the other shard names the daemon that took it over.
func TestDaemonStatusNamesTheOwner(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"in-a/a.yaml": strings.Replace(cmA, "VERSION", "1", 1), "in-b/b.yaml": cmB})
	replica := func(name, sel string) func(*Options) {
		return func(o *Options) {
			o.LeaderElect, o.LeaderNamespace, o.WatchLabelSelector = true, f.ns, sel
			o.Replica = name
			o.QuickStart = QuickStart{}
		}
	}
	f.startDaemon(env.Config, replica("converge-a-0", "converge.dev/shard=a"))
	f.startDaemon(env.Config, replica("converge-b-0", "converge.dev/shard=b"))
	for name, shard := range map[string]string{"in-a": "a", "in-b": "b"} {
		synctest.Create(t, f.c, synctest.NewSync(f.ns, f.git.RepoURL("app"), time.Hour, func(s *v1alpha1.Sync) {
			s.Name = name
			s.Labels = map[string]string{"converge.dev/shard": shard}
			s.Spec.Path = name
			s.Spec.TargetNamespace = f.ns
		}))
	}
	for name, owner := range map[string]string{"in-a": "converge-a-0", "in-b": "converge-b-0"} {
		s := synctest.Wait(t, f.c, client.ObjectKey{Namespace: f.ns, Name: name}, name+" Ready", readyAt(rev))
		if s.Status.Owner != owner {
			t.Errorf("Sync %s: status.owner %q, want %q (the replica that reconciles it)", name, s.Status.Owner, owner)
		}
	}

	f.retryWrite("in-a", func(s *v1alpha1.Sync) {
		s.Labels["converge.dev/shard"] = "b"
		s.Annotations = map[string]string{v1alpha1.RequestedAtAnnotation: "moved"}
	}, func(ctx context.Context, s *v1alpha1.Sync) error { return f.c.Update(ctx, s) })
	s := synctest.Wait(t, f.c, client.ObjectKey{Namespace: f.ns, Name: "in-a"}, "the request handled after the move",
		func(s *v1alpha1.Sync) bool { return s.Status.LastHandledRequest == "moved" })
	if s.Status.Owner != "converge-b-0" {
		t.Errorf("Sync in-a moved to shard b: status.owner %q, want converge-b-0", s.Status.Owner)
	}
}
