package engine

import (
	"context"
	"fmt"

	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// The inventory of one Apply: loaded before the first apply (read from the API server, or
// remembered from an earlier read when the watch of the inventory heads allows, heads.go),
// written ahead (I2), and recorded at the end (or, when the run wrote nothing over what it
// read, remembered for the next runs).

// start is what a run starts from: the stored inventory and its claim, what it holds of
// the set, and the gate of its writes when it was remembered rather than read (heads.go).
type start struct {
	old     *inventory.Inventory
	claim   inventory.Claim
	gate    *headGate
	desired *inventory.Inventory
	// held counts the items old holds; candidates are old's entries the set left.
	held       int
	candidates *inventory.Inventory
	// stored is the inventory stored once written ahead; wrote says the run wrote it.
	stored *inventory.Inventory
	wrote  bool
	// ordered says an item carries an ordering annotation (order.go): the run applies wave
	// by wave.
	ordered bool
}

// startRun validates set for a run with opts and loads the inventory it starts from
// (loadInventory), then refuses a prune that opts do not allow. Nothing is written. A
// dry-run without an inventory (the zero Ref) is a plain diff against the live objects:
// nothing is owned, adopted or pruned, and each object's owner is information.
func (e *Engine) startRun(ctx context.Context, set Set, opts ApplyOptions, remembered bool, ig *ignorer) ([]*item, start, error) {
	noInventory := opts.DryRun && set.Inventory == (inventory.Ref{})
	if err := validateRef(set.Inventory); err != nil && !noInventory {
		return nil, start{}, err
	}
	items, desired, ordered, err := e.prepareOrdered(set, opts, ig)
	if err != nil {
		return nil, start{}, err
	}
	st := start{old: &inventory.Inventory{}, claim: inventory.Claim{Found: true}}
	if noInventory {
		st.hold(items, desired)
	} else {
		if err := checkOwnInventory(set.Inventory, desired); err != nil {
			return nil, start{}, err
		}
		if st, err = e.loadInventory(ctx, set.Inventory, opts, items, desired, remembered && !opts.DryRun); err != nil {
			return nil, start{}, err
		}
	}
	st.desired, st.stored, st.ordered = desired, st.old, ordered
	if opts.Prune {
		if err := checkPrune(len(items), st.candidates.Len(), opts); err != nil {
			return nil, start{}, err
		}
	}
	return items, st, nil
}

// loadInventory reads the stored inventory of ref for a run of items, or, when remembered
// allows it, starts from the inventory the engine remembers if that makes the run one with
// nothing to write ahead or prune: its writes then pass the gate that asks the API server
// whether the inventory moved (heads.go).
func (e *Engine) loadInventory(ctx context.Context, ref inventory.Ref, opts ApplyOptions, items []*item, desired *inventory.Inventory,
	remembered bool) (start, error) {
	if r, ok := e.remembered(ref); ok && remembered {
		st := start{old: r.inv, claim: r.claim}
		if st.hold(items, desired); st.held == len(items) && st.candidates.Len() == 0 {
			st.gate = e.newHeadGate(ref, r)
			return st, nil
		}
	}
	old, claim, err := e.load(ctx, ref, opts.Recover)
	if err != nil {
		return start{}, err
	}
	st := start{old: old, claim: claim}
	st.hold(items, desired)
	return st, nil
}

// hold records in items which ones st.old holds, and finds the prune candidates. What the
// stored inventory holds of the set is read once per item: the survey and the watch path
// ask it of every item, and when it holds the whole set and nothing more (a no-op, a change
// of contents) neither the write-ahead check nor the prune candidates need another pass
// over 50,000 entries.
func (st *start) hold(items []*item, desired *inventory.Inventory) {
	st.held = 0
	for _, it := range items {
		if it.stored = st.old.Has(it.id); it.stored {
			st.held++
		}
	}
	st.candidates = &inventory.Inventory{}
	if st.held < st.old.Len() {
		st.candidates = st.old.Diff(desired)
	}
}

// writeAhead stores old ∪ desired before the first apply of a run of n items (I2: every
// object is inventoried before it is first created), into st.stored. A failure stops the
// run. Nothing is written when old holds every item already and was not recovered (a run
// from a remembered inventory always): old is written back with desired when it was
// recovered from a copy (the ConfigMap was lost), even when desired adds nothing.
// The copy's UIDs of a restore are kept only for the prune candidates (a prune still
// requires our owner annotation): a declared object is written without one, and this run
// records the UID it finds, so a forged copy (the Sync status) never leaves a stored UID
// that would make an unannotated object ours (recorded).
func (e *Engine) writeAhead(ctx context.Context, ref inventory.Ref, st *start, n int) error {
	restore := !st.claim.Found && st.old.Len() > 0
	if restore || st.held != n {
		ahead := st.desired
		if restore {
			ahead = st.old.Diff(st.desired).Union(st.desired)
		}
		st.wrote = true
		e.forgetHead(ref)
		wa, err := e.store.Update(ctx, ref, func(s *inventory.Inventory) *inventory.Inventory {
			return s.Union(ahead)
		})
		if err != nil {
			return fmt.Errorf("write-ahead: %w", err)
		}
		st.stored = wa
	}
	return callHook(e.opts.Hooks.AfterWriteAhead)
}

// recordInventory records the run's inventory when rec changes what is stored, and returns
// what is stored then; the error (the gate's) stops the run. When the run wrote nothing at
// all over an inventory it read from the API server, that read is what the next runs may
// start from (heads.go).
func (r *applyRun) recordInventory(ctx context.Context, st *start, rec *record) (*inventory.Inventory, error) {
	if !rec.changes(st.stored) {
		if !st.wrote && st.gate == nil && r.e.heads != nil && rememberable(st.claim) {
			r.e.heads.remember(r.ref, headRead{inv: st.old, claim: st.claim})
		}
		return st.stored, nil
	}
	if err := r.gate.pass(ctx); err != nil {
		return st.stored, err
	}
	r.e.forgetHead(r.ref)
	recorded, err := r.e.store.Update(ctx, r.ref, rec.apply)
	if err != nil {
		rec.errs = append(rec.errs, fmt.Errorf("record: %w", err))
	}
	return recorded, nil
}

// record is what a run changes in the inventory.
type record struct {
	tracked []inventory.Entry    // desired objects with the UIDs of this run (one each)
	untrack []object.ObjMetadata // pruned, gone, or not ours after all
	errs    []error              // per-object errors of the run
}

// apply returns the inventory to record: what is stored now, with the UIDs of this run,
// without what was pruned or is not ours. Failed deletes stay (I3).
func (rec *record) apply(stored *inventory.Inventory) *inventory.Inventory {
	n := stored.Union(inventory.New(rec.tracked...))
	for _, id := range rec.untrack {
		n.Remove(id)
	}
	return n
}

// changes reports whether apply(stored) differs from stored, without building it: every
// run asks, and a copy of a large inventory is what a no-op would spend most on. An object
// both tracked and untracked (not expected) counts as a change: Update then finds there is
// nothing to write.
func (rec *record) changes(stored *inventory.Inventory) bool {
	for _, id := range rec.untrack {
		if stored.Has(id) {
			return true
		}
	}
	return !stored.AbsorbsEach(rec.tracked)
}
