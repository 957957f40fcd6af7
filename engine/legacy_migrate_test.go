package engine

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

// legacyHarness is a harness whose set has a new inventory ID (as a Sync "app" now has) and
// the legacy ID of earlier versions; legacy is the Ref those versions used.
func legacyHarness(t *testing.T, hooks Hooks) (h *harness, legacy inventory.Ref) {
	h = newHarness(t, hooks)
	h.ref = inventory.Ref{Namespace: h.ns, Name: "app-inventory",
		ID: inventory.ID(inventory.OwnerSync, h.ns, "app"), Legacy: inventory.LegacyID(h.ns, "app")}
	return h, inventory.Ref{Namespace: h.ns, Name: h.ref.Name, ID: h.ref.Legacy}
}

// applyLegacy applies objs as an earlier version did: under the legacy ID, with its owner
// annotation and inventory label.
func (h *harness) applyLegacy(legacy inventory.Ref, objs ...*unstructured.Unstructured) {
	h.t.Helper()
	if _, err := h.eng.Apply(h.ctx, Set{Inventory: legacy, Objects: objs}, testOpts()); err != nil {
		h.t.Fatalf("legacy apply: %v", err)
	}
}

// owners maps the names of the namespace's ConfigMaps (but the inventory) to their owner
// annotation, read by the independent client.
func (h *harness) owners() map[string]string {
	h.t.Helper()
	list := &corev1.ConfigMapList{}
	if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		if cm.Name != h.ref.Name && cm.Name != "kube-root-ca.crt" {
			out[cm.Name] = cm.Annotations[OwnerAnnotation]
		}
	}
	return out
}

// inventoryCM reads the inventory ConfigMap itself.
func (h *harness) inventoryCM() *corev1.ConfigMap {
	h.t.Helper()
	cm := &corev1.ConfigMap{}
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: h.ref.Name}, cm); err != nil {
		h.t.Fatal(err)
	}
	return cm
}

// replaceCM deletes a ConfigMap and creates another one under its name (another UID) with
// the owner annotation owner, as another tool or person would.
func (h *harness) replaceCM(name, owner string) {
	h.t.Helper()
	if old := h.liveCM(name); old != nil {
		if err := h.plain.Delete(h.ctx, old); err != nil {
			h.t.Fatal(err)
		}
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = h.ns, name
	cm.Annotations = map[string]string{OwnerAnnotation: owner}
	if err := h.plain.Create(h.ctx, cm); err != nil {
		h.t.Fatal(err)
	}
}

// recorded returns the inventory stored under ref as name -> UID, read by the
// independent client.
func (h *harness) recorded(ref inventory.Ref) map[string]types.UID {
	h.t.Helper()
	inv, err := inventory.NewStore(h.plain).Get(h.ctx, ref)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]types.UID{}
	for _, e := range inv.Entries() {
		out[e.Object.Name] = e.UID
	}
	return out
}

// ownedDuringMigrationInventoried checks I2 during a migration: every live ConfigMap that
// carries the new ID, or the legacy ID with the UID the legacy inventory recorded
// (legacyUIDs, by name), is in the inventory stored under the new ID, with that UID.
func (h *harness) ownedDuringMigrationInventoried(legacyUIDs map[string]types.UID) {
	h.t.Helper()
	inv := h.recorded(h.ref)
	list := &corev1.ConfigMapList{}
	if err := h.plain.List(h.ctx, list, client.InNamespace(h.ns)); err != nil {
		h.t.Fatal(err)
	}
	for _, cm := range list.Items {
		owner := cm.Annotations[OwnerAnnotation]
		ours := owner == h.ref.ID || owner == h.ref.Legacy && legacyUIDs[cm.Name] == cm.UID
		if uid, ok := inv[cm.Name]; ours && (!ok || uid != "" && uid != cm.UID) {
			h.t.Errorf("I2: %s (UID %s) carries %s=%s but the inventory has %v", cm.Name, cm.UID, OwnerAnnotation, owner, inv)
		}
	}
}

