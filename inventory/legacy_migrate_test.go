package inventory

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestMigrate checks the takeover of a legacy inventory: a dry-run writes nothing and
// answers with the legacy Ref; the migration re-annotates exactly the objects the legacy
// owner holds with the recorded UID (not another owner's, not one recreated under another
// UID, not one listed without a UID, not a missing one),
// relabels the same ConfigMap and keeps every entry; a second call sends no write; and a
// ConfigMap of another owner is left alone and reported in words by Get.
func TestMigrate(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, rec, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "app", ID: ID(OwnerCLI, ns, "app"), Legacy: LegacyID(ns, "app")}
	create := func(name, owner string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{OwnerAnnotation: owner}}}
		if err := plain.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	ours, theirs, replaced := create("ours", ref.Legacy), create("theirs", "sync_"+ns+"_other"), create("replaced", ref.Legacy)
	legacy := ref
	legacy.ID = ref.Legacy
	if err := s.Write(ctx, legacy, New(e(ns, "ours", ours.UID), e(ns, "theirs", theirs.UID),
		e(ns, "replaced", "uid-of-an-earlier-copy"), e(ns, "gone", ""), e(ns, "unknown-uid", ""))); err != nil {
		t.Fatal(err)
	}
	unknown := create("unknown-uid", ref.Legacy) // inventoried ahead, UID not recorded yet
	invBefore := &corev1.ConfigMap{}
	if err := plain.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, invBefore); err != nil {
		t.Fatal(err)
	}

	writes := func() int { return rec.count("PATCH") + rec.count("PUT") + rec.count("POST") }
	before := writes()
	opts := DefaultMigrateOptions()
	opts.DryRun = true
	got, err := s.Migrate(ctx, ref, opts)
	if err != nil || got != legacy || writes() != before {
		t.Errorf("dry-run Migrate = %+v, %v, %d writes; want the legacy Ref and no write", got, err, writes()-before)
	}

	got, err = s.Migrate(ctx, ref, DefaultMigrateOptions())
	if err != nil || got != ref {
		t.Fatalf("Migrate = %+v, %v; want %+v", got, err, ref)
	}
	owners := map[string]string{}
	for _, cm := range []*corev1.ConfigMap{ours, theirs, replaced, unknown} {
		live := &corev1.ConfigMap{}
		if err := plain.Get(ctx, client.ObjectKeyFromObject(cm), live); err != nil {
			t.Fatal(err)
		}
		owners[cm.Name] = live.Annotations[OwnerAnnotation]
	}
	// unknown-uid: listed without a UID (written ahead by a run that stopped before recording
	// it) and not listed by the other inventory of the legacy ID (the Sync's app-inventory,
	// absent): ours, and its UID is recorded.
	want := map[string]string{"ours": ref.ID, "unknown-uid": ref.ID, "theirs": "sync_" + ns + "_other", "replaced": ref.Legacy}
	if diff := cmp.Diff(want, owners); diff != "" {
		t.Errorf("owner annotations (-want +got):\n%s", diff)
	}
	inv := &corev1.ConfigMap{}
	if err := plain.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, inv); err != nil {
		t.Fatal(err)
	}
	if _, ok := inv.Annotations[MigratingAnnotation]; ok {
		t.Errorf("a finished migration left the annotation %s", MigratingAnnotation)
	}
	invBefore.Data[cm(ns, "unknown-uid").String()] = string(unknown.UID)
	if inv.UID != invBefore.UID || inv.Labels[IDLabel] != ref.ID || !cmp.Equal(inv.Data, invBefore.Data) {
		t.Errorf("inventory: UID %s (was %s), label %q, data %v (was %v); want the same ConfigMap, relabelled, same entries",
			inv.UID, invBefore.UID, inv.Labels[IDLabel], inv.Data, invBefore.Data)
	}
	stored, err := s.Get(ctx, ref)
	if err != nil || stored.Len() != 5 || stored.UID(cm(ns, "ours")) != ours.UID {
		t.Errorf("Get under the new ID = %v, %v", stored.Entries(), err)
	}

	before = writes()
	if _, err := s.Migrate(ctx, ref, DefaultMigrateOptions()); err != nil || writes() != before {
		t.Errorf("second Migrate: %v, %d writes; want none", err, writes()-before)
	}

	// Another owner's ConfigMap under this name: not migrated, and Get says whose it is.
	other := Ref{Namespace: ns, Name: "app", ID: ID(OwnerSync, ns, "app"), Legacy: LegacyID(ns, "app")}
	if got, err := s.Migrate(ctx, other, DefaultMigrateOptions()); err != nil || got != other {
		t.Errorf("Migrate of another owner's ConfigMap = %+v, %v", got, err)
	}
	_, err = s.Get(ctx, other)
	if err == nil || !strings.Contains(err.Error(), "holds the inventory of converge apply --inventory "+ns+"/app, not of Sync "+ns+"/app") {
		t.Errorf("Get of another owner's ConfigMap: %v", err)
	}
}

