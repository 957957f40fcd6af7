package inventory

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestStoreVersionFollowsWrites: Store.Version is the version Lookup reports (Claim.Version),
// "" without a ConfigMap; every write of the inventory changes it, an unchanged Write does
// not; and Heads, the watch of the heads, comes to show the same version (and nothing for a
// deleted inventory).
func TestStoreVersionFollowsWrites(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, _ := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	heads := runHeads(ctx, t)
	watched := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			v, ok := heads.Version(ns, "inv")
			return v == want && ok == (want != ""), nil
		})
		if err != nil {
			v, ok := heads.Version(ns, "inv")
			t.Fatalf("the heads' watch shows %q (%v), want %q", v, ok, want)
		}
	}
	version := func() string {
		t.Helper()
		v, err := s.Version(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	if v := version(); v != "" {
		t.Fatalf("Version of a missing inventory = %q, want \"\"", v)
	}
	if err := s.Write(ctx, ref, New(e(ns, "a", "uid-a"))); err != nil {
		t.Fatal(err)
	}
	v1 := version()
	if _, claim, err := s.Lookup(ctx, ref); err != nil || claim.Version != v1 || v1 == "" {
		t.Fatalf("Lookup's version %q, %v; Version %q", claim.Version, err, v1)
	}
	watched(v1)
	if err := s.Write(ctx, ref, New(e(ns, "a", "uid-a"))); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != v1 {
		t.Errorf("an unchanged Write moved the version from %s to %s", v1, v)
	}
	if err := s.Write(ctx, ref, New(e(ns, "a", "uid-a"), e(ns, "b", ""))); err != nil {
		t.Fatal(err)
	}
	v2 := version()
	if v2 == v1 {
		t.Errorf("a write left the version at %s", v1)
	}
	watched(v2)
	if err := s.Delete(ctx, ref, DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	watched("")
}

// TestHeadsOffWithoutWatch: a daemon whose RBAC lets it list ConfigMaps but not watch them
// (a ClusterRole kept from before the heads' watch) must not answer from its one list:
// Heads then answers nothing, so every run reads its inventory; once watch is granted, its
// next try answers again. Without it: the list made Heads synced, and it kept answering
// from it.
func TestHeadsOffWithoutWatch(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "inv", ID: "id-1"}
	if err := s.Write(ctx, ref, New(e(ns, "a", "uid-a"))); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":lister"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-list-configmaps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-list-configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := plain.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = plain.Delete(context.Background(), o) })
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	heads, err := NewHeads(cfg)
	if err != nil {
		t.Fatal(err)
	}
	heads.retry = time.Second
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go heads.Run(hctx)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		w := heads.cur.Load()
		return w != nil && w.forbidden.Load(), nil
	})
	if err != nil {
		t.Fatal("the forbidden watch was never noticed")
	}
	if v, ok := heads.Version(ns, "inv"); ok {
		t.Errorf("Heads without watch permission answers %q for the inventory, want no answer", v)
	}

	role.Rules[0].Verbs = append(role.Rules[0].Verbs, "watch")
	if err := plain.Update(ctx, role); err != nil {
		t.Fatal(err)
	}
	want, err := s.Version(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		v, ok := heads.Version(ns, "inv")
		return ok && v == want, nil
	})
	if err != nil {
		t.Error("Heads never answered again once watch was granted")
	}
}

// TestHeadsKeepOnlyTheVersion: the heads' watch keeps of each head its namespace, name and
// resourceVersion, nothing else, so that a ConfigMap labelled as an inventory by anyone who
// may create ConfigMaps costs the watch no more than its key. Without it: the stored head
// kept all 21 labels, the UID and the creation time.
func TestHeadsKeepOnlyTheVersion(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	_, _, c := newStore(t)
	labels, annotations := map[string]string{IDLabel: "id-1"}, map[string]string{}
	for i := range 20 {
		labels["example.com/l"+strconv.Itoa(i)] = strings.Repeat("v", 63)
		annotations["example.com/a"+strconv.Itoa(i)] = strings.Repeat("v", 2048)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "big-head", Labels: labels, Annotations: annotations}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	heads := runHeads(ctx, t)
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		v, ok := heads.Version(ns, cm.Name)
		return ok && v == cm.ResourceVersion, nil
	})
	if err != nil {
		t.Fatalf("the heads' watch never showed %s/%s at %s", ns, cm.Name, cm.ResourceVersion)
	}
	o, _, err := heads.cur.Load().informer.GetStore().GetByKey(ns + "/" + cm.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := o.(*metav1.PartialObjectMetadata).ObjectMeta
	want := metav1.ObjectMeta{Namespace: ns, Name: cm.Name, ResourceVersion: cm.ResourceVersion}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the stored head keeps more than its key and version: %d labels, %d annotations, %d managed fields, uid %q, generation %d, created %v",
			len(got.Labels), len(got.Annotations), len(got.ManagedFields), got.UID, got.Generation, got.CreationTimestamp)
	}
}

// runHeads starts a heads' watch of the test API server until the test ends.
func runHeads(ctx context.Context, t *testing.T) *Heads {
	t.Helper()
	heads, err := NewHeads(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	t.Cleanup(stop)
	go heads.Run(hctx)
	return heads
}
