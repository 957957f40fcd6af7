package main

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
)

// exists reports whether ConfigMap ns/name exists, and its owner annotation.
func exists(t *testing.T, ns, name string) (bool, string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	err := testClient(t).Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return false, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return true, cm.Annotations[engine.OwnerAnnotation]
}

// TestDeleteCLI: "converge delete --inventory" shows with --dry-run what would go (exit 1,
// nothing deleted), deletes the set and its inventory (--wait: gone when it returns), then
// finds nothing (exit 2, or 0 with --ignore-not-found); --cascade=orphan keeps the objects,
// released.
func TestDeleteCLI(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := setDir(t, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	cliRun(t, "apply", dir, "--inventory", ns+"/app").expect(t, "apply", 0, []string{"2 created"}, nil)

	cliRun(t, "delete", "--inventory", "app", "-n", ns, "--dry-run").expect(t, "delete --dry-run", 1,
		[]string{"ConfigMap/" + ns + "/one pruned", "ConfigMap/" + ns + "/two pruned"}, nil)
	for _, name := range []string{"one", "two", "app"} {
		if ok, _ := exists(t, ns, name); !ok {
			t.Errorf("ConfigMap %s gone after a dry-run", name)
		}
	}
	cliRun(t, "delete", "--inventory", ns+"/app", "--wait").expect(t, "delete", 0,
		[]string{"ConfigMap/" + ns + "/one pruned", "2 pruned", "inventory " + ns + "/app deleted"}, nil)
	for _, name := range []string{"one", "two", "app"} {
		if ok, _ := exists(t, ns, name); ok {
			t.Errorf("ConfigMap %s still there after delete --wait", name)
		}
	}
	cliRun(t, "delete", "--inventory", ns+"/app").expect(t, "delete again", 2, nil, []string{"inventory " + ns + "/app not found"})
	cliRun(t, "delete", "--inventory", ns+"/app", "--ignore-not-found").expect(t, "--ignore-not-found", 0, nil, nil)

	cliRun(t, "apply", dir, "--inventory", ns+"/app").expect(t, "apply again", 0, []string{"2 created"}, nil)
	cliRun(t, "delete", "--inventory", ns+"/app", "--cascade=orphan").expect(t, "--cascade=orphan", 0,
		[]string{"inventory " + ns + "/app deleted"}, nil)
	for _, name := range []string{"one", "two"} {
		if ok, owner := exists(t, ns, name); !ok || owner != "" {
			t.Errorf("ConfigMap %s after --cascade=orphan: exists %v, owner %q; want kept and released", name, ok, owner)
		}
	}
	if ok, _ := exists(t, ns, "app"); ok {
		t.Error("inventory still there after --cascade=orphan")
	}
}

// TestDeleteCLIRefusesOtherOwners: the inventories of a Sync and of "converge install", and a
// ConfigMap that is no inventory, are refused, saying what removes them; nothing is deleted.
func TestDeleteCLIRefusesOtherOwners(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	c := testClient(t)
	for name, id := range map[string]string{
		"web-inventory":     inventory.ID(inventory.OwnerSync, ns, "web"),
		"install-inventory": inventory.ID(inventory.OwnerInstall, ns, "converge"),
		"plain":             "",
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if id != "" {
			cm.Labels = map[string]string{inventory.IDLabel: id}
		}
		if err := c.Create(context.Background(), cm); err != nil {
			t.Fatal(err)
		}
	}
	cliRun(t, "delete", "--inventory", ns+"/web-inventory").expect(t, "a Sync's", 2, nil,
		[]string{"is the inventory of Sync " + ns + "/web, not of converge apply: delete the Sync"})
	cliRun(t, "delete", "--inventory", ns+"/install-inventory").expect(t, "install's", 2, nil,
		[]string{"is the inventory of converge install: remove it with converge uninstall"})
	cliRun(t, "delete", "--inventory", ns+"/plain").expect(t, "no inventory", 2, nil, []string{"it is not an inventory"})
	for _, name := range []string{"web-inventory", "install-inventory", "plain"} {
		if ok, _ := exists(t, ns, name); !ok {
			t.Errorf("ConfigMap %s deleted", name)
		}
	}
}

// overwrite puts ns/two in the state an apply of a set holding ConfigMap ns/two under
// --inventory ns/two left it in before such sets were refused: ConfigMap one owned by the
// inventory, and the inventory's ConfigMap two carrying the set's data and owner annotation
// beside the entries of one and of itself.
func overwrite(t *testing.T, ns string) {
	t.Helper()
	c := testClient(t)
	ctx := context.Background()
	id := inventory.ID(inventory.OwnerCLI, ns, "two")
	ann := map[string]string{engine.OwnerAnnotation: id}
	one := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "one", Annotations: ann}, Data: map[string]string{"a": "1"}}
	two := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "two", Annotations: ann,
		Labels: map[string]string{inventory.IDLabel: id}}, Data: map[string]string{"a": "1"}}
	one.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}                             // applied by the engine, as the set's object
	if err := c.Patch(ctx, one, client.Apply, client.FieldOwner(engine.FieldManager)); err != nil { //nolint:staticcheck // SSA as the engine
		t.Fatal(err)
	}
	if err := c.Create(ctx, two); err != nil {
		t.Fatal(err)
	}
	two.Data[ns+"_one__ConfigMap"] = string(one.UID)
	two.Data[ns+"_two__ConfigMap"] = string(two.UID)
	if err := c.Update(ctx, two); err != nil {
		t.Fatal(err)
	}
}