// TestMigratePerObject checks that one object that cannot be re-annotated (a conflict, a
// refusal for its kind) does not hold the migration up: the inventory is taken over at once
// (new label, every entry, MigratingAnnotation), every other object is re-annotated, Migrate
// reports ErrMigrationPending, Lookup's Claim owns the object left behind (its recorded UID
// with the legacy ID) but not a look-alike the legacy inventory did not record, and the next
// Migrate finishes: the object is re-annotated and the annotation removed. Were the
// migration all or nothing, it would fail as a whole and leave the ConfigMap under the
// legacy ID, so the set could not be applied, pruned or deleted until every object could be
// patched.
func TestMigratePerObject(t *testing.T) {
	cluster.Require(t, env)
	for _, status := range []int{http.StatusConflict, http.StatusForbidden} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			ctx := testCtx(t)
			ns := env.Namespace(t)
			s, rec, plain := newStore(t)
			ref := Ref{Namespace: ns, Name: "app-inventory", ID: ID(OwnerSync, ns, "app"), Legacy: LegacyID(ns, "app")}
			create := func(name, owner string) *corev1.ConfigMap {
				t.Helper()
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
					Annotations: map[string]string{OwnerAnnotation: owner}}}
				if err := plain.Create(ctx, cm); err != nil {
					t.Fatal(err)
				}
				return cm
			}
			a, b, stuck := create("a", ref.Legacy), create("b", ref.Legacy), create("stuck", ref.Legacy)
			forged := create("forged", ref.Legacy) // carries the legacy ID, never recorded
			legacy := ref
			legacy.ID = ref.Legacy
			if err := s.Write(ctx, legacy, New(e(ns, "a", a.UID), e(ns, "b", b.UID), e(ns, "stuck", stuck.UID))); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			refuse := true
			rec.fail = func(r *http.Request) int {
				mu.Lock()
				defer mu.Unlock()
				if refuse && r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/configmaps/stuck") {
					return status
				}
				return 0
			}
			owners := func() map[string]string {
				t.Helper()
				out := map[string]string{}
				for _, cm := range []*corev1.ConfigMap{a, b, stuck, forged} {
					live := &corev1.ConfigMap{}
					if err := plain.Get(ctx, client.ObjectKeyFromObject(cm), live); err != nil {
						t.Fatal(err)
					}
					out[cm.Name] = live.Annotations[OwnerAnnotation]
				}
				return out
			}

			got, err := s.Migrate(ctx, ref, DefaultMigrateOptions())
			if !errors.Is(err, ErrMigrationPending) || got != ref || !strings.Contains(err.Error(), ns+"_stuck__ConfigMap") {
				t.Fatalf("Migrate with one object refused = %+v, %v; want %+v and %v naming the object", got, err, ref, ErrMigrationPending)
			}
			wantOwners := map[string]string{"a": ref.ID, "b": ref.ID, "stuck": ref.Legacy, "forged": ref.Legacy}
			if diff := cmp.Diff(wantOwners, owners()); diff != "" {
				t.Errorf("owner annotations after a partial migration (-want +got):\n%s", diff)
			}
			inv, claim, err := s.Lookup(ctx, ref)
			if err != nil || inv.Len() != 3 {
				t.Fatalf("Lookup under the new ID = %v, %v; want the 3 legacy entries", inv.Entries(), err)
			}
			want := Claim{ID: ref.ID, Found: true, Migration: Migration{From: ref.Legacy,
				Sibling: Sibling{Known: true, ConfigMap: ns + "/app", Owner: "converge apply --inventory " + ns + "/app"}}}
			if claim.Version == "" {
				t.Error("the claim has no version")
			}
			claim.Version = ""
			if diff := cmp.Diff(want, claim); diff != "" {
				t.Errorf("claim during the migration (-want +got):\n%s", diff)
			}
			if !claim.Migration.Owns(cm(ns, "stuck"), ref.Legacy, claim.Recorded(stuck.UID, inv.UID(cm(ns, "stuck")))) {
				t.Error("the object left under the legacy ID is not ours")
			}
			if claim.Migration.Owns(cm(ns, "forged"), ref.Legacy, claim.Recorded(forged.UID, inv.UID(cm(ns, "forged")))) {
				t.Error("an object the legacy inventory did not record is ours")
			}

			mu.Lock()
			refuse = false
			mu.Unlock()
			if got, err := s.Migrate(ctx, ref, DefaultMigrateOptions()); err != nil || got != ref {
				t.Fatalf("second Migrate = %+v, %v; want %+v, nil", got, err, ref)
			}
			wantOwners["stuck"] = ref.ID
			if diff := cmp.Diff(wantOwners, owners()); diff != "" {
				t.Errorf("owner annotations after the migration finished (-want +got):\n%s", diff)
			}
			if _, claim, err := s.Lookup(ctx, ref); err != nil || claim.Migration.From != "" {
				t.Errorf("Lookup after the migration finished: claim %+v, %v; want no legacy ID", claim, err)
			}
			before := rec.count("PATCH") + rec.count("PUT")
			if _, err := s.Migrate(ctx, ref, DefaultMigrateOptions()); err != nil || rec.count("PATCH")+rec.count("PUT") != before {
				t.Errorf("third Migrate: %v, %d writes; want none", err, rec.count("PATCH")+rec.count("PUT")-before)
			}
		})
	}
}

