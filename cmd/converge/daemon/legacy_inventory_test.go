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
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

var objects = synctest.Objects

// newTestEngine is a one-shot engine on the test cluster, as the CLI builds.
func newTestEngine(t *testing.T) *engine.Engine { return synctest.Engine(t, env.Config) }

var quickApply = synctest.QuickApply

// TestSyncDeletionTakesOverLegacyInventory: a Sync whose inventory carries the legacy ID is
// deleted before it ever reconciled under the new ID (it is suspended): the deletion takes
// the inventory over and deletes its objects and the inventory, instead of failing on an
// inventory labelled with another ID.
func TestSyncDeletionTakesOverLegacyInventory(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	legacy := inventory.Ref{Namespace: f.ns, Name: "app-inventory", ID: inventory.LegacyID(f.ns, "app")}
	if _, err := newTestEngine(t).Apply(ctx, engine.Set{Inventory: legacy, Objects: objects(t, f.ns, cmB)}, quickApply()); err != nil {
		t.Fatalf("apply with the legacy ID: %v", err)
	}
	f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config)
	s := f.createSync(time.Minute, func(s *v1alpha1.Sync) { s.Spec.Suspend = true })
	f.waitSync("holding the finalizer", func(s *v1alpha1.Sync) bool { return controllerutil.ContainsFinalizer(s, v1alpha1.Finalizer) })
	if err := f.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{})), nil
	})
	if err != nil {
		t.Fatal("the Sync was never finalized")
	}
	for _, name := range []string{"b", "app-inventory"} {
		if _, err := f.configMap(name); !apierrors.IsNotFound(err) {
			t.Errorf("configmap %s survived the deletion: %v", name, err)
		}
	}
}

// TestSyncDeletionEndsWhenMigrationIsRefused: a Sync whose inventory carries the legacy ID
// is deleted, and its service account may delete ConfigMaps but not patch them, so the
// migration to the new ID is refused (403). The refusal follows the deletion's rules: the
// finalizer goes after --deletion-grace (here 3 s) with a CleanupAbandoned condition (I12).
// Without it, the migration error was only logged, the deletion read the still legacy-labelled
// inventory as another owner's (an error no grace applies to), and the Sync never went.
func TestSyncDeletionEndsWhenMigrationIsRefused(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	legacy := inventory.Ref{Namespace: f.ns, Name: "app-inventory", ID: inventory.LegacyID(f.ns, "app")}
	if _, err := newTestEngine(t).Apply(ctx, engine.Set{Inventory: legacy, Objects: objects(t, f.ns, cmB)}, quickApply()); err != nil {
		t.Fatalf("apply with the legacy ID: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "delete"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}}}
	for _, o := range []client.Object{sa, role, rb} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	f.publish(map[string]string{"b.yaml": cmB})
	f.startDaemon(env.Config, func(o *Options) { o.DeletionGrace = 3 * time.Second })
	s := f.createSync(time.Minute, func(s *v1alpha1.Sync) { s.Spec.Suspend, s.Spec.ServiceAccountName = true, "deployer" })
	f.waitSync("holding the finalizer", func(s *v1alpha1.Sync) bool { return controllerutil.ContainsFinalizer(s, v1alpha1.Finalizer) })
	if err := f.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	var saw string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur := &v1alpha1.Sync{}
		err := f.c.Get(ctx, client.ObjectKeyFromObject(s), cur)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse {
			saw = c.Reason + ": " + c.Message
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Sync was never finalized although its migration was refused; last condition %q", saw)
	}
	if !strings.Contains(saw, "forbidden") {
		t.Errorf("no Ready=False condition said the cleanup was refused before the finalizer went; last seen %q", saw)
	}
}
