package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestSiblingOf checks which ConfigMap shared a Ref's legacy ID: the CLI's <name> for a
// Sync's <name>-inventory, the Sync's <name>-inventory for the CLI's (and the install's)
// <name>, including a CLI inventory whose own name ends in -inventory and a Sync named
// x-inventory; none for a Ref without legacy ID or one not built by ID and LegacyID, and no
// ConfigMap for a CLI name too long for a Sync's inventory.
func TestSiblingOf(t *testing.T) {
	long := strings.Repeat("n", maxSyncName+1)
	for _, tc := range []struct {
		name     string
		ref      Ref
		want     Ref
		wantKnow bool
	}{
		{"sync", Ref{Namespace: "apps", Name: "web-inventory", ID: ID(OwnerSync, "apps", "web"), Legacy: LegacyID("apps", "web")},
			Ref{Namespace: "apps", Name: "web", ID: ID(OwnerCLI, "apps", "web"), Legacy: LegacyID("apps", "web")}, true},
		{"cli", Ref{Namespace: "apps", Name: "web", ID: ID(OwnerCLI, "apps", "web"), Legacy: LegacyID("apps", "web")},
			Ref{Namespace: "apps", Name: "web-inventory", ID: ID(OwnerSync, "apps", "web"), Legacy: LegacyID("apps", "web")}, true},
		{"cli named x-inventory", Ref{Namespace: "apps", Name: "x-inventory", ID: ID(OwnerCLI, "apps", "x-inventory"), Legacy: LegacyID("apps", "x-inventory")},
			Ref{Namespace: "apps", Name: "x-inventory-inventory", ID: ID(OwnerSync, "apps", "x-inventory"), Legacy: LegacyID("apps", "x-inventory")}, true},
		{"sync named x-inventory", Ref{Namespace: "apps", Name: "x-inventory-inventory", ID: ID(OwnerSync, "apps", "x-inventory"), Legacy: LegacyID("apps", "x-inventory")},
			Ref{Namespace: "apps", Name: "x-inventory", ID: ID(OwnerCLI, "apps", "x-inventory"), Legacy: LegacyID("apps", "x-inventory")}, true},
		{"install", Ref{Namespace: "converge-system", Name: "converge-install", ID: ID(OwnerInstall, "converge-system", "converge-install"), Legacy: LegacyID("converge-system", "converge-install")},
			Ref{Namespace: "converge-system", Name: "converge-install-inventory", ID: ID(OwnerSync, "converge-system", "converge-install"), Legacy: LegacyID("converge-system", "converge-install")}, true},
		{"cli name too long for a sync", Ref{Namespace: "apps", Name: long, ID: ID(OwnerCLI, "apps", long), Legacy: LegacyID("apps", long)}, Ref{}, true},
		{"sync name too long for its ConfigMap name (cut and hashed)", Ref{Namespace: "apps", Name: long[:221] + "-0123abcd-inventory",
			ID: ID(OwnerSync, "apps", long), Legacy: LegacyID("apps", long)}, Ref{}, false},
		{"no legacy ID", Ref{Namespace: "apps", Name: "web", ID: "x"}, Ref{}, false},
		{"foreign legacy ID", Ref{Namespace: "apps", Name: "web", ID: "x", Legacy: "other_web"}, Ref{}, false},
	} {
		got, ok := siblingOf(tc.ref)
		if got != tc.want || ok != tc.wantKnow {
			t.Errorf("%s: siblingOf = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.wantKnow)
		}
	}
}

// TestMigrateContested checks the objects of a Sync's legacy inventory that the CLI's
// inventory of the same legacy ID (the sibling) also lists: Migrate re-annotates neither the
// one recorded with its UID nor the one recorded without, records no UID for the latter,
// keeps the migration mark and reports both as a PendingError whose errors are
// ContestedErrors naming both ConfigMaps; Lookup's claim owns neither. An object only this
// inventory lists is migrated, and a ConfigMap under the sibling's name that is not an
// inventory of the legacy ID contests nothing. Were the sibling not read, both contested
// objects would be ours (one by its copied UID), the one without UID would be left and the
// migration would finish.
func TestMigrateContested(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "app-inventory", ID: ID(OwnerSync, ns, "app"), Legacy: LegacyID(ns, "app")}
	create := func(name string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{OwnerAnnotation: ref.Legacy}}}
		if err := plain.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	copied, noUID, mine := create("copied"), create("no-uid"), create("mine")
	legacy := ref
	legacy.ID = ref.Legacy
	if err := s.Write(ctx, legacy, New(e(ns, "copied", copied.UID), e(ns, "no-uid", ""), e(ns, "mine", ""))); err != nil {
		t.Fatal(err)
	}
	cli := Ref{Namespace: ns, Name: "app", ID: ref.Legacy}
	if err := s.Write(ctx, cli, New(e(ns, "copied", copied.UID), e(ns, "no-uid", noUID.UID))); err != nil {
		t.Fatal(err)
	}

	_, err := s.Migrate(ctx, ref, DefaultMigrateOptions())
	var pe *PendingError
	if !errors.As(err, &pe) || !errors.Is(err, ErrMigrationPending) {
		t.Fatalf("Migrate = %v, want a PendingError", err)
	}
	if diff := cmp.Diff([]object.ObjMetadata{cm(ns, "copied"), cm(ns, "no-uid")}, pe.Objects); diff != "" {
		t.Errorf("pending objects (-want +got):\n%s", diff)
	}
	for _, err := range pe.Errs {
		var ce *ContestedError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "ConfigMap "+ns+"/app-inventory") ||
			!strings.Contains(err.Error(), "converge apply --inventory "+ns+"/app (ConfigMap "+ns+"/app)") {
			t.Errorf("pending error %v: want a ContestedError naming both ConfigMaps", err)
		}
	}
	owners := map[string]string{}
	for _, c := range []*corev1.ConfigMap{copied, noUID, mine} {
		live := &corev1.ConfigMap{}
		if err := plain.Get(ctx, client.ObjectKeyFromObject(c), live); err != nil {
			t.Fatal(err)
		}
		owners[c.Name] = live.Annotations[OwnerAnnotation]
	}
	if diff := cmp.Diff(map[string]string{"copied": ref.Legacy, "no-uid": ref.Legacy, "mine": ref.ID}, owners); diff != "" {
		t.Errorf("owners (-want +got):\n%s", diff)
	}
	inv, claim, err := s.Lookup(ctx, ref)
	if err != nil || claim.Migration.From != ref.Legacy {
		t.Fatalf("Lookup = %+v, %v; want the migration under way", claim, err)
	}
	if inv.UID(cm(ns, "no-uid")) != "" || inv.UID(cm(ns, "mine")) != mine.UID {
		t.Errorf("recorded UIDs %v: want none for no-uid, mine's for mine", inv.Entries())
	}
	if claim.Migration.Owns(cm(ns, "copied"), ref.Legacy, claim.Recorded(copied.UID, inv.UID(cm(ns, "copied")))) {
		t.Error("the claim owns an object the sibling lists")
	}

	// The sibling's name held by something that is not an inventory of the legacy ID.
	sib := &corev1.ConfigMap{}
	if err := plain.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, sib); err != nil {
		t.Fatal(err)
	}
	sib.Labels[IDLabel] = "someone-else"
	if err := plain.Update(ctx, sib); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Migrate(ctx, ref, DefaultMigrateOptions()); err != nil {
		t.Fatalf("Migrate once the sibling lists nothing: %v", err)
	}
	if inv, err := s.Get(ctx, ref); err != nil || inv.UID(cm(ns, "no-uid")) != noUID.UID {
		t.Errorf("no-uid recorded as %v (%v), want %s", inv.UID(cm(ns, "no-uid")), err, noUID.UID)
	}
}

// TestSiblingReadsParts: the other inventory of the legacy ID lists the objects of its part
// ConfigMaps as much as those of its head, so an object only a part lists is contested too.
// Were only the head's entries read, such an object could be taken over.
func TestSiblingReadsParts(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := smallParts(t)
	ref := Ref{Namespace: ns, Name: "app-inventory", ID: ID(OwnerSync, ns, "app"), Legacy: LegacyID(ns, "app")}
	sref, _ := siblingOf(ref)
	listed := New(entries(ns, "a", 10)...)
	if err := s.Write(ctx, sref, listed); err != nil {
		t.Fatal(err)
	}
	if names := partNames(configMaps(t, plain, ns)[sref.Name]); len(names) == 0 {
		t.Fatal("the sibling has no parts: the test needs some")
	}
	sib, err := s.Sibling(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range listed.Entries() {
		if !sib.Listed[e.Object] {
			t.Errorf("Sibling.Listed lacks %s", e.Object)
		}
	}
}
