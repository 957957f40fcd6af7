package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// ApplyOptions are the per-call settings of Apply. A DryRun of a Set without an inventory
// (the zero inventory.Ref) is a plain diff: no owner annotation is added, an object another
// inventory owns is diffed as it is (Change.Message names its owner), nothing is pruned.
type ApplyOptions struct {
	// DryRun server-side dry-runs every object, fills Change.Diff, lists what would be
	// pruned, and writes nothing: no object, no inventory.
	DryRun bool
	// Diff fills Change.Diff for created and configured objects also without DryRun.
	Diff bool
	// Prune deletes inventory members that left the set, once every apply succeeded.
	Prune bool
	// AllowEmpty allows a prune when the desired set is empty; otherwise such a prune is
	// refused with an error and nothing is deleted.
	AllowEmpty bool
	// PruneBudget refuses (error, nothing applied or deleted) a prune of more objects than
	// this. Zero means unlimited.
	PruneBudget int
	// Force recreates objects whose immutable fields changed. Per object, the annotation
	// converge.dev/force: enabled does the same. Only objects this inventory owns are deleted
	// for it: our owner annotation, and the UID the inventory recorded.
	Force bool
	// Adopt takes over objects that carry no owner annotation but that another tool manages
	// (another field manager, or kubectl's last-applied-configuration: Helm, kubectl apply).
	// Without it such an object fails with ErrNotAdopted and is left alone. Objects only
	// Converge's field manager wrote are adopted either way. It also takes over objects that
	// carry the inventory's legacy ID (inventory.Ref.Legacy) without being recorded in its
	// ConfigMap (an inventory lost before the upgrade); never objects of another inventory.
	Adopt bool
	// TakeOverManagers are the field managers whose fields move to the run's field manager
	// when the run applies an object it owns or adopts (a name, or a prefix ending in "*"):
	// the other tool's managedFields entries are rewritten, its tracking labels and
	// annotations removed, in one JSON patch per object that needs it (handover.go), so a
	// field later removed from the source is removed from the cluster. Managers not listed
	// keep their fields. Empty means none (the old tools' tracking labels and annotations
	// are removed all the same); DefaultApplyOptions lists DefaultTakeOverManagers.
	TakeOverManagers []string
	// ForceConflicts takes ownership of fields another field manager owns. Without it such
	// conflicts fail the object.
	ForceConflicts bool
	// Wait waits, after apply and prune, until every applied object is Current (kstatus),
	// one is Failed, or Timeout passes.
	Wait bool
	// Timeout bounds the readiness wait, and the wait for CRDs to be Established.
	Timeout time.Duration
	// CheckOnce judges readiness (Wait, HealthChecks) from one read of each object instead
	// of waiting: Result.Health says which objects are not Current yet, and only a Failed
	// one is an error. A caller that must not hold a goroutine for Timeout (the daemon's
	// workers) calls again later to judge again; Timeout is then the caller's to keep.
	CheckOnce bool
	// HealthChecks are more objects to wait for (Flux's spec.healthChecks): any kind, in the
	// set or not. They are only read: neither applied nor pruned. A namespaced one without a
	// namespace is looked for in DefaultNamespace; one that does not exist keeps the wait
	// going until Timeout. Without Wait they alone are waited for, as Flux does.
	HealthChecks []object.ObjMetadata
	// HealthExprs judge the readiness of their kinds with CEL instead of kstatus (Flux's
	// spec.healthCheckExprs), for the set's objects and HealthChecks alike. They are
	// compiled first (CompileHealthExprs): one that does not compile fails the Apply with a
	// terminal error before anything is written.
	HealthExprs []HealthExpr
	// DefaultNamespace is set on namespaced objects without a namespace. When empty, such an
	// object is an error and nothing is applied or pruned.
	DefaultNamespace string
	// TargetNamespace, when set, is the namespace of every namespaced object, whatever the
	// object says (like kustomize's namespace: and Flux's targetNamespace).
	TargetNamespace string
	// Concurrency bounds the applies and deletes in flight. Zero or less means 1.
	Concurrency int
	// FieldManager is the server-side apply field manager of this run. Empty means
	// FieldManager (the package constant). Changing it between runs of one set hands the
	// fields over: the new manager takes the fields the old one owned (kubectl's
	// --field-manager behaves the same).
	FieldManager string
	// Recover reads a copy of the inventory kept elsewhere (the Sync status), only when
	// the inventory ConfigMap does not exist: its entries become prune candidates again
	// (each still checked for our owner annotation and UID, I1) and the ConfigMap is
	// written back with them at the write-ahead (DryRun only reads it). See inventory's
	// doc.
	Recover Recovery
	// Ignore are fields to leave alone (Flux's Kustomization spec.ignore): JSON pointers of
	// the objects each rule's selector matches, and the fields the rule's field managers own
	// (Argo CD's managedFieldsManagers), never set against the live object nor shown as a
	// change (ignore.go). Result.IgnoreUnmatched names the rules that match nothing.
	Ignore []IgnoreRule
	// Drift says whether what the run would change is drift (an out-of-band change of the
	// set last applied), to report in Result.Drift, and which of it to leave as it is.
	Drift DriftOptions
	// Progress, when set, is called as the run advances (one call per object applied or
	// pruned and one per stage change). Calls are serialized.
	Progress func(Progress)
}

