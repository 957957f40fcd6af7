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

	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// syncNamed returns a createSync mutation giving the Sync another name and path.
func syncNamed(name, path string) func(*v1alpha1.Sync) {
	return func(s *v1alpha1.Sync) { s.Name, s.Spec.Path = name, path }
}

// setDeletionPolicy sets the policy of Sync name and waits until the daemon observed it.
func (f *fixture) setDeletionPolicy(name, policy string) *v1alpha1.Sync {
	f.t.Helper()
	ctx := context.Background()
	cur := &v1alpha1.Sync{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, cur); err != nil {
		f.t.Fatal(err)
	}
	cur.Spec.DeletionPolicy = policy
	if err := f.c.Update(ctx, cur); err != nil {
		f.t.Fatal(err)
	}
	f.waitSyncNamed(name, "observing the policy", func(got *v1alpha1.Sync) bool {
		return got.Status.ObservedGeneration == got.Generation && got.Generation == cur.Generation
	})
	return cur
}

// deleteSync deletes Sync name and waits until it is gone (the finalizer dropped).
func (f *fixture) deleteSync(name string, within time.Duration) {
	f.t.Helper()
	ctx := context.Background()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	if err := f.c.Delete(ctx, s); err != nil {
		f.t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{})), nil
	})
	if err != nil {
		f.t.Fatalf("Sync %s was never finalized within %s", name, within)
	}
}

func (f *fixture) waitSyncNamed(name, what string, cond func(*v1alpha1.Sync) bool) *v1alpha1.Sync {
	f.t.Helper()
	s := &v1alpha1.Sync{}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, s); err != nil {
			return false, nil
		}
		return cond(s), nil
	})
	if err != nil {
		f.t.Fatalf("Sync %s never %s; generation %d, status %+v", name, what, s.Generation, s.Status)
	}
	return s
}

func cmNamed(name, ns string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: " + ns + "}\ndata: {k: v}\n"
}

// TestDaemonOrphanReleases deletes a Sync with deletionPolicy Orphan: the objects stay
// without our owner annotation and the inventory goes, so another Sync adopts one of them
// without an ownership conflict (I11) and a Sync recreated under the same name, rendering
// a subset, prunes none of the others. Without it, the annotation and the inventory
// stayed: the other Sync failed with "owned by another inventory" and the recreated Sync
// adopted the old inventory and pruned c.
func TestDaemonOrphanReleases(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"app/a.yaml": cmNamed("a", "NS"), "app/b.yaml": cmNamed("b", "NS"),
		"app/c.yaml": cmNamed("c", "NS"), "other/b.yaml": cmNamed("b", "NS")})
	f.startDaemon(env.Config)
	f.createSync(time.Hour, syncNamed("app", "app"))
	f.waitSync("Ready", readyAt(rev))
	f.setDeletionPolicy("app", v1alpha1.DeletionPolicyOrphan)
	f.deleteSync("app", time.Minute)

	for _, n := range []string{"a", "b", "c"} {
		cm, err := f.configMap(n)
		if err != nil {
			t.Fatalf("Orphan: configmap %s is gone: %v", n, err)
		}
		if v, ok := cm.Annotations[engine.OwnerAnnotation]; ok {
			t.Errorf("Orphan: configmap %s still carries %s=%s", n, engine.OwnerAnnotation, v)
		}
	}
	if _, err := f.configMap("app-inventory"); !apierrors.IsNotFound(err) {
		t.Errorf("Orphan: the inventory ConfigMap survived: %v", err)
	}

	// (b) Another Sync adopts b without an ownership conflict.
	f.createSync(time.Hour, syncNamed("other", "other"))
	f.waitSyncNamed("other", "Ready adopting b", readyAt(rev))

	// (a) A Sync recreated under the same name renders a subset: nothing else is pruned.
	rev2 := f.publish(map[string]string{"app/b.yaml": "", "app/c.yaml": ""})
	f.createSync(time.Hour, syncNamed("app", "app"))
	f.waitSync("Ready again with a subset", readyAt(rev2))
	for _, n := range []string{"b", "c"} {
		if _, err := f.configMap(n); err != nil {
			t.Errorf("the recreated Sync pruned orphaned configmap %s: %v", n, err)
		}
	}
	cm, err := f.configMap("b")
	if err == nil && cm.Annotations[engine.OwnerAnnotation] != InventoryRef(&v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "other"}}).ID {
		t.Errorf("b is owned by %q, want the other Sync's inventory", cm.Annotations[engine.OwnerAnnotation])
	}
}

