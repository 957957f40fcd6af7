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
// annotation config.k8s.io/owning-inventory (OwnerAnnotation).
//
// Ownership. Which live objects are an inventory's own is decided by one rule, Claim.Owns:
// the owner annotation is the inventory's ID. A prune, a delete, a release and a forced
// recreate also require the UID the ConfigMap recorded (Claim.Recorded, I1).
//
// Legacy IDs (removed in v0.2). Earlier versions used <ns>_<name> for all three owners
// (LegacyID, Ref.Legacy). The legacy_*.go files take such an inventory over: Store.Migrate
// relabels the ConfigMap with the new ID and marks it converge.dev/migrating-from: <legacy ID>
// (MigratingAnnotation), re-annotates its objects one by one, then removes the mark; its
// owners run it as a one-shot step before an apply or a deletion. While the mark is there,
// Lookup returns it as Claim.Migration, whose rule (Migration.Owns) also makes ours an object
// carrying the legacy ID whose UID the ConfigMap recorded, unless the other inventory that
// shared the legacy ID (Sibling) lists it: such an object is contested, nobody's until a
// person decides (ContestedError). An object carrying the legacy ID that the ConfigMap does
// not record (a legacy inventory lost before the upgrade) is taken over only by an explicit
// adoption. An entry recorded without UID (written ahead by a run that stopped) is the
// migration's when it is not contested, and its UID is recorded before the patch.
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
// DeleteOptions Recover field, read only then), and an Apply writes them back into a
// new ConfigMap at its write-ahead. The daemon's cache keeps a digest of the copy, not the
// copy (status.CompactInventory): a recovery reads the Sync from the API server.
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
