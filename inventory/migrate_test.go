package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestMigrate checks the takeover of a legacy inventory: a dry-run writes nothing and
// answers with the legacy Ref; the migration re-annotates exactly the objects the legacy
// owner holds (not another owner's, not one recreated under another UID, not a missing one),
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
	want := map[string]string{"ours": ref.ID, "unknown-uid": ref.ID, "theirs": "sync_" + ns + "_other", "replaced": ref.Legacy}
	if diff := cmp.Diff(want, owners); diff != "" {
		t.Errorf("owner annotations (-want +got):\n%s", diff)
	}
	inv := &corev1.ConfigMap{}
	if err := plain.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, inv); err != nil {
		t.Fatal(err)
	}
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
