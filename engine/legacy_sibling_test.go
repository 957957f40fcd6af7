package engine

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/fault"
	"github.com/converge-dev/converge/inventory"
)

// cliLegacyRef is the inventory "converge apply --inventory NS/app" kept in earlier
// versions: the ConfigMap app, under the same legacy ID as the Sync app's app-inventory.
func (h *harness) cliLegacyRef() inventory.Ref {
	return inventory.Ref{Namespace: h.ns, Name: "app", ID: h.ref.Legacy}
}

// ownersBut is owners without the named ConfigMaps (inventories of the test).
func (h *harness) ownersBut(names ...string) map[string]string {
	h.t.Helper()
	out := h.owners()
	for _, n := range names {
		delete(out, n)
	}
	return out
}

// TestMigrateEntryWithoutUID checks an entry the legacy inventory recorded without UID: the
// write-ahead records "" for a new object, and an earlier version killed before it recorded
// the UID (the old leader stopped during the upgrade) leaves it so. The migration takes the
// object over (it carries the legacy ID and the other inventory of that ID does not list
// it), records its UID and finishes; the run that follows applies it as its own. Were it
// counted as not ours, the migration would finish, and the run would fail it "not adopted",
// drop it from the inventory and leave it with the legacy annotation and no owner.
func TestMigrateEntryWithoutUID(t *testing.T) {
	var crash atomic.Bool
	crash.Store(true)
	h, legacy := legacyHarness(t, Hooks{AfterApply: func(int, string) error {
		if crash.Load() {
			return errors.New("killed")
		}
		return nil
	}})
	a := configMap(h.ns, "a", map[string]any{"v": "1"})
	if _, err := h.eng.Apply(h.ctx, Set{Inventory: legacy, Objects: []*unstructured.Unstructured{a}}, testOpts()); err == nil {
		t.Fatal("the legacy apply was not stopped by its hook")
	}
	crash.Store(false)
	if got := h.recorded(legacy); !cmp.Equal(got, map[string]types.UID{"a": ""}) {
		t.Fatalf("legacy inventory after the crash = %v, want a without UID", got)
	}

	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	uid := h.liveCM("a").GetUID()
	if got := h.recorded(h.ref); !cmp.Equal(got, map[string]types.UID{"a": uid}) {
		t.Errorf("inventory after the migration = %v, want a with its UID %s", got, uid)
	}
	if _, ok := h.inventoryCM().Annotations[inventory.MigratingAnnotation]; ok {
		t.Errorf("the migration is not finished")
	}
	res, err := h.eng.Apply(h.ctx, h.set(a), testOpts())
	if err != nil || res.MigrationPending != "" {
		t.Fatalf("Apply after the migration: %v (pending %q)", err, res.MigrationPending)
	}
	if diff := cmp.Diff(map[string]string{"a": h.ref.ID}, h.owners()); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	wantKeys(t, "inventory", h.inventory(), cmID(h.ns, "a"))
}