// TestPartialMigrationConverges checks a migration that cannot re-annotate some objects (a
// 403 on their patches, as for a kind the service account may not patch, or a conflict):
// Migrate still takes the inventory over, and the run that follows treats the objects left
// under the legacy ID with their recorded UID as ours: it applies the declared one, prunes
// the dropped one (I8: nothing else), leaves alone an object someone replaced (another UID)
// and one someone annotated with the legacy ID that the inventory never recorded (I11, I14:
// the UID decides). The next run finishes the migration and then sends nothing (I7).
// Were the migration all or nothing, the one refused patch would fail it whole: the
// inventory would stay under the legacy ID and the set could be neither applied nor pruned.
func TestPartialMigrationConverges(t *testing.T) {
	h, legacy := legacyHarness(t, Hooks{})
	objs := map[string]*unstructured.Unstructured{}
	for _, n := range []string{"keep", "drop", "stuck-keep", "stuck-drop", "replaced"} {
		objs[n] = configMap(h.ns, n, map[string]any{"v": "1"})
	}
	h.applyLegacy(legacy, objs["keep"], objs["drop"], objs["stuck-keep"], objs["stuck-drop"], objs["replaced"])
	h.replaceCM("replaced", h.ref.Legacy) // replaced by someone else, annotation and all
	h.replaceCM("forged", h.ref.Legacy)   // never in the inventory
	legacyUIDs := h.recorded(legacy)

	h.rt.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Name: "stuck-keep", Status: http.StatusForbidden},
		fault.Rule{Verb: "patch", Resource: "configmaps", Name: "stuck-drop", Status: http.StatusConflict})
	ref, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions())
	if err != nil || ref != h.ref {
		t.Fatalf("Migrate with two objects refused = %+v, %v; want %+v, nil", ref, err, h.ref)
	}
	h.rt.SetRules()
	want := map[string]string{"keep": h.ref.ID, "drop": h.ref.ID, "stuck-keep": h.ref.Legacy, "stuck-drop": h.ref.Legacy,
		"replaced": h.ref.Legacy, "forged": h.ref.Legacy}
	if diff := cmp.Diff(want, h.owners()); diff != "" {
		t.Errorf("owners after the partial migration (-want +got):\n%s", diff)
	}
	if cm := h.inventoryCM(); cm.Annotations[inventory.MigratingAnnotation] != h.ref.Legacy {
		t.Errorf("inventory annotations %v, want %s: %s while objects are left", cm.Annotations, inventory.MigratingAnnotation, h.ref.Legacy)
	}
	h.ownedDuringMigrationInventoried(legacyUIDs)

	// The same run goes on: the repository now declares keep and stuck-keep only.
	res := h.apply(testOpts(), objs["keep"], objs["stuck-keep"])
	// keep carries the new ID already; stuck-keep gets it from the apply.
	wantActions := map[string]Action{cmID(h.ns, "keep"): ActionUnchanged, cmID(h.ns, "stuck-keep"): ActionConfigured}
	if diff := cmp.Diff(wantActions, actions(res.Changes)); diff != "" {
		t.Errorf("apply actions (-want +got):\n%s", diff)
	}
	wantPruned := map[string]Action{cmID(h.ns, "drop"): ActionPruned, cmID(h.ns, "stuck-drop"): ActionPruned,
		cmID(h.ns, "replaced"): ActionSkipped}
	if diff := cmp.Diff(wantPruned, actions(res.Pruned)); diff != "" {
		t.Errorf("prune actions (-want +got):\n%s", diff)
	}
	want = map[string]string{"keep": h.ref.ID, "stuck-keep": h.ref.ID, "replaced": h.ref.Legacy, "forged": h.ref.Legacy}
	if diff := cmp.Diff(want, h.owners()); diff != "" {
		t.Errorf("owners after the run (-want +got):\n%s", diff)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "keep"), cmID(h.ns, "stuck-keep"))

	// The next run finishes the migration, and the one after sends nothing.
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; ok {
		t.Errorf("the finished migration left %s", inventory.MigratingAnnotation)
	}
	h.apply(testOpts(), objs["keep"], objs["stuck-keep"])
	h.rt.Reset()
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatal(err)
	}
	h.apply(testOpts(), objs["keep"], objs["stuck-keep"])
	if w := h.rt.Writes(); len(w) != 0 {
		t.Errorf("I7: a converged run after the migration wrote %v", w)
	}
}

