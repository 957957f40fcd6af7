package inventory

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// TestMigrationOwns checks the rule that makes an object carrying the legacy ID ours
// (Migration.Owns, beside Claim.Owns while a migration is under way): only during the
// migration, only with the UID the ConfigMap recorded, never from a recovered copy, never
// when the other inventory of the legacy ID lists it; and never our ID or another's.
func TestMigrationOwns(t *testing.T) {
	migrating := Claim{ID: "sync_apps_prod", Found: true, Migration: Migration{From: "apps_prod"}}
	recovered := migrating
	recovered.Found = false
	contested := migrating
	contested.Migration.Sibling = Sibling{Known: true, ConfigMap: "apps/prod", Listed: map[object.ObjMetadata]bool{cm("apps", "web"): true}}
	for _, tc := range []struct {
		name          string
		claim         Claim
		annotation    string
		uid, recorded types.UID
		want          bool
	}{
		{"legacy ID, recorded UID", migrating, "apps_prod", "u1", "u1", true},
		{"legacy ID, recorded UID, the other inventory of the legacy ID lists it", contested, "apps_prod", "u1", "u1", false},
		{"legacy ID, other UID", migrating, "apps_prod", "u2", "u1", false},
		{"legacy ID, no UID recorded", migrating, "apps_prod", "u1", "", false},
		{"legacy ID, recovered copy", recovered, "apps_prod", "u1", "u1", false},
		{"legacy ID, migration finished", Claim{ID: "sync_apps_prod", Found: true}, "apps_prod", "u1", "u1", false},
		{"another inventory", migrating, "cli_apps_prod", "u1", "u1", false},
		{"no annotation", migrating, "", "u1", "u1", false},
	} {
		got := tc.claim.Migration.Owns(cm("apps", "web"), tc.annotation, tc.claim.Recorded(tc.uid, tc.recorded))
		if got != tc.want {
			t.Errorf("%s: Migration.Owns = %v, want %v", tc.name, got, tc.want)
		}
	}
}
