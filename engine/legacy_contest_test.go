package engine

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

// TestContestedStaysInBothInventories is this sequence: objects the Sync's legacy
// inventory (app-inventory) and the CLI's (app) both list are contested. The Sync reconciles
// twice (one contested object declared, one not, with prune), then the CLI's "apply
// --inventory NS/app" runs (with prune, declaring neither): each object stays in both
// ConfigMaps with its recorded UID, carries the legacy ID and its data unchanged, and is
// reported, until a person removes it from the Sync's ConfigMap; then the CLI's migration
// takes it, and only then does the Sync's migration finish. Were contested objects not
// kept, the Sync's run would drop both from app-inventory (a failed take-over untracking
// one, the prune dropping the other), its next Migrate would find nothing left to settle
// and remove the migration mark, and the CLI's next run would take both over on the legacy
// ID's word.
func TestContestedStaysInBothInventories(t *testing.T) {
	h, legacy := legacyHarness(t, Hooks{})
	x := configMap(h.ns, "x", map[string]any{"v": "one"})
	y := configMap(h.ns, "y", map[string]any{"v": "one"})
	h.applyLegacy(legacy, x, y)
	h.applyLegacy(h.cliLegacyRef(), x, y)
	uids := map[string]types.UID{"x": h.liveCM("x").GetUID(), "y": h.liveCM("y").GetUID()}
	cli := inventory.Ref{Namespace: h.ns, Name: "app", ID: inventory.ID(inventory.OwnerCLI, h.ns, "app"), Legacy: h.ref.Legacy}
	cliRecorded := func() map[string]types.UID {
		t.Helper()
		if _, err := inventory.NewStore(h.plain).Get(h.ctx, cli); errors.Is(err, inventory.ErrNotMigrated) {
			return h.recorded(h.cliLegacyRef())
		}
		return h.recorded(cli)
	}
	check := func(when string, sync map[string]types.UID, cliToo bool) {
		t.Helper()
		if got := h.recorded(h.ref); !cmp.Equal(got, sync) {
			t.Errorf("%s: the Sync's inventory = %v, want %v", when, got, sync)
		}
		if got := cliRecorded(); cliToo && !cmp.Equal(got, map[string]types.UID{"x": uids["x"], "y": uids["y"]}) {
			t.Errorf("%s: the CLI's inventory = %v, want x and y", when, got)
		}
		for _, n := range []string{"x", "y"} {
			live := h.liveCM(n)
			if live == nil || live.GetAnnotations()[OwnerAnnotation] != h.ref.Legacy || live.Object["data"].(map[string]any)["v"] != "one" || live.GetUID() != uids[n] {
				t.Errorf("%s: %s was changed: %v", when, n, live.Object)
			}
		}
	}

	// The first run declares x (its take-over fails), the second declares neither (its
	// prune meets both).
	for i, objs := range [][]*unstructured.Unstructured{
		{configMap(h.ns, "x", map[string]any{"v": "sync"}), configMap(h.ns, "s", nil)},
		{configMap(h.ns, "s", nil)},
	} {
		if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
			t.Fatalf("the Sync's Migrate %d: %v", i, err)
		}
		res, err := h.eng.Apply(h.ctx, h.set(objs...), testOpts())
		if (err == nil) != (i == 1) || res.MigrationPending == "" {
			t.Errorf("the Sync's run %d: err %v, pending %q; want x failed in the first and both reported", i, err, res.MigrationPending)
		}
		uids["s"] = h.liveCM("s").GetUID()
		check("after the Sync's run", uids, true)
	}
	delete(uids, "s")
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; !ok {
		t.Fatal("the Sync's migration mark was removed while its objects are contested")
	}

	if _, err := h.eng.Migrate(h.ctx, cli, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the CLI's Migrate: %v", err)
	}
	res, err := h.eng.Apply(h.ctx, Set{Inventory: cli, Objects: []*unstructured.Unstructured{configMap(h.ns, "z", nil)}}, testOpts())
	if err != nil || res.MigrationPending == "" {
		t.Errorf("the CLI's run: err %v, pending %q; want both reported", err, res.MigrationPending)
	}
	uids["s"] = h.liveCM("s").GetUID()
	check("after the CLI's run", uids, false)
	delete(uids, "s")
	if got := cliRecorded(); !cmp.Equal(got, map[string]types.UID{"x": uids["x"], "y": uids["y"], "z": h.liveCM("z").GetUID()}) {
		t.Errorf("the CLI's inventory after its run = %v, want x, y and z", got)
	}

	// A person gives x and y to the CLI: removes them from the Sync's ConfigMap.
	if _, err := inventory.NewStore(h.plain).Update(h.ctx, h.ref, func(s *inventory.Inventory) *inventory.Inventory {
		out := s.Clone()
		for _, e := range s.Entries() {
			out.Remove(e.Object)
		}
		return out
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the Sync's Migrate after the person's decision: %v", err)
	}
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; !ok {
		t.Error("the Sync's migration finished while x and y still carry the legacy ID")
	}
	if _, err := h.eng.Migrate(h.ctx, cli, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the CLI's Migrate after the person's decision: %v", err)
	}
	for _, n := range []string{"x", "y"} {
		if owner := h.liveCM(n).GetAnnotations()[OwnerAnnotation]; owner != cli.ID {
			t.Errorf("%s carries %q, want the CLI's %q", n, owner, cli.ID)
		}
	}
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the Sync's last Migrate: %v", err)
	}
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; ok {
		t.Error("the Sync's migration did not finish once the CLI took x and y")
	}
}