// TestDaemonCrashMidAbandon crashes the daemon after the first owner annotation of an
// Orphan deletion was removed: the finalizer and the inventory stay and every object still
// annotated is still inventoried (I2, I12); a new daemon finishes the release.
func TestDaemonCrashMidAbandon(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	rev := f.publish(map[string]string{"a.yaml": cmNamed("a", "NS"), "b.yaml": cmNamed("b", "NS"), "c.yaml": cmNamed("c", "NS")})
	hook, fired := crashOnce()
	stop := f.startStoppableDaemon(env.Config, func(o *Options) {
		o.test.crash.Engine.AfterAbandon = func(int, string) error { return hook() }
	})
	s := f.createSync(time.Hour)
	f.waitSync("Ready", readyAt(rev))
	f.setDeletionPolicy("app", v1alpha1.DeletionPolicyOrphan)
	if err := f.c.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	f.awaitCrash(fired, stop)
	if err := f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{}); err != nil {
		t.Fatalf("the Sync is gone although the release never finished: %v", err)
	}
	if _, err := f.configMap(InventoryRef(s).Name); err != nil {
		t.Fatalf("the inventory went before the release finished: %v", err)
	}
	f.ownedInventoried(s)

	f.startDaemon(env.Config)
	f.deleteSyncWait(s)
	for _, n := range []string{"a", "b", "c"} {
		cm, err := f.configMap(n)
		if err != nil || cm.Annotations[engine.OwnerAnnotation] != "" {
			t.Errorf("configmap %s after the restart: %v, annotations %v", n, err, cm.Annotations)
		}
	}
	if _, err := f.configMap(InventoryRef(s).Name); !apierrors.IsNotFound(err) {
		t.Errorf("the inventory survived: %v", err)
	}
}

// deleteSyncWait waits until s (already deleted) is gone.
func (f *fixture) deleteSyncWait(s *v1alpha1.Sync) {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(f.c.Get(ctx, client.ObjectKeyFromObject(s), &v1alpha1.Sync{})), nil
	})
	if err != nil {
		f.t.Fatalf("I12: the Sync was never finalized: %v", err)
	}
}

// TestDaemonInventoryConfigMapLost deletes the inventory ConfigMap by hand: (a) an object
// in another namespace that leaves the repository is still pruned, and (b) deleting the
// Sync still deletes the cluster-scoped and other-namespace objects, found through the
// recovery copy in status (every delete still checked for our annotation and UID, I1).
// Without it, the lost ConfigMap read as an empty inventory: x stayed after (a), the
// ClusterRole and y after (b).
func TestDaemonInventoryConfigMapLost(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	other := env.Namespace(t)
	crName := "converge-test-" + f.ns
	cr := "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: " + crName + "}\nrules: []\n"
	t.Cleanup(func() {
		_ = f.c.Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: crName}})
	})
	rev := f.publish(map[string]string{"a.yaml": cmNamed("a", "NS"), "gone.yaml": cmNamed("gone", other),
		"kept.yaml": cmNamed("kept", other), "cr.yaml": cr})
	f.startDaemon(env.Config)
	s := f.createSync(time.Hour)
	f.waitSync("Ready", readyAt(rev))
	dropInventory := func() {
		t.Helper()
		if err := f.c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: InventoryRef(s).Name}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ns, name string, obj client.Object) error {
		return f.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj)
	}

	// (a) x leaves the repository after the inventory was lost: it is pruned.
	dropInventory()
	rev2 := f.publish(map[string]string{"gone.yaml": ""})
	f.requestReconcile("app")
	f.waitSync("Ready at the second commit", readyAt(rev2))
	if err := get(other, "gone", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("(a) gone left the repository after the inventory was lost and was not pruned: %v", err)
	}

	// (b) The inventory is lost again, then the Sync is deleted: everything goes.
	dropInventory()
	f.deleteSync("app", time.Minute)
	if err := get("", crName, &rbacv1.ClusterRole{}); !apierrors.IsNotFound(err) {
		t.Errorf("(b) the ClusterRole survived the Sync's deletion: %v", err)
	}
	if err := get(other, "kept", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("(b) configmap %s/kept survived the Sync's deletion: %v", other, err)
	}
	if err := get(f.ns, "a", &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
		t.Errorf("(b) configmap a survived the Sync's deletion: %v", err)
	}
}

