package engine

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/converge-dev/converge/inventory"
)

// TestContestedStaysInBothInventories is the reviewer's sequence: objects the Sync's legacy
// inventory (app-inventory) and the CLI's (app) both list are contested. The Sync reconciles
// twice (one contested object declared, one not, with prune), then the CLI's "apply
// --inventory NS/app" runs (with prune, declaring neither): each object stays in both
// ConfigMaps with its recorded UID, carries the legacy ID and its data unchanged, and is
// reported, until a person removes it from the Sync's ConfigMap; then the CLI's migration
// takes it, and only then does the Sync's migration finish. Before, the Sync's run dropped
// both from app-inventory (a failed take-over untracked one, the prune dropped the other),
// its next Migrate found nothing left to settle and removed the migration mark, and the
// CLI's next run took both over on the legacy ID's word.
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