// TestMigrateIgnoresWriteAheadOfMarkedInventory checks that an entry the engine wrote ahead
// (without UID) while a migration is marked is not taken for a legacy entry recorded without
// UID: a Sync declares an object its legacy inventory never recorded that carries the legacy
// ID (its inventory was lost before the upgrade), the run stops after the write-ahead, and a
// new engine's full Migrate must not take it over: that needs spec.adopt. Were it taken for
// a legacy entry, the migration would record its UID and re-annotate it, and the next run
// would apply it as its own.
func TestMigrateIgnoresWriteAheadOfMarkedInventory(t *testing.T) {
	var crash atomic.Bool
	h, legacy := legacyHarness(t, Hooks{AfterWriteAhead: func() error {
		if crash.Load() {
			return errors.New("killed")
		}
		return nil
	}})
	h.applyLegacy(legacy, configMap(h.ns, "a", nil), configMap(h.ns, "stuck", nil))
	lost := inventory.Ref{Namespace: h.ns, Name: "lost", ID: h.ref.Legacy}
	h.applyLegacy(lost, configMap(h.ns, "orphan", map[string]any{"v": "old"}))
	if err := h.plain.Delete(h.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: "lost"}}); err != nil {
		t.Fatal(err)
	}
	h.rt.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Name: "stuck", Status: http.StatusForbidden})
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	h.rt.Reset()
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; !ok {
		t.Fatal("the migration is not marked")
	}
	crash.Store(true)
	if _, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "a", nil), configMap(h.ns, "stuck", nil),
		configMap(h.ns, "orphan", map[string]any{"v": "new"})), testOpts()); err == nil {
		t.Fatal("the run was not stopped by its hook")
	}
	crash.Store(false)
	if uid, ok := h.recorded(h.ref)["orphan"]; !ok || uid != "" {
		t.Fatalf("orphan in the inventory after the crash: %q, %v; want written ahead without UID", uid, ok)
	}

	restarted, err := New(env.Config, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate after the restart: %v", err)
	}
	orphan := h.liveCM("orphan")
	if owner := orphan.GetAnnotations()[OwnerAnnotation]; owner != h.ref.Legacy {
		t.Errorf("orphan carries %q after the migration, want still %q", owner, h.ref.Legacy)
	}
	if uid := h.recorded(h.ref)["orphan"]; uid != "" {
		t.Errorf("the migration recorded orphan's UID %s", uid)
	}
	_, err = restarted.Apply(h.ctx, h.set(configMap(h.ns, "a", nil), configMap(h.ns, "stuck", nil),
		configMap(h.ns, "orphan", map[string]any{"v": "new"})), testOpts())
	if !errors.Is(err, ErrNotAdopted) {
		t.Errorf("Apply without adoption = %v, want %v for orphan", err, ErrNotAdopted)
	}
	if v := h.liveCM("orphan").Object["data"].(map[string]any)["v"]; v != "old" {
		t.Errorf("orphan was applied without adoption: v=%v", v)
	}
}

// TestDeleteGivesUpContested checks that deleting a Sync whose inventory lists a contested
// object (the CLI's legacy inventory lists it too) finishes: the object is left as it is,
// dropped with the inventory, and the CLI's migration then takes it. A contested entry is
// kept by an Apply's prune, which must not make a Sync undeletable until a person decides.
func TestDeleteGivesUpContested(t *testing.T) {
	h, legacy := legacyHarness(t, Hooks{})
	x := configMap(h.ns, "x", map[string]any{"v": "one"})
	h.applyLegacy(legacy, x)
	h.applyLegacy(h.cliLegacyRef(), x)
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := h.eng.Delete(h.ctx, h.ref, DeleteOptions{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	live := h.liveCM("x")
	if live == nil || live.GetAnnotations()[OwnerAnnotation] != h.ref.Legacy {
		t.Fatalf("x after the Sync's Delete: %v", live)
	}
	cli := inventory.Ref{Namespace: h.ns, Name: "app", ID: inventory.ID(inventory.OwnerCLI, h.ns, "app"), Legacy: h.ref.Legacy}
	if _, err := h.eng.Migrate(h.ctx, cli, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the CLI's Migrate: %v", err)
	}
	if owner := h.liveCM("x").GetAnnotations()[OwnerAnnotation]; owner != cli.ID {
		t.Errorf("x carries %q, want the CLI's %q", owner, cli.ID)
	}
}
