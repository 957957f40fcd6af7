package daemon

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// deployer creates what a tenant with rights in its own namespace only has: a service
// account "deployer" allowed ConfigMaps in the fixture's namespace.
func (f *fixture) deployer() {
	f.t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}}}
	for _, o := range []client.Object{sa, role, rb} {
		if err := f.c.Create(ctx, o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// tenantSync is the deployer of a tenant and a repository declaring a ConfigMap in its
// namespace and one in another namespace. It returns the fixture, the other namespace and
// the revision.
func tenantSync(t *testing.T) (*fixture, string, string) {
	f := newFixture(t)
	other := env.Namespace(t)
	f.deployer()
	rev := f.publish(map[string]string{"own.yaml": cmNamed("own", "NS"), "elsewhere.yaml": cmNamed("elsewhere", other)})
	return f, other, rev
}

// TestDaemonDefaultServiceAccountLocksDown runs the daemon with --default-service-account
// deployer: a Sync without spec.serviceAccountName acts as
// system:serviceaccount:<its namespace>:deployer. Its ConfigMap in another namespace is
// refused with a message naming the object and the service account, and not created; its
// own-namespace ConfigMap is applied. Its deletion acts as the service account too: once
// the RoleBinding is gone, the deletion is refused (never done with the daemon's rights)
// and ends after the grace with a condition naming the service account. Before
// DefaultServiceAccount existed such a Sync acted with the daemon's rights and created the
// ConfigMap in the other namespace (what TestDaemonWithoutDefaultServiceAccountActsAsDaemon
// still shows without the option).
func TestDaemonDefaultServiceAccountLocksDown(t *testing.T) {
	f, other, rev := tenantSync(t)
	ctx := context.Background()
	f.startDaemon(env.Config, func(o *Options) { o.DefaultServiceAccount = "deployer"; o.DeletionGrace = 3 * time.Second })
	f.createSync(time.Hour) // no spec.serviceAccountName
	user := "system:serviceaccount:" + f.ns + ":deployer"
	s := f.waitSync("apply refused in the other namespace", func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.LastAttemptedRevision == rev && c != nil && c.Status == metav1.ConditionFalse
	})
	msg := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady).Message
	for _, want := range []string{"ConfigMap " + other + "/elsewhere", "forbidden", user} {
		if !strings.Contains(msg, want) {
			t.Errorf("the Ready=False message does not say %q: %s", want, msg)
		}
	}
	err := f.c.Get(ctx, client.ObjectKey{Namespace: other, Name: "elsewhere"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("a Sync without serviceAccountName wrote into namespace %s under --default-service-account (get: %v)", other, err)
	}
	if _, err := f.configMap("own"); err != nil {
		t.Fatalf("the Sync's own-namespace ConfigMap was not applied: %v", err)
	}

	// Deletion uses the same identity: without its RoleBinding the service account may not
	// delete "own", and the daemon does not do it in its stead.
	if err := f.c.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"}}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Delete(ctx, &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, &v1alpha1.Sync{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	})
	if err != nil {
		t.Fatalf("the Sync was never finalized: %v", err)
	}
	// The condition goes with the Sync; the Warning event stays.
	var saw []string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs := &corev1.EventList{}
		if err := f.c.List(ctx, evs, client.InNamespace(f.ns)); err != nil {
			return false, err
		}
		saw = saw[:0]
		for _, e := range evs.Items {
			if e.Reason == reasonCleanupAbandoned {
				saw = append(saw, e.Message)
				if strings.Contains(e.Message, "permission denied for "+user) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event says the deletion was refused to %s: %q", reasonCleanupAbandoned, user, saw)
	}
	if _, err := f.configMap("own"); err != nil {
		t.Errorf("the deletion removed ConfigMap own although its service account may not: %v", err)
	}
}

// TestDaemonWithoutDefaultServiceAccountActsAsDaemon documents the single-tenant default:
// without DefaultServiceAccount the same Sync acts with the daemon's rights and writes into
// another namespace.
func TestDaemonWithoutDefaultServiceAccountActsAsDaemon(t *testing.T) {
	f, other, rev := tenantSync(t)
	f.startDaemon(env.Config)
	f.createSync(time.Hour)
	f.waitSync("Ready with the daemon's rights", readyAt(rev))
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: other, Name: "elsewhere"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("without --default-service-account the Sync should act as the daemon: %v", err)
	}
}

// TestDaemonRefusesBadDefaultServiceAccount: a name no service account can have stops the
// daemon at start, naming the flag, rather than failing every Sync later.
func TestDaemonRefusesBadDefaultServiceAccount(t *testing.T) {
	err := Run(context.Background(), env.Config, Options{DefaultServiceAccount: "system:serviceaccount:x:y"})
	if err == nil || !strings.Contains(err.Error(), "--default-service-account") {
		t.Fatalf("Run with an invalid default service account: %v", err)
	}
}

// TestDaemonQuickStartWithDefaultServiceAccount: the quick start Sync (converge run
// --git-url) sets no serviceAccountName; with --default-service-account it acts as that
// service account of its namespace: refused (naming it) while the service account has no
// rights there, Ready once its RBAC exists.
func TestDaemonQuickStartWithDefaultServiceAccount(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"own.yaml": cmNamed("own", "NS")})
	f.startDaemon(env.Config, func(o *Options) {
		o.DefaultServiceAccount = "deployer"
		o.QuickStart = QuickStart{GitURL: f.git.RepoURL("app"), Path: ".", Name: "quickstart", Namespace: f.ns, Interval: time.Hour, Prune: true}
	})
	key := client.ObjectKey{Namespace: f.ns, Name: "quickstart"}
	user := "system:serviceaccount:" + f.ns + ":deployer"
	synctest.Wait(t, f.c, key, "quick start refused to "+user, func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, user)
	})
	f.deployer()
	f.updateSync("quickstart", func(s *v1alpha1.Sync) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[v1alpha1.RequestedAtAnnotation] = "rbac-granted"
	})
	synctest.Wait(t, f.c, key, "quick start Ready as the service account", readyAt(rev))
	if _, err := f.configMap("own"); err != nil {
		t.Fatalf("the quick start Sync did not apply its ConfigMap: %v", err)
	}
}
