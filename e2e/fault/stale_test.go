package fault

import (
	"context"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestStaleReaderServesFrozenView freezes ConfigMaps of one namespace and changes them on
// the server: the reader keeps serving the snapshot (deleted objects present, new ones
// missing, old content and resourceVersion, for typed and unstructured reads, label
// selectors applied) until Thaw, while another namespace passes through.
func TestStaleReaderServesFrozenView(t *testing.T) {
	cluster.Require(t, env)
	ctx := t.Context()
	c, err := client.New(env.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns, other := env.Namespace(t), env.Namespace(t)
	create := func(ns, name string, labels map[string]string) {
		t.Helper()
		o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": "old"}}
		if err := c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	create(ns, "deleted", map[string]string{"app": "x"})
	create(ns, "changed", nil)
	stale := NewStaleReader(c, nil)
	if err := stale.Freeze(ctx, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "deleted"}}); err != nil {
		t.Fatal(err)
	}
	changed := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "changed"}, changed); err != nil {
		t.Fatal(err)
	}
	changed.Data["k"] = "new"
	if err := c.Update(ctx, changed); err != nil {
		t.Fatal(err)
	}
	create(ns, "created", nil)
	create(other, "elsewhere", nil)

	got := &corev1.ConfigMap{}
	if err := stale.Get(ctx, client.ObjectKey{Namespace: ns, Name: "deleted"}, got); err != nil {
		t.Errorf("frozen get of a deleted object: %v, want it served", err)
	}
	if err := stale.Get(ctx, client.ObjectKey{Namespace: ns, Name: "changed"}, got); err != nil || got.Data["k"] != "old" {
		t.Errorf("frozen get of a changed object: %v, data %v; want the old content", err, got.Data)
	}
	if got.ResourceVersion == changed.ResourceVersion {
		t.Error("the frozen object carries the new resourceVersion")
	}
	if err := c.Update(ctx, got); !apierrors.IsConflict(err) {
		t.Errorf("an update from the stale view: %v, want a conflict", err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := stale.Get(ctx, client.ObjectKey{Namespace: ns, Name: "created"}, u); !apierrors.IsNotFound(err) {
		t.Errorf("frozen get of an object created since: %v, want not found", err)
	}
	if err := stale.Get(ctx, client.ObjectKey{Namespace: other, Name: "elsewhere"}, got); err != nil {
		t.Errorf("another namespace did not pass through: %v", err)
	}
	if diff := cmp.Diff([]string{"changed", "deleted"}, names(t, stale, ns)); diff != "" {
		t.Errorf("frozen list (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"deleted"}, names(t, stale, ns, client.MatchingLabels{"app": "x"})); diff != "" {
		t.Errorf("frozen list by label (-want +got):\n%s", diff)
	}
	if stale.Served() != 5 {
		t.Errorf("served %d reads from the snapshot, want 5", stale.Served())
	}

	stale.Thaw(corev1.SchemeGroupVersion.WithKind("ConfigMap").GroupKind())
	if diff := cmp.Diff([]string{"changed", "created"}, names(t, stale, ns)); diff != "" {
		t.Errorf("list after Thaw (-want +got):\n%s", diff)
	}
}

func names(t *testing.T, r client.Reader, ns string, opts ...client.ListOption) []string {
	t.Helper()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMapList"))
	if err := r.List(context.Background(), list, append(opts, client.InNamespace(ns))...); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, u := range list.Items {
		if u.GetName() != "kube-root-ca.crt" {
			out = append(out, u.GetName())
		}
	}
	sort.Strings(out)
	return out
}
