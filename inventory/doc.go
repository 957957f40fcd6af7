// Package inventory owns the set of objects a Sync manages: the pure value (a set of object
// IDs with their UIDs, with union and difference) and its store in the cluster as a ConfigMap in
// the sigs.k8s.io/cli-utils format (label cli-utils.sigs.k8s.io/inventory-id), written with
// optimistic concurrency.
//
// Format. The ConfigMap carries the label cli-utils.sigs.k8s.io/inventory-id: <ID>; each
// data key is one object's ns_name_group_kind as printed by object.ObjMetadata.String()
// (cluster-scoped objects have an empty namespace, the core group is empty). cli-utils
// stores an empty value; Converge stores the object's UID there when it knows it (an
// extension cli-utils ignores) so a later delete can carry a UID precondition. An empty
// value means "inventoried before its first apply, UID not known yet".
//
// Identity. An ID names its owner's kind and name: sync_<ns>_<name> for a Sync,
// cli_<ns>_<name> for "converge apply --inventory ns/name", install_<ns>_<name> for "converge
// install" (hashed to 63 characters, see ID), so no two kinds of owner ever share an ID, and
// Describe turns an ID back into words for messages. Objects carry their owner's ID in the
// annotation config.k8s.io/owning-inventory (OwnerAnnotation). Earlier versions used
// <ns>_<name> for all three (LegacyID); Store.Migrate moves such an inventory, and the
// annotation of each object it lists that still carries the legacy ID, to the new ID.
//
// Concurrency. Store reads go to the API server, never to a cache. Write updates with the
// resourceVersion it read as a precondition and, on a conflict, re-reads and retries
// (retry.RetryOnConflict); a write that would not change the stored data sends nothing.
// Write replaces the stored set with the given one: callers compute it from a fresh Get.
//
// It must not import ssa, kstatus, engine, sources or status.
package inventory
