package inventory

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
)

// OverwrittenError is the error of a read of an inventory whose head ConfigMap was applied
// over as an object of its own set (a set holding a ConfigMap named as its inventory, which
// Apply refuses since): the head carries the set's owner annotation with the inventory's
// own ID, and data keys of the set's ConfigMap beside the entries. Nothing is pruned on such
// a read; Repair takes the set's data out so that the inventory can be deleted or released.
type OverwrittenError struct {
	Ref Ref
	Key string // a data key that is not an entry
}

func (e *OverwrittenError) Error() string {
	return fmt.Sprintf("inventory %s: the ConfigMap was overwritten by ConfigMap %s of its own set (its data key %q is not an inventory entry)",
		e.Ref, e.Ref, e.Key)
}

// overwritten reports whether cm, the head of ref, was applied as an object of ref's own
// set: labelled ref.ID and annotated as owned by ref.ID. Nothing else writes the owner
// annotation on an inventory's head.
func overwritten(ref Ref, cm *corev1.ConfigMap) bool {
	return cm.Name == ref.Name && cm.Labels[IDLabel] == ref.ID && cm.Annotations[OwnerAnnotation] == ref.ID
}

// Repair takes the set's data out of the head of ref when it was overwritten by its own
// set's ConfigMap (OverwrittenError): the keys that are not entries, the entry of the head
// itself, and the owner annotation. The entries stay as recorded. It returns the keys it
// removed, none when the head was not overwritten (or does not exist). The update carries
// the version read: a concurrent writer makes it fail with a conflict, not lose an entry.
func (s *Store) Repair(ctx context.Context, ref Ref) ([]string, error) {
	cm, err := s.get(ctx, ref)
	if err != nil || cm == nil || !overwritten(ref, cm) {
		return nil, err
	}
	self := object.ObjMetadata{Namespace: ref.Namespace, Name: ref.Name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	var removed []string
	for key := range cm.Data {
		if id, err := object.ParseObjMetadata(key); err != nil || id == self {
			removed = append(removed, key)
			delete(cm.Data, key)
		}
	}
	delete(cm.Annotations, OwnerAnnotation)
	cm.BinaryData = nil
	if err := s.c.Update(ctx, cm); err != nil {
		return nil, fmt.Errorf("inventory %s: repair: %w", ref, err)
	}
	return removed, nil
}

// IsOverwritten reports whether err is (or wraps) an OverwrittenError.
func IsOverwritten(err error) bool {
	var oe *OverwrittenError
	return errors.As(err, &oe)
}
