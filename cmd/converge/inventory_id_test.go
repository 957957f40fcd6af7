package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/cmd/converge/internal/synctest"
	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// TestInventoryRefsDistinct: a Sync, "converge apply --inventory" and "converge install"
// naming the same namespace/name get three inventory IDs. Without it, all three were
// <namespace>_<name>.
func TestInventoryRefsDistinct(t *testing.T) {
	sync := daemon.InventoryRef(&v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: installer.Namespace, Name: installer.Name}})
	f := applyFlags{inventory: installer.Namespace + "/" + installer.Name}
	cli, err := f.inventoryRef("default")
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for owner, ref := range map[string]inventory.Ref{"Sync": sync, "converge apply": cli, "converge install": installer.Ref} {
		if other, ok := ids[ref.ID]; ok {
			t.Errorf("%s and %s share the inventory ID %q", owner, other, ref.ID)
		}
		ids[ref.ID] = owner
		if ref.Legacy != installer.Namespace+"_"+installer.Name {
			t.Errorf("%s: legacy ID %q, want the ID of earlier versions", owner, ref.Legacy)
		}
	}
}

// cliErr runs converge against the test cluster and returns stdout, the error message and
// the exit code.
func cliErr(args ...string) (string, string, int) {
	return runOffline(append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
}

var objects = synctest.Objects

// newTestEngine is a one-shot engine on the test cluster, as the CLI builds.
func newTestEngine(t *testing.T) *engine.Engine { return synctest.Engine(t, env.Config) }

var quickApply = synctest.QuickApply

// uids maps the named ConfigMaps of ns to their UIDs and owner annotations.
func uids(t *testing.T, c client.Client, ns string, names ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range names {
		cm := &corev1.ConfigMap{}
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: n}, cm); err != nil {
			t.Fatalf("configmap %s: %v", n, err)
		}
		out[n] = string(cm.UID) + " " + cm.Annotations[engine.OwnerAnnotation]
	}
	return out
}

// TestOwnersDoNotCollide: what "converge apply --inventory NS/prod" applied is not the
// Sync prod's in NS, and the other way round: each refuses the other's object with a
// message naming the object (Kind namespace/name) and its owner in words, and changes
// nothing. Without it, both used the inventory ID NS_prod: the Sync took the CLI's object over
// and the CLI the Sync's.
func TestOwnersDoNotCollide(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "prod")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	x := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: NS}\ndata: {by: VALUE}\n"
	writeSet(t, dir, ns, map[string]string{"x.yaml": strings.Replace(x, "VALUE", "cli", 1)})
	if out, errOut, code := cliErr("apply", dir, "-n", ns, "--inventory", ns+"/prod", "--prune"); code != 0 {
		t.Fatalf("converge apply: exit %d: %s%s", code, out, errOut)
	}

	eng := newTestEngine(t)
	sync := &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "prod"}}
	y := "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: z, namespace: NS}\ndata: {by: VALUE}\n"
	set := engine.Set{Inventory: daemon.InventoryRef(sync), Objects: objects(t, ns,
		strings.Replace(x, "VALUE", "sync", 1), strings.Replace(y, "VALUE", "sync", 1))}
	_, err := eng.Apply(ctx, set, quickApply())
	want := "ConfigMap " + ns + "/x is owned by converge apply --inventory " + ns + "/prod; not adopted"
	if !errors.Is(err, engine.ErrNotOwned) || !strings.Contains(err.Error(), want) {
		t.Errorf("the Sync's apply: %v; want %q", err, want)
	}

	// The CLI, in turn, may not take the Sync's z.
	writeSet(t, dir, ns, map[string]string{"x.yaml": strings.Replace(x, "VALUE", "cli", 1), "z.yaml": strings.Replace(y, "VALUE", "cli", 1)})
	out, errOut, code := cliErr("apply", dir, "-n", ns, "--inventory", ns+"/prod", "--prune")
	want = "ConfigMap " + ns + "/z is owned by Sync " + ns + "/prod; not adopted"
	if code != exitCodeError || !strings.Contains(out+errOut, want) {
		t.Errorf("converge apply over the Sync's object: exit %d, %s%s; want exit 2 saying %q", code, out, errOut, want)
	}
	if strings.Contains(out+errOut, "sync_") || strings.Contains(out+errOut, "cli_") {
		t.Errorf("a message names an internal inventory ID:\n%s%s", out, errOut)
	}
	c, err := client.New(env.Config, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	for name, by := range map[string]string{"x": "cli", "z": "sync"} {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil || cm.Data["by"] != by {
			t.Errorf("configmap %s: %v, %v; want it left as %s applied it", name, cm.Data, err, by)
		}
	}
}
