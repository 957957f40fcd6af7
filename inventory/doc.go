// Package inventory owns the set of objects a Sync manages: the pure value (a set of object
// IDs with their UIDs, with union and difference) and its store in the cluster as a ConfigMap in
// the sigs.k8s.io/cli-utils format (label cli-utils.sigs.k8s.io/inventory-id), written with
// optimistic concurrency.
//
// It must not import ssa, kstatus, engine, sources or status.
package inventory