// TestMigrateForgedSibling checks the tenant's forgery the recorded UID cannot tell apart:
// the admin's "converge apply --inventory NS/app" of an earlier version keeps objects under
// the legacy ID NS_app; a tenant who may write ConfigMaps in NS writes app-inventory with
// the new Sync label, the migration mark and the admin's entries (UIDs and all) and creates
// Sync app with prune. The Sync's Migrate leaves the admin's objects as they are and reports
// them (both ConfigMaps named), and its run neither takes nor prunes them, nor drops them from
// app-inventory; the admin's own migration then leaves them contested too, until the admin
// removes them from the tenant's app-inventory: then it takes them over. Before the sibling
// rule, Migrate re-annotated them for the Sync and the run pruned them.
func TestMigrateForgedSibling(t *testing.T) {
	h, _ := legacyHarness(t, Hooks{})
	h.applyLegacy(h.cliLegacyRef(), configMap(h.ns, "a", map[string]any{"v": "admin"}), configMap(h.ns, "b", nil))
	admin := &corev1.ConfigMap{}
	if err := h.plain.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "app"}, admin); err != nil {
		t.Fatal(err)
	}
	forged := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: h.ns, Name: h.ref.Name,
		Labels:      map[string]string{inventory.IDLabel: h.ref.ID},
		Annotations: map[string]string{inventory.MigratingAnnotation: h.ref.Legacy}}, Data: admin.Data}
	if err := h.plain.Create(h.ctx, forged); err != nil {
		t.Fatal(err)
	}

	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	want := map[string]string{"a": h.ref.Legacy, "b": h.ref.Legacy}
	if diff := cmp.Diff(want, h.ownersBut("app")); diff != "" {
		t.Fatalf("owners after the tenant's Migrate (-want +got):\n%s", diff)
	}
	res, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "tenant", nil)), testOpts())
	if err != nil {
		t.Fatalf("tenant's Apply: %v", err)
	}
	if diff := cmp.Diff(map[string]Action{cmID(h.ns, "a"): ActionSkipped, cmID(h.ns, "b"): ActionSkipped}, actions(res.Pruned)); diff != "" {
		t.Errorf("prune of the admin's objects (-want +got):\n%s", diff)
	}
	for _, s := range []string{"both ConfigMaps list it", h.ns + "/app-inventory", h.ns + "/app)", "converge apply --inventory " + h.ns + "/app"} {
		if !strings.Contains(res.MigrationPending, s) {
			t.Errorf("MigrationPending %q does not say %q", res.MigrationPending, s)
		}
	}
	want["tenant"] = h.ref.ID
	if diff := cmp.Diff(want, h.ownersBut("app")); diff != "" {
		t.Errorf("owners after the tenant's run (-want +got):\n%s", diff)
	}

	if got := h.recorded(h.ref); string(got["a"]) != admin.Data[cmID(h.ns, "a")] || string(got["b"]) != admin.Data[cmID(h.ns, "b")] || got["a"] == "" {
		t.Errorf("the tenant's inventory after its run = %v, want a and b as forged", got)
	}

	cli := inventory.Ref{Namespace: h.ns, Name: "app", ID: inventory.ID(inventory.OwnerCLI, h.ns, "app"), Legacy: h.ref.Legacy}
	if _, err := h.eng.Migrate(h.ctx, cli, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the admin's Migrate: %v", err)
	}
	if diff := cmp.Diff(want, h.ownersBut("app")); diff != "" {
		t.Errorf("owners after the admin's Migrate while contested (-want +got):\n%s", diff)
	}
	// The admin decides: a and b are not the tenant's.
	if _, err := inventory.NewStore(h.plain).Update(h.ctx, h.ref, func(s *inventory.Inventory) *inventory.Inventory {
		out := s.Clone()
		out.Remove(mustID(t, cmID(h.ns, "a")))
		out.Remove(mustID(t, cmID(h.ns, "b")))
		return out
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.eng.Migrate(h.ctx, cli, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("the admin's Migrate after the decision: %v", err)
	}
	want["a"], want["b"] = cli.ID, cli.ID
	if diff := cmp.Diff(want, h.ownersBut("app")); diff != "" {
		t.Errorf("owners after the admin's Migrate (-want +got):\n%s", diff)
	}
}

// TestAdoptContestedLegacy checks that adoption never takes an object under the legacy ID
// that the other inventory of that ID lists: a tenant's Sync app with spec.adopt declaring
// the admin's object (kept by "converge apply --inventory NS/app" of an earlier version)
// fails it, naming both ConfigMaps, and leaves it as it is. Adoption on the legacy ID's
// word would take it over.
func TestAdoptContestedLegacy(t *testing.T) {
	h, _ := legacyHarness(t, Hooks{})
	h.applyLegacy(h.cliLegacyRef(), configMap(h.ns, "a", map[string]any{"v": "admin"}))
	opts := testOpts()
	opts.Adopt = true
	_, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "a", map[string]any{"v": "tenant"})), opts)
	if !errors.Is(err, ErrNotAdopted) || !IsTerminal(err) || !strings.Contains(err.Error(), "ConfigMap "+h.ns+"/app)") ||
		!strings.Contains(err.Error(), h.ns+"/app-inventory") {
		t.Fatalf("Apply with adoption = %v; want a terminal %v naming both ConfigMaps", err, ErrNotAdopted)
	}
	a := h.liveCM("a")
	if a.GetAnnotations()[OwnerAnnotation] != h.ref.Legacy || a.Object["data"].(map[string]any)["v"] != "admin" {
		t.Errorf("the admin's object was changed: %v", a.Object)
	}
}

