package inventory

import (
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// Claim is what an inventory's store says about which live objects are the inventory's
// own. Every ownership decision (the migration's re-owning, an apply's take-over, a prune,
// a delete, an abandon) asks Owns, so a legacy owner annotation is honoured by the same rule
// everywhere, and only while its migration lasts.
type Claim struct {
	// ID is the inventory's ID (Ref.ID).
	ID string
	// Found says the inventory's ConfigMap exists, so the UIDs it records were written by the
	// engine (or by whoever may write that ConfigMap). Entries recovered from a copy kept
	// elsewhere (the Sync status) come with Found false: their UIDs never make an object ours.
	Found bool
	// MigratingFrom is the legacy ID (Ref.Legacy) of an inventory whose migration has
	// started but not finished: the ConfigMap carries the new label and MigratingAnnotation
	// with this value. Empty otherwise.
	MigratingFrom string
	// Sibling is what the ConfigMap of the other inventory that shared MigratingFrom lists
	// (Store.Sibling), read while the migration is under way: an object it lists is
	// contested, never ours on the legacy ID's word.
	Sibling Sibling
	// Version is the resourceVersion of the inventory's ConfigMap as read (Found), when the
	// inventory is that ConfigMap alone: every write of it changes the version, so equal
	// versions mean equal inventories (Store.Version). Empty for an inventory with parts
	// (parts.go): Converge never writes a part twice, but an edit of a part by hand would
	// not change the head's version.
	Version string
}

// Recorded reports whether the inventory's ConfigMap recorded exactly this object: a UID
// is recorded for it (recorded) and equals the live object's (uid). A UID from a recovered
// copy never counts (Found is false then).
func (c Claim) Recorded(uid, recorded types.UID) bool {
	return c.Found && recorded != "" && recorded == uid
}

// Owns reports whether the live object id, whose owner annotation is annotation
// (OwnerAnnotation, "" when absent) and whose UID is uid, is the inventory's own, given the
// UID the inventory recorded for it (recorded, "" when none):
//
//   - the annotation names the inventory (ID): ours, whatever the UID (callers that delete
//     still require the recorded UID, I1);
//   - the annotation is the legacy ID the inventory is being migrated from (MigratingFrom),
//     the legacy ConfigMap being migrated recorded this very UID (Recorded), and the
//     ConfigMap of the other inventory that shared the legacy ID does not list it (Sibling):
//     ours. The legacy ID was shared by a Sync and "converge apply --inventory" of the same
//     namespace/name, anyone may write an annotation value, and anyone who may write a
//     ConfigMap there may copy the other's UIDs: the recorded UID says that one of the two
//     created or took the object, the sibling's list says it was not the other one;
//   - anything else (no annotation, another inventory's ID, the legacy ID on an object the
//     legacy ConfigMap did not record with this UID or the sibling lists, or the legacy ID
//     once the migration has finished): not ours.
//
// An object without annotation that the ConfigMap recorded is not "owned" here: an apply may
// put the annotation back (Recorded), but nothing deletes or releases it on that ground.
// An entry the legacy ConfigMap recorded without UID (written ahead, never applied, or its
// UID lost to a crash) is settled by Migrate, which records the UID first.
func (c Claim) Owns(id object.ObjMetadata, annotation string, uid, recorded types.UID) bool {
	switch {
	case annotation == "":
		return false
	case annotation == c.ID:
		return true
	case c.MigratingFrom != "" && annotation == c.MigratingFrom:
		return c.Recorded(uid, recorded) && !c.Sibling.Lists(id)
	}
	return false
}

// Contested reports whether the live object id, whose owner annotation is annotation, is
// contested while the migration lasts: it carries the legacy ID (MigratingFrom) and the other
// inventory that shared it lists it (Sibling). Such an entry is nobody's until a person
// decides, and it stays in the inventory as recorded: dropping it would tell the sibling
// that this inventory gave it up, and the sibling's migration would take it.
func (c Claim) Contested(id object.ObjMetadata, annotation string) bool {
	return c.MigratingFrom != "" && annotation == c.MigratingFrom && c.Sibling.Lists(id)
}