// requestReconcile asks the daemon to reconcile Sync name now.
func (f *fixture) requestReconcile(name string) {
	f.t.Helper()
	s := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	patch := []byte(`{"metadata":{"annotations":{"` + v1alpha1.RequestedAtAnnotation + `":"` + time.Now().Format(time.RFC3339Nano) + `"}}}`)
	if err := f.c.Patch(context.Background(), s, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		f.t.Fatal(err)
	}
}

// TestDaemonDeletionEndsWithoutRights deletes a Sync whose service account lost its rights
// the way a namespace deletion takes them: the namespace is deleted, its RoleBinding and
// ServiceAccount go, then the Sync is deleted. The local API server runs no namespace
// controller, so the test deletes these as it would; what it checks is ours: the
// finalizer is dropped within a bounded time (--deletion-grace, here 3 s), after a
// Ready=False condition saying what failed, so the namespace is not held Terminating.
// Without it, the deletion was retried forever with 403 and the Sync never went.
func TestDaemonDeletionEndsWithoutRights(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}}}
	for _, o := range []client.Object{sa, role, rb} {
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	rev := f.publish(map[string]string{"a.yaml": cmNamed("a", "NS"), "b.yaml": cmNamed("b", "NS")})
	f.startDaemon(env.Config, func(o *Options) { o.DeletionGrace = 3 * time.Second })
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.ServiceAccountName = "deployer" })
	f.waitSync("Ready as the service account", readyAt(rev))

	// What a namespace deletion does, in the namespace controller's stead.
	if err := f.c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{rb, sa} {
		if err := f.c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Delete(ctx, &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	var saw string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		s := &v1alpha1.Sync{}
		err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "app"}, s)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionFalse &&
			(c.Reason == reasonDeleteFail || c.Reason == reasonCleanupAbandoned) {
			saw = c.Reason + ": " + c.Message
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the Sync (and so its namespace) was never finalized although its service account lost its rights")
	}
	if !strings.Contains(saw, "forbidden") {
		t.Errorf("no Ready=False condition said the cleanup was refused before the finalizer went; last seen %q", saw)
	}
}

// TestDaemonShardedOrphanReleasesShardLabel: a sharded replica applies a Sync's objects
// with its shard's label (ShardLabel); deleting the Sync with deletionPolicy Orphan
// releases them without the owner annotation and without the shard label, so nothing of
// converge's is left on them. Without it, the shard label stayed.
func TestDaemonShardedOrphanReleasesShardLabel(t *testing.T) {
	f := newFixture(t)
	rev := f.publish(map[string]string{"app/a.yaml": cmNamed("a", "NS")})
	f.startShardDaemon("replica-a")
	f.createSync(time.Hour, syncNamed("app", "app"))
	f.waitSync("Ready", readyAt(rev))
	cm, err := f.configMap("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Labels[ShardLabel]; !ok {
		t.Fatalf("the sharded replica applied a without its shard label: labels %v", cm.Labels)
	}
	f.setDeletionPolicy("app", v1alpha1.DeletionPolicyOrphan)
	f.deleteSync("app", time.Minute)
	cm, err = f.configMap("a")
	if err != nil {
		t.Fatalf("Orphan: configmap a is gone: %v", err)
	}
	if v, ok := cm.Labels[ShardLabel]; ok {
		t.Errorf("Orphan: configmap a still carries %s=%s", ShardLabel, v)
	}
	if v, ok := cm.Annotations[engine.OwnerAnnotation]; ok {
		t.Errorf("Orphan: configmap a still carries %s=%s", engine.OwnerAnnotation, v)
	}
}