// Progress is how far an Apply has come.
type Progress struct {
	Stage Stage
	Done  int // objects done in this stage
	Total int // objects in this stage
}

// Stage is a phase of an Apply, as reported by Progress.
type Stage string

// The stages of an Apply.
const (
	StageApply Stage = "apply"
	StagePrune Stage = "prune"
	StageWait  Stage = "wait"
)

// DefaultApplyOptions prunes, waits up to five minutes for readiness, applies 8 objects at
// a time, takes over the fields of DefaultTakeOverManagers, and neither forces nor dry-runs.
func DefaultApplyOptions() ApplyOptions {
	return ApplyOptions{Prune: true, Wait: true, Timeout: 5 * time.Minute, Concurrency: 8,
		TakeOverManagers: DefaultTakeOverManagers()}
}

// Apply makes the cluster match set: it validates the objects, writes the inventory ahead
// (stored ∪ desired), applies in stages with server-side apply, prunes what left the set
// if every apply succeeded, records the new inventory, and waits for readiness. A partial
// failure returns both a Result and an error joining the per-object errors, each prefixed
// with the object ID. Invalid input returns an error before anything is written.
func (e *Engine) Apply(ctx context.Context, set Set, opts ApplyOptions) (*Result, error) {
	res, err := e.applySet(ctx, set, opts, true)
	if errors.Is(err, errHeadMoved) {
		// The run started from a remembered inventory that the API server shows changed
		// (the watch of the heads was behind), and stopped before its first write: start
		// over from a read (heads.go).
		logr.FromContextOrDiscard(ctx).V(1).Info("inventory changed since it was read; run again", "inventory", set.Inventory.ID)
		return e.applySet(ctx, set, opts, false)
	}
	return res, err
}

