package engine

import (
	"hash/fnv"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The watch cache keeps objects without their managedFields, which are most of an object's
// metadata. What it keeps of them is a fingerprint of the field sets the apply managers own
// (Converge's among them), and only on the metadata objects the change handler reads. It is
// what tells drift from the changes of other controllers: a field Converge's apply owns can
// only change value by being taken from it (an update, or a forced apply, moves it to whoever
// wrote it; a removal drops it), which changes Converge's set. An autoscaler writing
// spec.replicas that the source does not set, or a controller adding a field the apply never
// owned, leaves every apply manager's set as it was, and wakes nobody.
//
// That holds while Converge owns every field its source sets: a field taken and set back
// before the reconcile stays the other manager's, so the run that finds it so applies once to
// own it again (regains, apply_one.go). What the fingerprint cannot see, and the Sync's
// interval finds: a mutating webhook rewriting a field during someone else's update (the
// change is not recorded in managedFields), and a writer that rewrites managedFields itself.
//
// The fingerprint lives in metadata.selfLink, which the API server has not filled since
// Kubernetes 1.20 and which nothing reads from the cache: 13 bytes per object, against
// about 140 for a managedFields entry kept for the purpose (1.4 MB at 10,000 objects).

// stripManagedFields is the watch cache's transform: managedFields dropped from every
// object, and their apply managers' fingerprint kept on metadata objects (appliedSets).
func stripManagedFields(in any) (any, error) {
	if pm, ok := in.(*metav1.PartialObjectMetadata); ok {
		// An object seen again (the transform may run twice on one) is left as it is: its
		// fingerprint is already kept, and writing it again would race with its readers.
		if pm.ManagedFields != nil {
			pm.SelfLink = fingerprintApplied(pm.ManagedFields)
			pm.ManagedFields = nil
		}
		return in, nil
	}
	if obj, err := meta.Accessor(in); err == nil && obj.GetManagedFields() != nil {
		obj.SetManagedFields(nil)
	}
	return in, nil
}

// appliedSets is the fingerprint stripManagedFields kept of o's apply managers' field sets.
func appliedSets(o metav1.Object) string {
	return o.GetSelfLink()
}

// fingerprintApplied hashes the managers, subresources and field sets of the Apply entries
// of entries, in any order; "" when there is none.
func fingerprintApplied(entries []metav1.ManagedFieldsEntry) string {
	var sums []uint64
	for _, mf := range entries {
		if mf.Operation != metav1.ManagedFieldsOperationApply {
			continue
		}
		h := fnv.New64a()
		h.Write([]byte(mf.Manager))
		h.Write([]byte{0})
		h.Write([]byte(mf.Subresource))
		h.Write([]byte{0})
		if mf.FieldsV1 != nil {
			h.Write(mf.FieldsV1.Raw)
		}
		sums = append(sums, h.Sum64())
	}
	if len(sums) == 0 {
		return ""
	}
	slices.Sort(sums)
	h := fnv.New64a()
	for _, s := range sums {
		h.Write(strconv.AppendUint(nil, s, 16))
		h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64(), 36)
}
