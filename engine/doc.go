// Package engine applies a desired set of objects to a cluster with server-side apply
// (fluxcd/pkg/ssa), stages CRDs and Namespaces first, records ownership in a write-ahead
// inventory, prunes what left the set with UID preconditions, computes kstatus readiness, and
// returns a Result per object. Dry-run is the same Apply with DryRun set.
//
// One Apply (Engine.applySet in apply.go, each step naming its function):
//
//  1. validate (startRun, run_inventory.go; prepare, stage.go): copy the input's metadata
//     (the rest is shared, read-only; a set of JSON documents, Set.Docs, is decoded one
//     object at a time, each dropped once prepared and decoded again when applied:
//     item.object); every kind resolves (or is defined by a CRD of the
//     set); namespaced objects get DefaultNamespace or fail; cluster-scoped ones lose their
//     namespace; server-owned metadata (resourceVersion, uid, managedFields, ...) is
//     stripped; the owner annotation config.k8s.io/owning-inventory=<ID> is set; no
//     duplicates. Any error: nothing is written. Then load the inventory (loadInventory):
//     read from the API server, or, with the watch of the inventory heads, the read the
//     engine remembers when the watch shows it current (heads.go; its writes then pass
//     the gate that asks the API server first).
//  2. refuse a prune larger than PruneBudget, or of everything when the set is empty and
//     AllowEmpty is false (checkPrune; nothing is written).
//  3. write ahead (writeAhead): stored inventory ∪ desired (I2). A failed write stops the run.
//  4. apply by stage (applyStages: CRDs, Namespaces, ClusterRoles; then *Class kinds; then
//     the rest), in parallel within a stage, after waiting for the CRDs to be Established.
//     A set whose objects carry ordering annotations (order.go: WaveAnnotation or Argo CD's
//     sync-wave, DependsOnAnnotation) is applied by position within each stage: wave, then
//     depends-on step; before a position the run waits for the lower waves and the
//     position's dependencies to be Current (waitBefore, waves.go, through step 7's
//     readiness path), and stops there when they are not (Result.Held: the later positions
//     are not applied, step 5 is skipped). A cycle, a wave that is not an integer or a
//     dependency neither in the set nor in the cluster fails step 1 (findDependencies:
//     before the write-ahead).
//     Per chunk of 500 objects, one LIST per kind and namespace answers what per-object GETs
//     would (survey.go). Per object, applyOne (apply_one.go) takes fluxcd/pkg/ssa's four
//     steps: get the live object from the run's live view (live_view.go: listed, the survey's
//     answer else a GET; in watch mode watched, the watch cache and the memo first, so an
//     unchanged object costs no request), judge whether an apply would change it (judge:
//     ownership, then managedFields, else a server-side dry-run, compare), apply only then
//     (so a converged set issues no writes, I7), and record (the memo). An object listed as
//     missing is applied at once. When the owner says the set is the one it last applied
//     (ApplyOptions.Drift, drift.go), what the judgement finds is drift: each such object is
//     listed in Result.Drift with the fields its dry-run changes and the managers that own
//     them now, and the objects DriftOptions.Report selects are not sent, handed over,
//     created or recreated.
//  5. prune (old − new, prune.go) only when every apply succeeded, in reverse order (by kind,
//     then wave and depends-on as the live objects say: prune_order.go), each
//     delete with a UID precondition; objects not carrying our annotation, annotated
//     converge.dev/prune: disabled, or recreated by someone else are left alone and dropped
//     from the inventory; failed deletes stay in it (I1, I3).
//  6. record the inventory (recordInventory: new with UIDs ∪ what could not be pruned),
//     skipped when unchanged; a read the run left unwritten is remembered (heads.go).
//  7. optionally wait for kstatus readiness (waitReady, wait.go), judged on an object read at
//     the generation the apply returned or newer (a lagging cache is InProgress, not
//     Current). Kinds with CEL health expressions (ApplyOptions.HealthExprs, compiled before
//     step 1) are judged by them instead; ApplyOptions.HealthChecks adds objects that are
//     only waited for.
//
// Deletion: Delete deletes the inventory's objects (same checks as a prune) and then the
// ConfigMap; Abandon releases them instead (owner annotation removed with a JSON patch that
// tests the UID and the annotation's value, then the ConfigMap deleted), so another set can
// adopt them and a set recreated with the same inventory ID does not prune them. Both, and
// Apply, fall back on a caller's recovery copy (Recover) when the ConfigMap was lost.
//
// Ownership (I11): a live object whose owner annotation names another inventory is never
// adopted (the object fails with a NotOwnedError naming the owner in words, and leaves the
// inventory). A live object
// without the annotation is adopted when only Converge's field manager wrote it; one that
// another tool manages (another field manager, kubectl's last-applied-configuration) fails
// with ErrNotAdopted unless ApplyOptions.Adopt. Every apply carries a precondition on what
// the run read: a create only if the object is still missing, an update only of the UID that
// was read and checked. So two sets that both see an object missing cannot both create it
// (the second gets a conflict, reads the object, and reports the overlap), and an apply
// decided on a stale watch cache never lands on an object someone recreated. A forced
// recreate deletes only an object the inventory owns (annotation and recorded UID).
// A DryRun of a Set without an inventory (the zero Ref) is a plain diff: every object is
// diffed with its owner as it is, and nothing is pruned.
//
// Hand-over (handover.go): once an object is judged ours or adoptable, and before it is
// judged further, the managedFields entries of the managers in
// ApplyOptions.TakeOverManagers (default DefaultTakeOverManagers: Flux's, Argo CD's,
// kubectl's) are renamed to the run's apply entry, and the old tools' tracking labels and
// annotations the desired object does not declare are removed, with our owner annotation set,
// in one JSON patch tested on the object's UID and resourceVersion. The next apply then owns
// (and removes) the fields the source dropped. Nothing is sent when nothing is to hand over,
// in a DryRun, or for SSAMerge; an apply the memo decided without a read hands over what its
// answer shows (handOverRecalled). Per-object apply policies (SSAAnnotation, Flux's
// FluxSSAAnnotation; apply_policy.go): IfNotPresent, Ignore, Merge, as Flux honours them.
//
// Legacy IDs (removed in v0.2): Migrate (legacy_migrate.go) is a one-shot step its callers
// run before an Apply or a Delete; it takes an inventory stored under its legacy ID over,
// object by object. Until every object carries the new ID, one still carrying the legacy ID
// with the UID the legacy ConfigMap recorded is ours to apply, prune, delete and release
// (owns in legacy.go: inventory.Claim.Owns, or inventory.Migration.Owns while the migration
// lasts). One carrying the legacy ID without that record is adopted only with
// ApplyOptions.Adopt, and one the other inventory of the legacy ID lists (inventory.Sibling)
// never. Objects the migration left are retried alone by the next Migrate and reported in
// Result.MigrationPending.
//
// Field conflicts: applies do not force ownership unless ApplyOptions.ForceConflicts; a
// conflict with another field manager fails the object. This is why the engine drives the
// apply itself (GET, dry-run, compare, apply, as fluxcd/pkg/ssa's ResourceManager does)
// instead of calling ResourceManager.Apply, which always forces ownership. It reuses ssa's
// normalization and Secret masking, and its kstatus fork for readiness.
//
// It must not import git, kustomize, the Sync API or status, or Prometheus; it imports
// inventory only.
package engine
