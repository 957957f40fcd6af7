package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/validation"
)

// TestIDsNeverCollide checks that the three kinds of owner of one namespace/name get three
// IDs, none of them a legacy ID, all valid label values, also when they are hashed.
func TestIDsNeverCollide(t *testing.T) {
	long := strings.Repeat("n", 63)
	for _, tc := range []struct{ name, ns, n string }{
		{"short", "apps", "prod"},
		{"dotted name", "apps", "prod.eu"},
		{"long namespace", long, "prod"},
		{"long name", "apps", strings.Repeat("p", 253)},
		{"both long", long, strings.Repeat("p.q-", 60) + "x"},
	} {
		seen := map[string]string{LegacyID(tc.ns, tc.n): "legacy"}
		for _, o := range []Owner{OwnerSync, OwnerCLI, OwnerInstall} {
			id := ID(o, tc.ns, tc.n)
			if errs := validation.IsValidLabelValue(id); len(errs) > 0 {
				t.Errorf("%s: %s: ID %q is not a label value: %v", tc.name, o, id, errs)
			}
			if other, ok := seen[id]; ok {
				t.Errorf("%s: %s and %s share the ID %q", tc.name, o, other, id)
			}
			seen[id] = string(o)
		}
	}
	// Hashing keeps IDs apart that share their first 63 characters.
	if a, b := ID(OwnerSync, long, "a"), ID(OwnerSync, long, "b"); a == b {
		t.Errorf("long IDs collide: %q", a)
	}
	// An unhashed ID never looks like a hashed one, nor like a legacy one.
	if id := ID(OwnerSync, "sync", "x"); strings.Count(id, "_") != 2 || strings.Contains(id, "__") {
		t.Errorf("unhashed ID %q", id)
	}
}

// TestDescribe checks that every owner is named in words, and unknown IDs as they are.
func TestDescribe(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{ID(OwnerSync, "apps", "prod"), "Sync apps/prod"},
		{ID(OwnerCLI, "apps", "prod.eu"), "converge apply --inventory apps/prod.eu"},
		{ID(OwnerInstall, "converge-system", "converge-install"), "converge install"},
		{LegacyID("apps", "prod"), `inventory "apps_prod" (written by an earlier version for Sync apps/prod or converge apply --inventory apps/prod)`},
		{"some-tool-id", `inventory "some-tool-id"`},
		{"other_apps_prod", `inventory "other_apps_prod"`},
	} {
		if diff := cmp.Diff(tc.want, Describe(tc.id)); diff != "" {
			t.Errorf("Describe(%q) (-want +got):\n%s", tc.id, diff)
		}
	}
	hashed := ID(OwnerSync, strings.Repeat("n", 63), "prod")
	if got := Describe(hashed); !strings.HasPrefix(got, "a Sync (inventory ") || !strings.Contains(got, hashed) {
		t.Errorf("Describe(%q) = %q", hashed, got)
	}
}
