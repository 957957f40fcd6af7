package inventory

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// OwnerAnnotation is the annotation whose value is the ID of the inventory that owns an
// object (cli-utils' owning-inventory annotation). The engine sets it on every object it
// applies.
const OwnerAnnotation = "config.k8s.io/owning-inventory"

// Claim is what an inventory's store says about which live objects are the inventory's
// own. Every ownership decision (an apply's take-over, a prune, a delete, an abandon) asks
// Owns, and a delete or a release also Recorded.
type Claim struct {
	// ID is the inventory's ID (Ref.ID).
	ID string
	// Found says the inventory's ConfigMap exists, so the UIDs it records were written by the
	// engine (or by whoever may write that ConfigMap). Entries recovered from a copy kept
	// elsewhere (the Sync status) come with Found false: their UIDs never make an object ours.
	Found bool
	// Version is the resourceVersion of the inventory's ConfigMap as read (Found), when the
	// inventory is that ConfigMap alone: every write of it changes the version, so equal
	// versions mean equal inventories (Store.Version). Empty for an inventory with parts
	// (parts.go): Converge never writes a part twice, but an edit of a part by hand would
	// not change the head's version.
	Version string
	// Migration is the migration from a legacy ID under way on this inventory
	// (legacy_claim.go); the zero value when none is.
	Migration Migration
}

// Recorded reports whether the inventory's ConfigMap recorded exactly this object: a UID
// is recorded for it (recorded) and equals the live object's (uid). A UID from a recovered
// copy never counts (Found is false then).
func (c Claim) Recorded(uid, recorded types.UID) bool {
	return c.Found && recorded != "" && recorded == uid
}

// Owns reports whether a live object whose owner annotation is annotation (OwnerAnnotation,
// "" when absent) is the inventory's own: the annotation equals the inventory's ID.
//
// The UID is each caller's second condition: a prune, a delete, a release and a forced
// recreate also require the UID the inventory recorded (Recorded, or a UID precondition, I1);
// an apply does not, since an entry written ahead by a run that stopped before its record has
// no UID yet. An object without annotation that the ConfigMap recorded is not "owned" here:
// an apply may put the annotation back (Recorded), but nothing deletes or releases it on that
// ground.
func (c Claim) Owns(annotation string) bool {
	return annotation != "" && annotation == c.ID
}

// PointerToken escapes key as one token of a JSON pointer (RFC 6901): "~" as "~0", "/" as
// "~1", so that a label or annotation key such as config.k8s.io/owning-inventory can be
// addressed in a JSON patch.
func PointerToken(key string) string { return pointerEscaper.Replace(key) }

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// OwnerPatch is the JSON patch that moves OwnerAnnotation from the owner from to the owner
// to (removes it when to is ""), only on the object with this UID and only while the
// annotation still names from: an object replaced or taken over since it was read fails
// the patch's test instead of changing hands.
func OwnerPatch(uid types.UID, from, to string) ([]byte, error) {
	path := "/metadata/annotations/" + PointerToken(OwnerAnnotation)
	last := map[string]string{"op": "remove", "path": path}
	if to != "" {
		last = map[string]string{"op": "replace", "path": path, "value": to}
	}
	return json.Marshal([]map[string]string{
		{"op": "test", "path": "/metadata/uid", "value": string(uid)},
		{"op": "test", "path": path, "value": from},
		last,
	})
}
