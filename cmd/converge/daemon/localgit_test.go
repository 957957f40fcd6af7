package daemon

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// setURL points the fixture's Sync at url.
func (f *fixture) setURL(url string) {
	f.t.Helper()
	f.updateSync("app", func(s *v1alpha1.Sync) { s.Spec.Source.Git.URL = url })
}

// refused reports a Sync stalled on a refused fetch of its current generation.
func refused(want string) func(*v1alpha1.Sync) bool {
	return func(s *v1alpha1.Sync) bool {
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.ObservedGeneration == s.Generation && ready != nil &&
			ready.Status == "False" && ready.Reason == reasonFetchFailed && strings.Contains(ready.Message, want) &&
			meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionStalled)
	}
}

// TestDaemonRefusesLocalGit: a Sync naming a file:// URL, a local path or a git server on
// loopback is refused by a daemon without --allow-local-git (terminal, nothing pruned), and
// one naming the daemon's git cache is refused even with it. Without it, the daemon fetched all
// of them: any repository on its disk, the cached fetches of other Syncs' credentials
// included, and any server on its own machine.
func TestDaemonRefusesLocalGit(t *testing.T) {
	for _, allow := range []bool{false, true} {
		name := map[bool]string{false: "default", true: "allow-local-git"}[allow]
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			rev := f.publish(map[string]string{"b.yaml": cmB})
			cacheDir := t.TempDir()
			stop := f.startStoppableDaemon(env.Config, func(o *Options) { o.CacheDir = cacheDir })
			f.createSync(time.Minute)
			f.waitSync("Ready", readyAt(rev))
			bare := filepath.Join(f.git.Root, "app.git")

			if !allow {
				// The fixture's git server listens on loopback: a daemon without the flag
				// refuses it where it dials, and prunes nothing.
				stop()
				f.startDaemon(env.Config, func(o *Options) { o.CacheDir, o.AllowLocalGit = cacheDir, false })
				f.waitSync("refused the loopback server", refused("loopback address refused"))
				if _, err := f.configMap("b"); err != nil {
					t.Errorf("configmap b after a refused fetch: %v, want it kept", err)
				}
				for _, url := range []string{"file://" + bare, bare} {
					f.setURL(url)
					f.waitSync("refused "+url, refused("file:// URLs and local paths are for the CLI and tests (the daemon allows them with --allow-local-git)"))
				}
			} else {
				f.setURL("file://" + bare)
				f.waitSync("Ready from the local repository", readyAt(rev))
			}
			cached, _ := filepath.Glob(filepath.Join(cacheDir, "*", "shallow.git"))
			if len(cached) == 0 {
				t.Fatalf("no cached repository under %s", cacheDir)
			}
			f.setURL("file://" + cached[0])
			want := "points into the git cache"
			if !allow {
				want = "--allow-local-git"
			}
			f.waitSync("refused the cache", refused(want))
			if _, err := f.configMap("b"); err != nil {
				t.Errorf("configmap b after a refused fetch: %v, want it kept", err)
			}
		})
	}
}
