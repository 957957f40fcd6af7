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
// Migration. Store.Migrate first relabels the ConfigMap with the new ID and marks it
// converge.dev/migrating-from: <legacy ID> (MigratingAnnotation), one write; then it
// re-annotates the objects one by one; then it removes the mark. An object that cannot be
// re-annotated (a conflict, a kind the caller may not patch) does not hold the others or the
// set up, and the next Migrate tries it again. Which live objects are an inventory's own is
// decided by one rule, Claim.Owns, asked by the migration and by every apply, prune, delete
// and release: the owner annotation is the inventory's ID, or, while the mark is there, the
// legacy ID on an object whose UID the ConfigMap recorded. The legacy ID was shared by a Sync
// and "converge apply --inventory" of the same namespace/name, and anyone may write an
// annotation, so the recorded UID, not the annotation, says the object is ours; an object
// carrying the legacy ID that the ConfigMap does not record (a legacy inventory lost before
// the upgrade) is taken over only by an explicit adoption. The UID alone does not tell the
// two sharers apart (whoever may write one ConfigMap may copy the other's UIDs): an object
// the other's ConfigMap lists (Sibling) is contested, nobody's until a person decides
// (ContestedError). An entry recorded without UID (written ahead by a run that stopped) is
// the migration's when it is not contested, and its UID is recorded before the patch.
//
// Concurrency. Store reads go to the API server, never to a cache. Write updates with the
// resourceVersion it read as a precondition and, on a conflict, re-reads and retries
// (retry.RetryOnConflict); a write that would not change the stored data sends nothing.
// Write replaces the stored set with the given one: callers compute it from a fresh Get.
//
// A lost ConfigMap. The ConfigMap can disappear under a live set: deleted by hand, or by
// the deletion of its namespace before the Sync's finalizer ran (the namespace controller
// deletes ConfigMaps and Syncs in parallel). Read as empty, it would leak every object the
// set owns outside that namespace (cluster-scoped ones, other namespaces): nothing would
// prune them when they leave the repository, nor delete them with the Sync. Converge keeps a
// recovery copy of the inventory in the Sync's status (status.inventory.objects: each
// entry's ns_name_group_kind and UID, as recorded at the end of the last apply), rather than
// finding owned objects by LISTing for the owner annotation: a LIST would have to cover
// every listable kind of the cluster in every namespace (annotations are not selectable),
// which a tenant's service account may not do, and would cost a full scan per recovery.
// Lookup tells a missing ConfigMap from an empty one; only a missing one is recovered, the
// copy's entries becoming prune or delete candidates again (the engine's ApplyOptions and
// DeleteOptions Recover field), and an Apply writes them back into a
// new ConfigMap at its write-ahead.
//
// Bounds of the copy. It is written with the status, after the apply, so it is a recovery
// hint and never the write-ahead record (I2 rests on the ConfigMap alone): objects first
// created by a run whose status write failed, and then lost with the ConfigMap, are not in
// it. It holds at most 5000 entries (about 100 bytes each), the objects outside the Sync's
// namespace first, since those are the ones a namespace deletion does not take along.
// Acting on a stale copy is safe: every delete or release still requires our owner
// annotation and the recorded UID (I1); an entry that is gone or not ours is skipped. The
// copy is writable by whoever may write the Sync's status, so its UIDs never make an object
// without an owner annotation ours (only the ConfigMap's do): adoption still needs the
// Sync's spec.adopt.
//
// It must not import ssa, kstatus, engine, sources or status.
package inventory
