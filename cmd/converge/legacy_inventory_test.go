package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestSyncTakesOverLegacyInventory: a Sync whose inventory and objects carry the ID of
// earlier versions (applied here through the engine with the old Ref) is reconciled by
// the daemon: nothing is pruned or re-created, the objects' owner annotation and the
// inventory's label become the new ID, the inventory ConfigMap is the same one, another
// owner of the same name still cannot take the objects, and a later prune works under the
// new ID.
func TestSyncTakesOverLegacyInventory(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a1 := strings.Replace(cmA, "VERSION", "1", 1)
	sync := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "app"}}
	legacy := inventory.Ref{Namespace: f.ns, Name: "app-inventory", ID: inventory.LegacyID(f.ns, "app")}
	if _, err := newTestEngine(t).Apply(ctx, engine.Set{Inventory: legacy, Objects: objects(t, f.ns, a1, cmB)}, quickApply()); err != nil {
		t.Fatalf("apply with the legacy ID: %v", err)
	}
	before := uids(t, f.c, f.ns, "a", "b")
	invBefore := &corev1.ConfigMap{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: legacy.Name}, invBefore); err != nil {
		t.Fatal(err)
	}

	rev1 := f.publish(map[string]string{"a.yaml": a1, "b.yaml": cmB})
	f.startDaemon(env.Config)
	f.createSync(2 * time.Second)
	s := f.waitSync("Ready at the first commit", readyAt(rev1))
	if sum := s.Status.Summary; sum == nil || sum.Pruned != 0 || sum.Created != 0 || sum.Failed != 0 {
		t.Errorf("summary %+v; want nothing created, pruned or failed", sum)
	}
	newID := daemon.InventoryRef(sync).ID
	after := uids(t, f.c, f.ns, "a", "b")
	for _, n := range []string{"a", "b"} {
		uid, _, _ := strings.Cut(before[n], " ")
		if want := uid + " " + newID; after[n] != want {
			t.Errorf("configmap %s: UID and owner %q, want %q (same object, new ID)", n, after[n], want)
		}
	}
	inv := &corev1.ConfigMap{}
	if err := f.c.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: legacy.Name}, inv); err != nil {
		t.Fatal(err)
	}
	if inv.UID != invBefore.UID || inv.Labels[inventory.IDLabel] != newID || len(inv.Data) != 2 {
		t.Errorf("inventory: UID %s (was %s), label %q, %d entries; want the same ConfigMap relabelled %q with 2 entries",
			inv.UID, invBefore.UID, inv.Labels[inventory.IDLabel], len(inv.Data), newID)
	}

	// converge apply --inventory NS/app had the same legacy ID: it cannot take them now.
	dir := filepath.Join(t.TempDir(), "app")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, f.ns, map[string]string{"b.yaml": cmB})
	out, errOut, code := cliErr("apply", dir, "-n", f.ns, "--inventory", f.ns+"/app")
	if want := "ConfigMap " + f.ns + "/b is owned by Sync " + f.ns + "/app"; code != exitCodeError || !strings.Contains(out+errOut, want) {
		t.Errorf("converge apply --inventory %s/app: exit %d, %s%s; want exit 2 saying %q", f.ns, code, out, errOut, want)
	}

	// The next commit drops b: pruned under the new ID.
	rev2 := f.publish(map[string]string{"b.yaml": ""})
	f.waitSync("Ready at the second commit", readyAt(rev2))
	if _, err := f.configMap("b"); !apierrors.IsNotFound(err) {
		t.Errorf("configmap b was not pruned under the new ID: %v", err)
	}
}

// TestApplyCLITakesOverLegacyInventory: an inventory "converge apply --inventory NS/app"
// wrote with the ID of earlier versions keeps working: a dry-run sees no change and writes
// nothing (the inventory stays under the legacy ID), the apply changes and prunes nothing
// and moves the objects and the ConfigMap to the new ID, and a later prune works.
func TestApplyCLITakesOverLegacyInventory(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	a1 := strings.Replace(cmA, "VERSION", "1", 1)
	legacy := inventory.Ref{Namespace: ns, Name: "app", ID: inventory.LegacyID(ns, "app")}
	if _, err := newTestEngine(t).Apply(ctx, engine.Set{Inventory: legacy, Objects: objects(t, ns, a1, cmB)}, quickApply()); err != nil {
		t.Fatalf("apply with the legacy ID: %v", err)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	before := uids(t, c, ns, "a", "b")
	dir := filepath.Join(t.TempDir(), "other-folder")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeSet(t, dir, ns, map[string]string{"a.yaml": a1, "b.yaml": cmB})
	args := []string{"apply", dir, "-n", ns, "--inventory", ns + "/app", "--prune"}

	rvs := resourceVersions(t, ns)
	if out, errOut, code := cliErr(append(args, "--dry-run")...); code != 0 {
		t.Errorf("dry-run over the legacy inventory: exit %d, %s%s; want 0 (no change)", code, out, errOut)
	}
	if got := resourceVersions(t, ns); !maps.Equal(got, rvs) {
		t.Errorf("the dry-run wrote: %v, was %v", got, rvs)
	}

	out, errOut, code := cliErr(args...)
	if code != 0 || strings.Count(out, " unchanged\n") != 2 || strings.Contains(out, "pruned\n") {
		t.Errorf("apply over the legacy inventory: exit %d; want both unchanged, nothing pruned:\n%s%s", code, out, errOut)
	}
	newID := inventory.ID(inventory.OwnerCLI, ns, "app")
	after := uids(t, c, ns, "a", "b")
	for _, n := range []string{"a", "b"} {
		uid, _, _ := strings.Cut(before[n], " ")
		if want := uid + " " + newID; after[n] != want {
			t.Errorf("configmap %s: UID and owner %q, want %q", n, after[n], want)
		}
	}
	inv := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, inv); err != nil || inv.Labels[inventory.IDLabel] != newID {
		t.Errorf("inventory label %v (%v), want %q", inv.Labels, err, newID)
	}

	writeSet(t, dir, ns, map[string]string{"a.yaml": a1})
	if out, errOut, code := cliErr(args...); code != 0 || !strings.Contains(out, "ConfigMap/"+ns+"/b pruned") {
		t.Errorf("prune under the new ID: exit %d:\n%s%s", code, out, errOut)
	}
}
