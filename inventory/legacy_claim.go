package inventory

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// Migration is the state of an inventory whose migration from its legacy ID (Ref.Legacy)
// has started and not finished: its ConfigMap carries the new ID and MigratingAnnotation with
// the legacy ID (legacy_migrate.go). While it lasts, an object it lists may still carry the
// legacy ID, and Owns says whether such an object is the inventory's. The zero value is "no
// migration under way": Owns and Contested are false.
//
// Removed in v0.2, with the rest of the legacy_*.go files (see doc.go).
type Migration struct {
	// From is the legacy ID being migrated from; empty when no migration is under way.
	From string
	// Sibling is what the ConfigMap of the other inventory that shared From lists
	// (Store.Sibling): an object it lists is contested, never ours on the legacy ID's word.
	Sibling Sibling
}

// Owns reports whether the live object id, whose owner annotation is annotation, is the
// inventory's own under the legacy ID while the migration lasts: the annotation is From, the
// inventory's ConfigMap recorded this very UID (recorded: Claim.Recorded), and the ConfigMap
// of the other inventory that shared From does not list it (Sibling). The legacy ID was shared
// by a Sync and "converge apply --inventory" of the same namespace/name, anyone may write an
// annotation value, and anyone who may write a ConfigMap there may copy the other's UIDs: the
// recorded UID says that one of the two created or took the object, the sibling's list says it
// was not the other one. The legacy ID on an object not recorded with this UID, one the
// sibling lists, or once the migration has finished, is not ours.
//
// An entry the legacy ConfigMap recorded without UID (written ahead, never applied, or its UID
// lost to a crash) is settled by Store.Migrate, which records the UID first.
func (m Migration) Owns(id object.ObjMetadata, annotation string, recorded bool) bool {
	return m.From != "" && annotation == m.From && recorded && !m.Sibling.Lists(id)
}

// Contested reports whether the live object id, whose owner annotation is annotation, is
// contested while the migration lasts: it carries the legacy ID (From) and the other
// inventory that shared it lists it (Sibling). Such an entry is nobody's until a person
// decides, and it stays in the inventory as recorded: dropping it would tell the sibling
// that this inventory gave it up, and the sibling's migration would take it.
func (m Migration) Contested(id object.ObjMetadata, annotation string) bool {
	return m.From != "" && annotation == m.From && m.Sibling.Lists(id)
}

// migrationOf is the migration under way on ref's inventory, whose head ConfigMap is head:
// MigratingAnnotation with the value ref.Legacy (any other value is ignored, so a ConfigMap
// cannot claim the objects of a legacy ID that is not its own). While it is, it also reads
// what the other inventory of the legacy ID lists (Sibling): one more GET (and one per part
// of it). On a failed read it returns the migration's From with the error.
func (s *Store) migrationOf(ctx context.Context, ref Ref, head *corev1.ConfigMap) (Migration, error) {
	from := head.Annotations[MigratingAnnotation]
	if ref.Legacy == "" || from != ref.Legacy {
		return Migration{}, nil
	}
	sib, err := s.Sibling(ctx, ref)
	return Migration{From: from, Sibling: sib}, err
}

// ErrNotMigrated is wrapped by the error of a read of an inventory whose ConfigMap still
// carries its legacy ID (Ref.Legacy): Migrate has not taken it over yet. It is transient:
// the owner's next run migrates it.
var ErrNotMigrated = errors.New("inventory not migrated")

// notMigrated is the error about a ConfigMap of ref labelled id when id is ref's legacy ID
// (ErrNotMigrated); nil otherwise.
func notMigrated(ref Ref, id string) error {
	if ref.Legacy == "" || id != ref.Legacy {
		return nil
	}
	return fmt.Errorf("%w: the ConfigMap is still labelled %s=%s, the ID an earlier version gave this inventory; it is taken over (migrated) before the next run",
		ErrNotMigrated, IDLabel, id)
}