// TestPartialMigrationDeleteAndAbandon checks that Delete and Abandon of an inventory
// whose migration is under way act on the objects left under the legacy ID with their
// recorded UID, and never on a look-alike (another UID, or never recorded) (I1, I12).
// Were the migration all or nothing, the refused migration would fail, and the inventory
// would read as another owner's.
func TestPartialMigrationDeleteAndAbandon(t *testing.T) {
	for _, policy := range []string{"delete", "abandon"} {
		t.Run(policy, func(t *testing.T) {
			h, legacy := legacyHarness(t, Hooks{})
			h.applyLegacy(legacy, configMap(h.ns, "a", nil), configMap(h.ns, "b", nil), configMap(h.ns, "replaced", nil))
			h.replaceCM("replaced", h.ref.Legacy)
			h.replaceCM("forged", h.ref.Legacy)
			h.rt.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Name: "a", Status: http.StatusForbidden},
				fault.Rule{Verb: "patch", Resource: "configmaps", Name: "b", Status: http.StatusForbidden})
			if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			h.rt.SetRules()
			want := map[string]string{"replaced": h.ref.Legacy, "forged": h.ref.Legacy}
			var err error
			if policy == "delete" {
				_, err = h.eng.Delete(h.ctx, h.ref, DefaultDeleteOptions())
			} else {
				_, err = h.eng.Abandon(h.ctx, h.ref, DefaultDeleteOptions())
				want["a"], want["b"] = "", ""
			}
			if err != nil {
				t.Fatalf("%s: %v", policy, err)
			}
			if diff := cmp.Diff(want, h.owners()); diff != "" {
				t.Errorf("owners after %s (-want +got):\n%s", policy, diff)
			}
			if h.liveCM(h.ref.Name) != nil {
				t.Error("the inventory ConfigMap survived")
			}
		})
	}
}

// TestCrashDuringMigration crashes Migrate right after the inventory was relabelled and
// after each object it re-annotated. At every crash point nothing is lost: the inventory
// holds every object, each live object carrying the new ID or the legacy ID with its
// recorded UID is inventoried (I2). A restarted engine finishes the migration, prunes the
// object the repository dropped (whichever ID it carried), and leaves a look-alike alone.
func TestCrashDuringMigration(t *testing.T) {
	for k := 0; k <= 3; k++ {
		t.Run(fmt.Sprintf("after %d", k), func(t *testing.T) {
			hooks := inventory.MigrateHooks{AfterReown: func(j int, _ string) error {
				if j == k {
					return errCrash
				}
				return nil
			}}
			if k == 0 {
				hooks = inventory.MigrateHooks{AfterRelabel: func() error { return errCrash }}
			}
			crash, legacy := legacyHarness(t, Hooks{Migrate: hooks})
			objs := []*unstructured.Unstructured{configMap(crash.ns, "a", nil), configMap(crash.ns, "b", nil), configMap(crash.ns, "c", nil)}
			crash.applyLegacy(legacy, objs...)
			crash.replaceCM("forged", crash.ref.Legacy)
			legacyUIDs := crash.recorded(legacy)
			opts := inventory.DefaultMigrateOptions()
			opts.Concurrency = 1
			if _, err := crash.eng.Migrate(crash.ctx, crash.ref, opts); !errors.Is(err, errCrash) {
				t.Fatalf("Migrate = %v, want the crash", err)
			}
			wantKeys(t, "inventory", crash.inventory(), cmID(crash.ns, "a"), cmID(crash.ns, "b"), cmID(crash.ns, "c"))
			crash.ownedDuringMigrationInventoried(legacyUIDs)

			h := newHarness(t, Hooks{})
			h.ns, h.ref = crash.ns, crash.ref
			if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
				t.Fatalf("Migrate after the crash: %v", err)
			}
			res := h.apply(testOpts(), objs[1:]...)
			if got := actions(res.Pruned)[cmID(h.ns, "a")]; got != ActionPruned {
				t.Errorf("a: prune action %q, want pruned (%v)", got, res.Pruned)
			}
			want := map[string]string{"b": h.ref.ID, "c": h.ref.ID, "forged": h.ref.Legacy}
			if diff := cmp.Diff(want, h.owners()); diff != "" {
				t.Errorf("owners (-want +got):\n%s", diff)
			}
			if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; ok {
				t.Errorf("the finished migration left %s", inventory.MigratingAnnotation)
			}
			wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "b"), cmID(h.ns, "c"))
		})
	}
}

