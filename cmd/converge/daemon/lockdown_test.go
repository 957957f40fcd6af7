package daemon

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestCrossNamespaceRefusedUnderLockdown: cross-namespace references are refused with
// --no-cross-namespace-refs, and under --default-service-account unless the flag was given
// explicitly (=false re-opens them).
func TestCrossNamespaceRefusedUnderLockdown(t *testing.T) {
	for _, tc := range []struct {
		sa         string
		flag, set  bool
		wantRefuse bool
	}{
		{"", false, false, false},
		{"", true, true, true},
		{"deployer", false, false, true},
		{"deployer", false, true, false},
		{"deployer", true, true, true},
	} {
		o := Options{DefaultServiceAccount: tc.sa, NoCrossNamespaceRefs: tc.flag, NoCrossNamespaceRefsSet: tc.set}
		if got := o.crossNamespaceRefused(); got != tc.wantRefuse {
			t.Errorf("--default-service-account %q, --no-cross-namespace-refs=%v (given: %v): refused %v, want %v",
				tc.sa, tc.flag, tc.set, got, tc.wantRefuse)
		}
	}
}

// TestDaemonLockdownRefusesCrossNamespaceRefs runs the daemon with --default-service-account
// alone: a Sync's dependency in another namespace is refused (Stalled, naming the entry,
// nothing fetched), and a dependent in another namespace does not hold up a deletion. Without
// it: lockdown left cross-namespace references open, and app waited for the other
// namespace's Sync ("dependency <other>/infra not found": whether it exists and is Ready
// was the tenant's to learn).
func TestDaemonLockdownRefusesCrossNamespaceRefs(t *testing.T) {
	f := newFixture(t)
	other := env.Namespace(t)
	f.deployer()
	rev := f.publish(map[string]string{"infra/infra.yaml": cmNamed("infra", "NS"), "app/app.yaml": cmNamed("app", "NS")})
	f.startDaemon(env.Config, func(o *Options) { o.DefaultServiceAccount = "deployer"; o.test.alsoWatch = []string{other} })
	f.createSync(time.Hour, syncNamed("infra", "infra"), hourly)
	f.waitSyncNamed("infra", "Ready", readyAt(rev))

	f.createSync(time.Hour, syncNamed("app", "app"), dependsOn(other+"/infra"), hourly)
	s := f.waitSyncNamed("app", "refusing the cross-namespace dependency", both(stalled, readyFalse(reasonDependencyNotReady,
		"spec.dependsOn[0]: Sync "+other+"/infra is in another namespace: cross-namespace references are refused (converge run --no-cross-namespace-refs)")))
	if s.Status.LastAttemptedRevision != "" {
		t.Errorf("lastAttemptedRevision %q: the refused Sync was fetched", s.Status.LastAttemptedRevision)
	}
	f.absent("refused", "app")

	dep := synctest.NewSync(other, f.git.RepoURL("app"), time.Hour, syncNamed("dependent", "app"), dependsOn(f.ns+"/infra"), hourly)
	synctest.Create(t, f.c, dep)
	synctest.Wait(t, f.c, client.ObjectKeyFromObject(dep), "refusing its cross-namespace dependency", stalled)
	if err := f.c.Delete(context.Background(), &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "infra"}}); err != nil {
		t.Fatal(err)
	}
	f.waitGone("infra", 30*time.Second)
	f.absent("infra deleted", "infra")
}