// applySet is Apply; remembered says the run may start from the inventory the engine
// remembers (heads.go).
func (e *Engine) applySet(ctx context.Context, set Set, opts ApplyOptions, remembered bool) (*Result, error) {
	res := &Result{}
	// A run that ends anywhere but at its end leaves no clean run of its inventory behind
	// (quiet.go); events counts the cache's events about its objects from here on.
	events, recorded := e.quiet.count(set.Inventory.ID), false
	defer func() {
		if !recorded {
			e.quiet.forget(set.Inventory.ID)
		}
	}()
	rules, err := CompileHealthExprs(opts.HealthExprs)
	if err != nil {
		return res, err
	}
	ignore, err := newIgnorer(opts, e.opts.Scope.Key, set.Inventory.ID != "")
	if err != nil {
		return res, err
	}
	if !opts.DryRun {
		// From here on the watch cache fingerprints the inventory's objects without what the
		// rules leave alone (fingerprint.go).
		e.ignoredFields().set(set.Inventory.ID, ignore)
	}
	items, st, err := e.startRun(ctx, set, opts, remembered, ignore)
	if err != nil {
		return res, err
	}
	res.IgnoreUnmatched = ignore.unmatched()
	res.MigrationPending = e.migrationPending(set.Inventory, st.claim)
	if st.ordered {
		if err := e.findDependencies(ctx, items, opts.DefaultNamespace); err != nil {
			return res, err
		}
	}
	if !opts.DryRun {
		if err := e.writeAhead(ctx, set.Inventory, &st, len(items)); err != nil {
			return res, err
		}
	}
	r := &applyRun{e: e, ref: set.Inventory, opts: opts, old: st.old, claim: st.claim, gate: st.gate, items: items, progress: newProgress(opts.Progress), ignore: ignore,
		waves: waves{ordered: st.ordered, rules: rules, current: map[object.ObjMetadata]ObjectHealth{}}}
	r.view, r.listed = e.newLiveView(set.Inventory.ID, opts)
	if e.cache != nil && !opts.DryRun {
		// New objects are applied without reading the cache: the informers of their kinds
		// start when the run ends, off its critical path, so the next run (and the drift
		// reports) find them.
		defer e.cache.watchKinds(ctx, items)
	}
	outs, held, abort := r.applyStages(ctx)
	if err := r.gate.moved(); err != nil {
		// A write was held back because the inventory moved (the recreate of an object
		// reports it as that object's failure): start over now, not after the readiness wait.
		return res, err
	}
	rec := r.collect(res, outs)
	if _, watched := r.view.(*watchedView); !watched {
		// A watched run reads no live object when nothing changed: what the rules' managers
		// own is known only to runs that read every object, or the report would come and go.
		res.IgnoreUnmatched = append(res.IgnoreUnmatched, ignore.unowned()...)
	}
	if abort != nil {
		return res, errors.Join(append(rec.errs, abort)...)
	}
	if held != nil {
		// An earlier wave is not Ready: the later ones wait, and so does the prune.
		r.holdResult(res, rec, held)
	} else if abort := r.prune(ctx, res, rec, st.candidates); abort != nil {
		return res, errors.Join(append(rec.errs, abort)...)
	}
	if opts.DryRun {
		return res, errors.Join(rec.errs...)
	}
	if res.Inventory, err = r.recordInventory(ctx, &st, rec); err != nil {
		return res, errors.Join(append(rec.errs, err)...)
	}
	if held == nil && (opts.Wait || len(opts.HealthChecks) > 0) {
		var err error
		if res.Health, err = r.waitReady(ctx, outs, rules); err != nil {
			rec.errs = append(rec.errs, err)
		}
	}
	err = errors.Join(rec.errs...)
	r.recordQuiet(set, st, res, err, events)
	recorded = true
	return res, err
}

// prune deletes the candidates (old − new) with Prune, once every apply succeeded,
// recording the changes in res and what left the inventory in rec; it returns an error that
// must stop the run (the inventory's record is then skipped). Without Prune the candidates
// are left (Result.Left). A run from a remembered inventory has none (heads.go).
func (r *applyRun) prune(ctx context.Context, res *Result, rec *record, candidates *inventory.Inventory) error {
	if candidates.Len() == 0 {
		return nil
	}
	if !r.opts.Prune {
		for _, e := range candidates.Entries() {
			res.Left = append(res.Left, e.Object)
		}
		return nil
	}
	if res.failed() {
		logr.FromContextOrDiscard(ctx).Info("prune skipped: the apply did not fully succeed", "inventory", r.ref.ID)
		return nil
	}
	pr := r.e.prune(ctx, pruneCall{ref: r.ref, claim: r.claim, dryRun: r.opts.DryRun, concurrency: r.opts.Concurrency,
		deleted: new(atomic.Int64), progress: r.progress}, candidates.Entries())
	res.Pruned = pr.changes
	rec.errs = append(rec.errs, pr.errs...)
	rec.untrack = append(rec.untrack, pr.dropped...)
	return pr.abort
}

// waitReady waits for the applied objects (with Wait) and the extra HealthChecks to be
// ready; without Wait only the HealthChecks are waited for, as Flux does.
func (r *applyRun) waitReady(ctx context.Context, outs []outcome, rules *HealthRules) ([]ObjectHealth, error) {
	w := waitSet{byMeta: map[object.ObjMetadata]bool{}, applied: map[object.ObjMetadata]int64{}}
	if r.opts.Wait {
		w = r.readyCandidates(outs)
	}
	w.health = rules
	r.e.addHealthChecks(&w, r.opts.HealthChecks, r.opts.DefaultNamespace)
	all, w := r.waves.unknown(w)
	r.progress.stage(StageWait, len(w.ids))
	health, err := r.e.wait(ctx, w, waitFor{timeout: r.waitTimeout(), once: r.opts.CheckOnce}, r.progress)
	return r.waves.merge(all, health), err
}

