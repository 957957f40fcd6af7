// Package shard shares the Syncs between the daemon's replicas by Leases (--sharding=auto).
// A Sync belongs to shard Of(uid); each shard is a Lease in Config.Namespace, and a replica
// reconciles the Syncs of the shards it holds.
//
// The parts, each in its file:
//   - config.go: Config, the names of the Leases and labels, and the timings;
//   - table.go: Table, what this replica holds, until when, and which reconciles run;
//   - fence.go: the shard fence, Table.Check, which refuses a reconcile's writes once its
//     shard is no longer held validly (installed at the transport by the daemon);
//   - gate.go: Gate, the only thing the reconciler sees: it begins a Sync's reconcile under
//     its shard and tells whether the fence refused one of its writes;
//   - leases.go: the Lease requests, every one bounded in time;
//   - policy.go: the decisions of a step, a pure function of the Leases listed, what is
//     held and the time;
//   - coordinator.go, handover.go: the loop (a manager Runnable) that carries the decisions
//     out: acquires, clears, releases, drains, and the shutdown's release;
//   - metrics.go: the metrics of sharding, on a registry of their own.
//
// It imports the engine (for its label type) and the Sync API, never the daemon.
package shard