// TestPendingMigrationRetriesOnlyPending checks a migration whose patch of one object is
// always refused (a webhook, or RBAC that lets the Sync delete but not patch it): the next
// Migrate reads and patches only that object, not every entry, and Apply reports it in
// Result.MigrationPending until the refusal is lifted. Without retrying only the pending
// objects, every Migrate would send one GET per inventory entry; without
// Result.MigrationPending, nothing but a log line would say the migration is stuck.
func TestPendingMigrationRetriesOnlyPending(t *testing.T) {
	h, legacy := legacyHarness(t, Hooks{})
	var objs []*unstructured.Unstructured
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "stuck"} {
		objs = append(objs, configMap(h.ns, n, nil))
	}
	h.applyLegacy(legacy, objs...)
	h.rt.SetRules(fault.Rule{Verb: "patch", Resource: "configmaps", Name: "stuck", Status: http.StatusForbidden})
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	h.rt.Reset()
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	// The inventory, the other inventory of the legacy ID, stuck, and stuck again after
	// its refused patch.
	if got := h.rt.CountResource("get", "configmaps", ""); got != 4 {
		t.Errorf("second Migrate sent %d GETs of ConfigMaps, want 4 (counts %v)", got, h.rt.Counts())
	}
	if got := h.rt.CountResource("patch", "configmaps", ""); got != 1 {
		t.Errorf("second Migrate sent %d PATCHes, want 1 (stuck)", got)
	}
	opts := testOpts()
	opts.Prune = false
	res, err := h.eng.Apply(h.ctx, h.set(objs[:6]...), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.MigrationPending, "1 objects still carry") || !strings.Contains(res.MigrationPending, h.ns+"_stuck__ConfigMap") ||
		!strings.Contains(res.MigrationPending, "403") {
		t.Errorf("MigrationPending = %q, want stuck and why", res.MigrationPending)
	}

	h.rt.SetRules()
	if _, err := h.eng.Migrate(h.ctx, h.ref, inventory.DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate after the refusal was lifted: %v", err)
	}
	if owner := h.liveCM("stuck").GetAnnotations()[OwnerAnnotation]; owner != h.ref.ID {
		t.Errorf("stuck carries %q, want %q", owner, h.ref.ID)
	}
	if res, err := h.eng.Apply(h.ctx, h.set(objs...), opts); err != nil || res.MigrationPending != "" {
		t.Errorf("Apply after the migration finished: %v, pending %q", err, res.MigrationPending)
	}
}

// TestPendingSummaryBounded checks that Result.MigrationPending, which ends in a Sync's
// status, names at most maxPendingShown objects, counts the rest, and stays on one line.
func TestPendingSummaryBounded(t *testing.T) {
	ref := inventory.Ref{Namespace: "apps", Name: "web-inventory", ID: "sync_apps_web", Legacy: "apps_web"}
	p := &inventory.PendingError{Ref: ref}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		p.Objects = append(p.Objects, inventory.Entry{}.Object)
		p.Errs = append(p.Errs, errors.New(n+": refused"))
	}
	got := pendingSummary(p)
	want := `inventory apps/web-inventory: the migration from the legacy ID "apps_web" is not finished: 5 objects still carry ` +
		OwnerAnnotation + `=apps_web: a: refused; b: refused; c: refused; and 2 more`
	if got != want {
		t.Errorf("pendingSummary:\n got %s\nwant %s", got, want)
	}
}

// TestAdoptLegacyUnknownSibling checks adoption for a Sync whose name is over 230
// characters: its inventory ConfigMap name is cut and hashed, so the "converge apply
// --inventory" that shared its legacy ID (the ConfigMap of the Sync's full name) cannot be
// named from the Ref. An object carrying the legacy ID is not adopted on that ID's word: the
// message says how to let adoption take it. Adoption on the legacy ID's word would take the
// CLI's object.
func TestAdoptLegacyUnknownSibling(t *testing.T) {
	h := newHarness(t, Hooks{})
	long := strings.Repeat("l", 240)
	h.ref = inventory.Ref{Namespace: h.ns, Name: long[:221] + "-0123abcd-inventory",
		ID: inventory.ID(inventory.OwnerSync, h.ns, long), Legacy: inventory.LegacyID(h.ns, long)}
	h.applyLegacy(inventory.Ref{Namespace: h.ns, Name: long, ID: h.ref.Legacy}, configMap(h.ns, "a", map[string]any{"v": "admin"}))
	opts := testOpts()
	opts.Adopt = true
	_, err := h.eng.Apply(h.ctx, h.set(configMap(h.ns, "a", map[string]any{"v": "tenant"})), opts)
	if !errors.Is(err, ErrNotAdopted) || !IsTerminal(err) || !strings.Contains(err.Error(), "kubectl annotate configmap a -n "+h.ns+" "+OwnerAnnotation+"-") {
		t.Fatalf("Apply with adoption = %v; want a terminal %v saying how to let adoption take it", err, ErrNotAdopted)
	}
	if a := h.liveCM("a"); a.GetAnnotations()[OwnerAnnotation] != h.ref.Legacy || a.Object["data"].(map[string]any)["v"] != "admin" {
		t.Errorf("the CLI's object was changed: %v", a.Object)
	}
}

// mustID parses an inventory key (ns_name_group_kind).
func mustID(t *testing.T, key string) object.ObjMetadata {
	t.Helper()
	id, err := object.ParseObjMetadata(key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