// collect fills res.Changes from outs and returns what to record.
func (r *applyRun) collect(res *Result, outs []outcome) *record {
	rec := &record{tracked: make([]inventory.Entry, 0, len(outs))}
	res.Changes = slices.Grow(res.Changes, len(outs))
	for i, o := range outs {
		if r.waves.ordered {
			o.change.Wave = r.items[i].pos.describeWave()
		}
		res.Changes = append(res.Changes, o.change)
		if o.drift != nil {
			res.Drift = append(res.Drift, *o.drift)
		}
		if o.change.Err != nil {
			rec.errs = append(rec.errs, o.change.Err)
		}
		if o.track {
			rec.tracked = append(rec.tracked, inventory.Entry{Object: o.change.Object, UID: o.uid})
		} else {
			// Inventoried ahead (or before), but the API server shows another owner or a
			// manager we may not adopt from: not ours to track, nor to prune.
			rec.untrack = append(rec.untrack, o.change.Object)
		}
	}
	return rec
}

// validateRef rejects an incomplete inventory reference.
func validateRef(ref inventory.Ref) error {
	if ref.Namespace == "" || ref.Name == "" || ref.ID == "" {
		return terminal(fmt.Errorf("inventory %s: namespace, name and id are required", ref))
	}
	return nil
}

// ErrInventoryInSet is wrapped by the error of an Apply whose set holds the ConfigMap of its
// own inventory: applying it would write the object's data into the inventory, which could
// then not be read. It is terminal, and nothing is written.
var ErrInventoryInSet = errors.New("the set holds its own inventory ConfigMap")

// checkOwnInventory refuses a set that holds a ConfigMap named as its inventory.
func checkOwnInventory(ref inventory.Ref, desired *inventory.Inventory) error {
	id := object.ObjMetadata{Namespace: ref.Namespace, Name: ref.Name, GroupKind: schema.GroupKind{Kind: "ConfigMap"}}
	if !desired.Has(id) {
		return nil
	}
	return terminal(inventoryInSetError{ref: ref})
}

// inventoryInSetError is ErrInventoryInSet about the inventory ref.
type inventoryInSetError struct{ ref inventory.Ref }

func (e inventoryInSetError) Error() string {
	return fmt.Sprintf("ConfigMap %s of the set has the name of its own inventory %s: applying it would overwrite the inventory; "+
		"nothing was written: rename that ConfigMap or choose another inventory name (a Sync's is <name>-inventory)", e.ref, e.ref)
}

func (e inventoryInSetError) Is(target error) bool { return target == ErrInventoryInSet }

// checkPrune refuses a prune of everything (the set is empty) unless AllowEmpty, and a prune
// larger than PruneBudget. A refusal stops the run before anything is written.
func checkPrune(desired, candidates int, opts ApplyOptions) error {
	if desired == 0 && candidates > 0 && !opts.AllowEmpty {
		return terminal(fmt.Errorf("%w: the set is empty and would prune all %d objects; set AllowEmpty to allow it",
			ErrPruneRefused, candidates))
	}
	if opts.PruneBudget > 0 && candidates > opts.PruneBudget {
		return terminal(fmt.Errorf("%w: %d objects to prune exceed the budget of %d",
			ErrPruneRefused, candidates, opts.PruneBudget))
	}
	return nil
}

// callHook runs a test crash point.
func callHook(h func() error) error {
	if h == nil {
		return nil
	}
	if err := h(); err != nil {
		return fmt.Errorf("aborted by hook: %w", err)
	}
	return nil
}

// outcome is the result of applying one item.
type outcome struct {
	change Change
	uid    types.UID // UID after the apply (or observed); empty when unknown
	track  bool      // keep in the inventory
	ready  bool      // wait for its readiness
	// rv is the live object's resourceVersion after the apply or verification, for the
	// memo; empty when unknown.
	rv string
	// drift is the object's drift, when the run detects drift (ApplyOptions.Drift); nil
	// when it has none.
	drift *DriftedObject
	// generation is the live object's metadata.generation after the apply or verification:
	// readiness is judged on it or a newer one (atGeneration). Zero when unknown.
	generation int64
}