// TestApplyCLIOverwrittenInventory: an inventory an earlier version overwrote with its own
// set's ConfigMap is refused by apply with what to do, nothing pruned; "converge delete
// --cascade=orphan" repairs and releases it; the set then applies under another name.
func TestApplyCLIOverwrittenInventory(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	overwrite(t, ns)
	dir := setDir(t, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	hint := "converge delete --inventory " + ns + "/two --cascade=orphan"
	cliRun(t, "apply", dir, "--inventory", ns+"/two").expect(t, "apply with ConfigMap two", 2, nil,
		[]string{"has the name of its own inventory", hint})
	writeSet(t, dir, ns, map[string]string{"one.yaml": cmNamed("one")})
	r := cliRun(t, "apply", dir, "--inventory", ns+"/two", "--prune")
	r.expect(t, "apply without ConfigMap two", 2, nil, []string{`overwritten by ConfigMap ` + ns + `/two of its own set (its data key "a"`, hint})
	if strings.Contains(r.stdout, "pruned") {
		t.Errorf("refused run pruned:\n%s", r.stdout)
	}
	cliRun(t, "delete", "--inventory", ns+"/two", "--cascade=orphan").expect(t, "delete --cascade=orphan", 0,
		[]string{"inventory " + ns + "/two deleted"}, []string{`took out its keys`})
	if ok, owner := exists(t, ns, "one"); !ok || owner != "" {
		t.Errorf("ConfigMap one after --cascade=orphan: exists %v, owner %q; want kept and released", ok, owner)
	}
	writeSet(t, dir, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	cliRun(t, "apply", dir, "--inventory", ns+"/two-set").expect(t, "apply under another name", 0, []string{"1 created, 1 configured"}, nil)
}

// TestStatusListsCLIInventories: converge status lists the inventories of converge apply in
// -n's namespace, or every namespace with -A, with the objects each owns; one overwritten by
// its own set's ConfigMap shows what to do; a Sync's inventory is not listed among them.
func TestStatusListsCLIInventories(t *testing.T) {
	cluster.Require(t, env)
	ns, broken := env.Namespace(t), env.Namespace(t)
	dir := setDir(t, ns, map[string]string{"one.yaml": cmNamed("one"), "two.yaml": cmNamed("two")})
	cliRun(t, "apply", dir, "--inventory", ns+"/app").expect(t, "apply", 0, []string{"2 created"}, nil)
	overwrite(t, broken)
	sync := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-inventory",
		Labels: map[string]string{inventory.IDLabel: inventory.ID(inventory.OwnerSync, ns, "web")}}}
	if err := testClient(t).Create(context.Background(), sync); err != nil {
		t.Fatal(err)
	}
	r := cliRun(t, "status", "-n", ns)
	r.expect(t, "status -n", 0, []string{"NAME", "OBJECTS", "inventory/app "}, nil)
	if strings.Contains(r.stdout, "web-inventory") || strings.Contains(r.stdout, "inventory/two") {
		t.Errorf("status -n %s lists a Sync's inventory or another namespace's:\n%s", ns, r.stdout)
	}
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "inventory/app ") && strings.Fields(l)[1] != "2" {
			t.Errorf("OBJECTS of inventory/app: %q, want 2", l)
		}
	}
	r = cliRun(t, "status", "-A", "-o", "wide")
	r.expect(t, "status -A -o wide", 0, []string{ns + "  ", "inventory/app ", broken + "  ", "inventory/two ",
		"converge delete --inventory " + broken + "/two --cascade=orphan"}, nil)
}
