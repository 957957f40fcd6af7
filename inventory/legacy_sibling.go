package inventory

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// syncSuffix ends the name of a Sync's inventory ConfigMap (<sync name>-inventory), where
// "converge apply --inventory NAMESPACE/NAME" keeps its inventory in the ConfigMap NAME.
const syncSuffix = "-inventory"

// maxSyncName is the longest Sync name whose inventory ConfigMap name is <name>-inventory
// (the daemon cuts longer names, which then make no valid ConfigMap name).
const maxSyncName = 230

// Sibling is the other inventory that shared a Ref's legacy ID: the legacy ID namespace_name
// was given both to Sync namespace/name (ConfigMap <name>-inventory) and to "converge apply
// --inventory namespace/name" (ConfigMap <name>), so an object carrying it may be either's.
// The recorded UID does not tell them apart (anyone who may write a ConfigMap in the
// namespace can copy the other's UIDs): an object the sibling's ConfigMap lists is
// contested, and neither inventory takes it over on the legacy ID's word (Migration.Owns,
// Migrate, adoption). A person decides, by removing it from one of the two ConfigMaps or
// by setting the owner annotation by hand.
type Sibling struct {
	// Known says the sibling's ConfigMap could be named (every Ref built by ID and LegacyID
	// for a Sync, the CLI or "converge install"); when false nothing can be checked and an
	// entry without UID is never taken over on the legacy ID's word.
	Known bool
	// ConfigMap is the sibling's ConfigMap, namespace/name.
	ConfigMap string
	// Owner names the sibling in words (Describe of its new ID).
	Owner string
	// Listed holds the objects the sibling's ConfigMap lists while it holds the legacy ID or
	// the sibling's own ID; nil when it does not exist or holds something else.
	Listed map[object.ObjMetadata]bool
}

// Lists reports whether the sibling's ConfigMap lists id.
func (s Sibling) Lists(id object.ObjMetadata) bool { return s.Listed[id] }

// siblingOf returns the Ref of the inventory that shared ref's legacy ID: for a Sync's
// ConfigMap <name>-inventory the CLI's <name>, for the CLI's (or the install's) <name> the
// Sync's <name>-inventory. ok is false when ref has no legacy ID or none of the two shapes
// gives it back (a Ref not built by ID and LegacyID).
func siblingOf(ref Ref) (sib Ref, ok bool) {
	if ref.Legacy == "" {
		return Ref{}, false
	}
	if name, cut := strings.CutSuffix(ref.Name, syncSuffix); cut && name != "" && LegacyID(ref.Namespace, name) == ref.Legacy {
		return Ref{Namespace: ref.Namespace, Name: name, ID: ID(OwnerCLI, ref.Namespace, name), Legacy: ref.Legacy}, true
	}
	if LegacyID(ref.Namespace, ref.Name) == ref.Legacy {
		if len(ref.Name) > maxSyncName {
			return Ref{}, true // no Sync of that name can have kept an inventory
		}
		return Ref{Namespace: ref.Namespace, Name: ref.Name + syncSuffix, ID: ID(OwnerSync, ref.Namespace, ref.Name), Legacy: ref.Legacy}, true
	}
	return Ref{}, false
}

// Sibling reads the ConfigMap of the inventory that shared ref's legacy ID (see Sibling):
// one GET (and one per part it has), only needed while a legacy ID can still make an object ours.
func (s *Store) Sibling(ctx context.Context, ref Ref) (Sibling, error) {
	sref, ok := siblingOf(ref)
	if !ok || sref.Name == "" {
		return Sibling{Known: ok}, nil
	}
	sib := Sibling{Known: true, ConfigMap: sref.String(), Owner: Describe(sref.ID)}
	// Its parts list objects as much as its head does (an unreadable part fails the read:
	// it must never count as listing nothing). Parts continue the ID the head carries. A
	// part replaced between reading the head and reading it is a conflict: read again.
	var cms []*corev1.ConfigMap
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms = nil
		cm, err := s.get(ctx, sref)
		if err != nil || cm == nil {
			return err
		}
		id := cm.Labels[IDLabel]
		if id != sref.Legacy && id != sref.ID {
			return nil // not the sibling's inventory: it lists nothing of the legacy ID
		}
		pref := sref
		pref.ID = id
		parts, err := s.readParts(ctx, pref, cm)
		if err != nil {
			return err
		}
		cms = append([]*corev1.ConfigMap{cm}, parts...)
		return nil
	})
	if err != nil {
		return Sibling{}, fmt.Errorf("inventory %s: the other inventory of legacy ID %q: %w", ref, ref.Legacy, err)
	}
	for _, c := range cms {
		for key := range c.Data {
			id, err := object.ParseObjMetadata(key)
			if err != nil {
				continue // not an object: it cannot contest one
			}
			if sib.Listed == nil {
				sib.Listed = map[object.ObjMetadata]bool{}
			}
			sib.Listed[id] = true
		}
	}
	return sib, nil
}

// ContestedError is the error about an object that carries a legacy ID both inventories
// that shared it list (see Sibling): neither takes it over until a person decides.
type ContestedError struct {
	Object    object.ObjMetadata
	Legacy    string
	ConfigMap string // ours, namespace/name
	Sibling   Sibling
}

func (e *ContestedError) Error() string {
	return fmt.Sprintf("%s carries %s=%s, the ID earlier versions gave both to this inventory (ConfigMap %s) and to %s (ConfigMap %s), "+
		"and both ConfigMaps list it: Converge cannot tell whose it is; remove it from the ConfigMap of the inventory that does not own it, "+
		"or set the annotation to the owner's new ID by hand (kubectl annotate --overwrite … %s=…)",
		describeObject(e.Object), OwnerAnnotation, e.Legacy, e.ConfigMap, e.Sibling.Owner, e.Sibling.ConfigMap, OwnerAnnotation)
}

// describeObject names an object as Kind namespace/name.
func describeObject(id object.ObjMetadata) string {
	if id.Namespace == "" {
		return id.GroupKind.Kind + " " + id.Name
	}
	return id.GroupKind.Kind + " " + id.Namespace + "/" + id.Name
}