// applyRun is the state of one Apply shared by its workers.
type applyRun struct {
	e    *Engine
	ref  inventory.Ref
	opts ApplyOptions
	old  *inventory.Inventory
	// claim decides which live objects are ours (owns). Its Found says old
	// was read from the inventory ConfigMap, not recovered from the copy in a Sync's status
	// (ApplyOptions.Recover), which anyone who may write that status can forge: only a
	// stored UID makes an object ours (recorded).
	claim inventory.Claim
	// gate is passed before each write when the run started from a remembered inventory
	// (heads.go); nil otherwise.
	gate     *headGate
	items    []*item
	applied  atomic.Int64 // successful applies, for Hooks.AfterApply
	progress *progress    // nil: no progress reports
	// newNamespaces are the Namespaces of the set that do not exist yet (DryRun only): a
	// dry-run of an object in them cannot succeed before they are created.
	newNamespaces map[string]bool
	// view is how the run knows the live objects (newLiveView); listed is the view, or the
	// one below it, that answers from the survey of the current chunk.
	view   liveView
	listed *listedView
	// sizes is how many objects of each kind and namespace the survey last listed.
	sizes surveySizes
	// legacySibling is what the other inventory of the legacy ID lists (legacy.go).
	legacySibling siblingRead
	// waves is the state of an ordered set's waits between positions (waves.go).
	waves waves
	// ignore leaves ApplyOptions.Ignore's fields alone (ignore.go); nil without rules.
	ignore *ignorer
}

// surveyChunk is how many items share one survey: its answer is never older than one
// chunk's applies.
const surveyChunk = 500

// applyRange applies items[start:end] with bounded concurrency into outs[start:end]. Its
// workers take the items in turn, rather than a goroutine per item: a fresh goroutine grows
// its stack again for every object (a tenth of a no-op reconcile's CPU at 50,000 objects).
// The first error (a hook's abort) cancels the context of the others at once, as a crash
// would; the items left still get their outcome, failed with that context.
func (r *applyRun) applyRange(ctx context.Context, outs []outcome, start, end int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	next.Store(int64(start))
	for range min(max(r.opts.Concurrency, 1), end-start) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < end; i = int(next.Add(1) - 1) {
				var err error
				outs[i], err = r.applyOne(ctx, r.items[i])
				r.progress.step()
				if err != nil {
					once.Do(func() { first = err; cancel(err) })
				}
			}
		})
	}
	wg.Wait()
	return first
}

// establish waits for the CRDs applied so far to be Established and for the pending kinds
// of next to resolve; pending items that do not resolve are marked failed in place.
func (r *applyRun) establish(ctx context.Context, done []outcome, next []*item) {
	var crds []string
	for i, o := range done {
		if r.items[i].id.GroupKind == crdGK && o.change.Action != ActionFailed && o.change.Action != ActionSkipped {
			crds = append(crds, r.items[i].id.Name)
		}
	}
	var pending []*item
	for _, it := range next {
		if it.pending {
			pending = append(pending, it)
		}
	}
	if len(crds) == 0 && len(pending) == 0 {
		return
	}
	err := r.e.waitEstablished(ctx, crds, pending, r.opts.Timeout)
	if err == nil {
		return
	}
	for _, it := range pending {
		it.pendingErr = err
	}
}

// newNamespaces returns the Namespaces of the set the dry-run found missing in the cluster.
func newNamespaces(done []outcome) map[string]bool {
	out := map[string]bool{}
	for _, o := range done {
		if o.change.Object.GroupKind == namespaceGK && o.change.Action == ActionCreated {
			out[o.change.Object.Name] = true
		}
	}
	return out
}

// readyCandidates returns the objects whose readiness Wait checks (applied, configured or
// unchanged ones that this run manages), those of them whose readiness their metadata shows
// (readyOnExistence), and the generation each was applied (or verified) at.
func (r *applyRun) readyCandidates(outs []outcome) waitSet {
	w := waitSet{byMeta: map[object.ObjMetadata]bool{}, applied: map[object.ObjMetadata]int64{}}
	for i, o := range outs {
		if !o.ready {
			continue
		}
		w.ids = append(w.ids, o.change.Object)
		if r.items[i].byMeta {
			w.byMeta[o.change.Object] = true
		}
		if o.generation > 0 {
			w.applied[o.change.Object] = o.generation
		}
	}
	return w
}