// TestLostLegacyInventory: a set of an earlier version whose inventory ConfigMap was lost
// before the upgrade. Its objects carry the legacy ID, which anyone may write, so they are
// not taken over silently: the run fails them with a message that names the object, the
// annotation and its value, and says how to take it over (adoption) or let it go (the
// kubectl command). With adoption they are taken over; an object carrying another
// inventory's ID still is not (I11). A message saying only that the legacy inventory owns
// the object, with adoption unable to take it over, would leave it failing forever.
func TestLostLegacyInventory(t *testing.T) {
	h, legacy := legacyHarness(t, Hooks{})
	h.applyLegacy(legacy, configMap(h.ns, "a", map[string]any{"v": "1"}))
	if err := inventory.NewStore(h.plain).Delete(h.ctx, legacy, inventory.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.replaceCM("other", "sync_"+h.ns+"_other")
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	a := configMap(h.ns, "a", map[string]any{"v": "2"})
	_, err := h.eng.Apply(h.ctx, h.set(a), testOpts())
	want := "ConfigMap " + h.ns + "/a: apply: not adopted: ConfigMap " + h.ns + "/a carries config.k8s.io/owning-inventory=" + h.ref.Legacy +
		", this inventory's legacy ID, but " + h.ns + "/app-inventory does not record it;" +
		" adopt it (Sync spec.adopt, converge apply --adopt) or remove the annotation:" +
		" kubectl annotate configmap a -n " + h.ns + " config.k8s.io/owning-inventory-"
	if err == nil || err.Error() != want {
		t.Fatalf("Apply error:\n got %v\nwant %s", err, want)
	}
	if !errors.Is(err, ErrNotAdopted) || !IsTerminal(err) {
		t.Errorf("error is not a terminal %v: %v", ErrNotAdopted, err)
	}
	if got := h.liveCM("a"); got.GetAnnotations()[OwnerAnnotation] != h.ref.Legacy || got.Object["data"].(map[string]any)["v"] != "1" {
		t.Errorf("a was changed without adoption: %v", got.Object)
	}

	opts := testOpts()
	opts.Adopt = true
	_, err = h.eng.Apply(h.ctx, h.set(a, configMap(h.ns, "other", nil)), opts)
	if !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "ConfigMap "+h.ns+"/other") {
		t.Errorf("Apply with adoption = %v, want other refused (%v)", err, ErrNotOwned)
	}
	want2 := map[string]string{"a": h.ref.ID, "other": "sync_" + h.ns + "_other"}
	if diff := cmp.Diff(want2, h.owners()); diff != "" {
		t.Errorf("owners after adoption (-want +got):\n%s", diff)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"))
}

// TestMigrateMemoForgets checks that an engine's memory of settled migrations is never
// wrong for long: after Delete removed the inventory (a Sync deleted and recreated under the
// same name, whose restored inventory carries the legacy ID again), and when a run finds the
// ConfigMap under the legacy ID although the migration was remembered as settled (a Sync
// whose finalizer was stripped, recreated, with a restored inventory), the next Migrate takes
// the inventory over. Were every ID kept in memory forever, Migrate would skip the restored
// inventory and every run would fail on it as another owner's.
func TestMigrateMemoForgets(t *testing.T) {
	for _, how := range []string{"deleted", "finalizer stripped"} {
		t.Run(how, func(t *testing.T) {
			h, legacy := legacyHarness(t, Hooks{})
			migrate := func() {
				t.Helper()
				if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
					t.Fatalf("Migrate: %v", err)
				}
			}
			migrate() // nothing to migrate: remembered
			h.apply(testOpts(), configMap(h.ns, "new", nil))
			if how == "deleted" {
				if _, err := h.eng.Delete(h.ctx, h.ref, DefaultDeleteOptions()); err != nil {
					t.Fatal(err)
				}
			} else if err := inventory.NewStore(h.plain).Delete(h.ctx, h.ref, inventory.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			// A restored backup of an earlier version: its inventory and its object.
			restored := newHarness(t, Hooks{})
			restored.ns = h.ns
			restored.applyLegacy(legacy, configMap(h.ns, "old", nil))

			migrate()
			_, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "old", nil)), testOpts())
			if how == "finalizer stripped" {
				// Nothing told this engine: the run finds out, and the next one migrates.
				if !errors.Is(err, inventory.ErrNotMigrated) || IsTerminal(err) {
					t.Fatalf("Apply on the restored legacy inventory = %v, want a transient %v", err, inventory.ErrNotMigrated)
				}
				migrate()
				_, err = h.eng.Apply(h.ctx, h.set(configMap(h.ns, "old", nil)), testOpts())
			}
			if err != nil {
				t.Fatalf("Apply after the migration: %v", err)
			}
			if got := h.owners()["old"]; got != h.ref.ID {
				t.Errorf("old: owner %q, want %q", got, h.ref.ID)
			}
		})
	}
}

// TestSettledIsBounded checks that the memory of settled migrations does not grow past
// its bound.
func TestSettledIsBounded(t *testing.T) {
	s := settled{max: 3}
	for i := range 10 {
		s.add(fmt.Sprint(i))
		if n := s.len(); n > 3 {
			t.Fatalf("after %d adds: %d IDs remembered, bound 3", i+1, n)
		}
	}
	if !s.has("9") {
		t.Error("the last ID added is not remembered")
	}
	s.forget("9")
	if s.has("9") {
		t.Error("a forgotten ID is remembered")
	}
}
