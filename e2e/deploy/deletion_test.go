package deploy

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/binary"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/e2e/gitserver"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestNamespaceDeletionEnds deletes the namespace of a Sync that applies as its own
// service account, after that account lost its rights (its RoleBinding and the account
// itself gone, as a namespace deletion or a careless cleanup does): the real namespace
// controller must be able to finish, so the namespace is gone within a bounded wait. The
// daemon's finalizer gives up after --deletion-grace with a Warning event. Without it,
// the delete was refused with 403 forever and the namespace stayed Terminating.
func TestNamespaceDeletionEnds(t *testing.T) {
	cluster.Require(t, env)
	c := adminClient(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	srv, err := gitserver.Start(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	rev := publish(t, srv, "app", "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: "+ns+"}\ndata: {k: v}\n")

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deployer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "deployer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: ns}}}
	for _, o := range []client.Object{sa, role, rb} {
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	// The daemon installs the Sync CRD; TestDeployLifecycle expects a cluster without it.
	// Registered before the daemon starts, so it runs after the daemon stopped.
	t.Cleanup(func() { removeSyncCRD(t, c) })
	binary.Start(t, "run", "--kubeconfig", env.Kubeconfig, "-n", ns, "--watch-namespace", ns,
		"--leader-elect=false", "--metrics-addr", "0", "--health-addr", "0", "--git-cache-dir", t.TempDir(),
		"--deletion-grace", "5s", "--allow-local-git")
	waitFor(t, "the Sync CRD", func(ctx context.Context) bool {
		s := &v1alpha1.Sync{
			ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
			Spec: v1alpha1.SyncSpec{
				Source:             v1alpha1.Source{Git: &v1alpha1.GitSource{URL: srv.RepoURL("app"), Ref: v1alpha1.GitRef{Branch: "main"}}},
				Path:               ".",
				Interval:           metav1.Duration{Duration: time.Hour},
				Prune:              true,
				ServiceAccountName: "deployer",
			},
		}
		return c.Create(ctx, s) == nil
	})
	waitSync(t, c, ns, "app", func(s *v1alpha1.Sync) bool { return s.Status.LastAppliedRevision == rev })

	for _, o := range []client.Object{rb, sa} {
		if err := c.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})), nil
	})
	if err != nil {
		s := &v1alpha1.Sync{}
		_ = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, s)
		t.Fatalf("namespace %s still there after 2 minutes; Sync finalizers %v, conditions %+v", ns, s.Finalizers, s.Status.Conditions)
	}
}

// removeSyncCRD deletes the Sync CRD and waits until it is gone.
func removeSyncCRD(t *testing.T, c client.Client) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "syncs.converge.dev"}}
	if err := c.Delete(context.Background(), crd); client.IgnoreNotFound(err) != nil {
		t.Errorf("delete the Sync CRD: %v", err)
		return
	}
	waitFor(t, "the Sync CRD to be deleted", func(ctx context.Context) bool {
		return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(crd), crd))
	})
}