// TestLookupHonoursOnlyItsOwnLegacyID checks that the migration mark of a ConfigMap counts
// only with the inventory's own legacy ID: a ConfigMap its tenant marked with another
// inventory's ID (to claim the objects that carry it) claims nothing under that ID.
func TestLookupHonoursOnlyItsOwnLegacyID(t *testing.T) {
	cluster.Require(t, env)
	ctx := testCtx(t)
	ns := env.Namespace(t)
	s, _, plain := newStore(t)
	ref := Ref{Namespace: ns, Name: "app-inventory", ID: ID(OwnerSync, ns, "app"), Legacy: LegacyID(ns, "app")}
	for _, tc := range []struct{ mark, want string }{
		{LegacyID(ns, "other"), ""},
		{ref.Legacy, ref.Legacy},
	} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ref.Name,
			Labels: map[string]string{IDLabel: ref.ID}, Annotations: map[string]string{MigratingAnnotation: tc.mark}}}
		if err := plain.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		_, claim, err := s.Lookup(ctx, ref)
		if err != nil || claim.Migration.From != tc.want || !claim.Found {
			t.Errorf("mark %q: Lookup claim %+v, %v; want MigratingFrom %q", tc.mark, claim, err, tc.want)
		}
		if err := plain.Delete(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}
