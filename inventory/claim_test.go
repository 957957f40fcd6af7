package inventory

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// TestClaimOwns checks the ownership rule every decision asks (Claim.Owns): the owner
// annotation is our ID, whatever the UID; another inventory's ID, a legacy ID or no
// annotation is not ours.
func TestClaimOwns(t *testing.T) {
	claim := Claim{ID: "sync_apps_prod", Found: true}
	contested := Claim{ID: "sync_apps_prod", Found: true, Migration: Migration{From: "apps_prod",
		Sibling: Sibling{Known: true, ConfigMap: "apps/prod", Listed: map[object.ObjMetadata]bool{cm("apps", "web"): true}}}}
	for _, tc := range []struct {
		name       string
		claim      Claim
		annotation string
		want       bool
	}{
		{"our ID", claim, "sync_apps_prod", true},
		{"our ID, the other inventory of the legacy ID lists it", contested, "sync_apps_prod", true},
		{"a legacy ID", claim, "apps_prod", false},
		{"another inventory", claim, "cli_apps_prod", false},
		{"no annotation", claim, "", false},
		{"no annotation, no ID", Claim{}, "", false},
	} {
		if got := tc.claim.Owns(tc.annotation); got != tc.want {
			t.Errorf("%s: Owns = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestClaimRecorded checks that a UID makes an object the recorded one only when the
// ConfigMap recorded that very UID, never from a recovered copy.
func TestClaimRecorded(t *testing.T) {
	found, recovered := Claim{ID: "sync_apps_prod", Found: true}, Claim{ID: "sync_apps_prod"}
	for _, tc := range []struct {
		name          string
		claim         Claim
		uid, recorded types.UID
		want          bool
	}{
		{"recorded UID", found, "u1", "u1", true},
		{"other UID", found, "u2", "u1", false},
		{"no UID recorded", found, "u1", "", false},
		{"recovered copy", recovered, "u1", "u1", false},
	} {
		if got := tc.claim.Recorded(tc.uid, tc.recorded); got != tc.want {
			t.Errorf("%s: Recorded = %v, want %v", tc.name, got, tc.want)
		}
	}
}
