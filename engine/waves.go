package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// waves is what a run of an ordered set (order.go) knows of its waits between positions.
// An unordered set never waits between stages: its zero value.
type waves struct {
	ordered bool
	rules   *HealthRules // the run's CEL health expressions
	// until is the deadline of the run's readiness waits, set by the first: ApplyOptions.
	// Timeout bounds them all, the final wait included.
	until time.Time
	// current are the objects a wait of this run found Current, with that health: not
	// waited for again, nor read again by the final wait (unknown, merge).
	current map[object.ObjMetadata]ObjectHealth
	// index is each item's place in the run's items, built at the first wait.
	index map[object.ObjMetadata]int
}

// hold is why a run stopped before applying items[next:]: what it waited for was not
// Ready (not Current yet under CheckOnce; not within the timeout, or Failed, otherwise), or
// an object it waited for failed to apply.
type hold struct {
	next   int
	health []ObjectHealth
	err    error // the wait's error: a timeout, or a Failed object; nil when only not yet Current
	reason string
}

// applyStages applies the items position by position (stage, then wave and depends-on
// step: order.go), in parallel within one. Before a position of an ordered set it waits for
// what that position waits for (waitBefore); when that is not Ready the run stops there and
// the hold says why. It returns one outcome per item applied (in item order) and a non-nil
// error only when a hook aborted the run.
func (r *applyRun) applyStages(ctx context.Context) ([]outcome, *hold, error) {
	outs := make([]outcome, len(r.items))
	r.progress.stage(StageApply, len(r.items))
	established := 0 // the items before it were applied when establish last ran
	for start := 0; start < len(r.items); {
		end := start + 1
		for end < len(r.items) && r.items[end].pos == r.items[start].pos {
			end++
		}
		stage := r.items[start].pos.stage
		if !r.opts.DryRun {
			if h := r.waitBefore(ctx, outs[:start], start, end); h != nil {
				return outs[:start], h, nil
			}
			if stage > stageDefinitions && r.mustEstablish(established, start, end) {
				r.establish(ctx, outs[:start], r.items[start:end])
				established = start
			}
		}
		if stage > stageDefinitions && r.opts.DryRun {
			r.newNamespaces = newNamespaces(outs[:start])
		}
		// Objects are surveyed chunk by chunk, so the LIST's answer is never older than one
		// chunk's applies (the race with another set creating the same object stays as short
		// as a GET's would be, give or take a chunk).
		shares := r.surveyShares(r.items[start:end])
		for cs := start; cs < end; cs += surveyChunk {
			ce := min(cs+surveyChunk, end)
			r.listed.surveyed = r.survey(ctx, r.items[cs:ce], shares)
			if err := r.applyRange(ctx, outs, cs, ce); err != nil {
				return outs[:ce], nil, err
			}
		}
		start = end
	}
	return outs, nil, nil
}

// mustEstablish says whether items[start:end], of a stage after the definitions, wait for
// the CRDs applied so far and their own pending kinds: at the first position of each stage,
// as an unordered set does, and at a later one only when it has pending kinds or a CRD was
// applied since the last wait (established).
func (r *applyRun) mustEstablish(established, start, end int) bool {
	if start == 0 || r.items[start-1].pos.stage != r.items[start].pos.stage {
		return true
	}
	for _, it := range r.items[start:end] {
		if it.pending {
			return true
		}
	}
	for _, it := range r.items[established:start] {
		if it.id.GroupKind == crdGK {
			return true
		}
	}
	return false
}

// holdResult records in res and rec a run that stopped before items[held.next:]: those
// are skipped, the objects waited for are its Health, and the wait's error (a timeout or a
// Failed object) names what was not applied.
func (r *applyRun) holdResult(res *Result, rec *record, held *hold) {
	res.Changes = append(res.Changes, r.notApplied(held)...)
	res.Held, res.Health = held.reason, held.health
	if held.err != nil {
		rec.errs = append(rec.errs, fmt.Errorf("%s: %w", held.reason, held.err))
	}
}

// waitBefore waits, before the position of items[start:end] of an ordered set, for the
// objects applied earlier in this run that are of a lower wave, for the dependencies of
// these items (DependsOnAnnotation: those of the set, applied earlier, and those outside it),
// and returns a hold when they are not all Ready. Objects a wait of this run already found
// Current, and objects the run skipped (reconcile disabled), are not waited for. It reads
// through the engine's readiness path (wait): in watch mode the watch cache, so a no-op
// reconcile of an ordered set sends no request for it.
func (r *applyRun) waitBefore(ctx context.Context, done []outcome, start, end int) *hold {
	if !r.waves.ordered {
		return nil
	}
	next := r.items[start].pos
	w := waitSet{byMeta: map[object.ObjMetadata]bool{}, applied: map[object.ObjMetadata]int64{}, health: r.waves.rules}
	label := map[object.ObjMetadata]string{}
	var failed []string
	add := func(i int) {
		it, o := r.items[i], done[i]
		if _, seen := label[it.id]; seen || r.waves.isCurrent(it.id) {
			return
		}
		label[it.id] = "wave " + it.pos.describeWave()
		switch {
		case o.change.Action == ActionFailed:
			failed = append(failed, Describe(it.id)+" (wave "+it.pos.describeWave()+")")
		case o.ready:
			w.ids = append(w.ids, it.id)
			if it.byMeta {
				w.byMeta[it.id] = true
			}
			if o.generation > 0 {
				w.applied[it.id] = o.generation
			}
		}
	}
	for i := range done {
		if r.items[i].pos.wave < next.wave {
			add(i)
		}
	}
	var external []object.ObjMetadata
	for _, it := range r.items[start:end] {
		for _, d := range it.deps {
			if i, ok := r.indexOf(d); ok && i < start {
				add(i)
			}
		}
		for _, d := range it.external {
			if _, seen := label[d]; !seen && !r.waves.isCurrent(d) {
				label[d] = "dependency of " + Describe(it.id)
				external = append(external, d)
			}
		}
	}
	r.e.addHealthChecks(&w, external, r.opts.DefaultNamespace)
	notApplied := r.notAppliedFrom(start)
	if len(failed) > 0 {
		return &hold{next: start, reason: notApplied + ": " + strings.Join(failed, ", ") + " failed to apply"}
	}
	if len(w.ids) == 0 {
		return nil
	}
	health, err := r.e.wait(ctx, w, waitFor{timeout: r.waitTimeout(), once: r.opts.CheckOnce}, nil)
	var pending []string
	for _, h := range health {
		if h.Status == status.CurrentStatus.String() {
			r.waves.current[h.Object] = h
			continue
		}
		pending = append(pending, Describe(h.Object)+" ("+label[h.Object]+")")
	}
	if len(pending) == 0 && err == nil {
		return nil
	}
	return &hold{next: start, health: health, err: err,
		reason: notApplied + ": waiting for " + listObjects(pending, 5)}
}

// isCurrent says a wait of this run found id Current.
func (wv *waves) isCurrent(id object.ObjMetadata) bool {
	_, ok := wv.current[id]
	return ok
}

// unknown narrows w to the objects no wait of this run found Current yet, and returns all
// of w's objects, for merge.
func (wv *waves) unknown(w waitSet) ([]object.ObjMetadata, waitSet) {
	all := w.ids
	if len(wv.current) == 0 {
		return all, w
	}
	w.ids = make([]object.ObjMetadata, 0, len(all))
	for _, id := range all {
		if !wv.isCurrent(id) {
			w.ids = append(w.ids, id)
		}
	}
	return all, w
}

// merge is the health of all, in their order: what a wait of this run found Current, and
// health (the wait of the others) for the rest.
func (wv *waves) merge(all []object.ObjMetadata, health []ObjectHealth) []ObjectHealth {
	if len(wv.current) == 0 || len(health) == len(all) {
		return health
	}
	byID := make(map[object.ObjMetadata]ObjectHealth, len(health))
	for _, h := range health {
		byID[h.Object] = h
	}
	out := make([]ObjectHealth, 0, len(all))
	for _, id := range all {
		h, ok := wv.current[id]
		if !ok {
			h = byID[id]
		}
		out = append(out, h)
	}
	return out
}

// waitTimeout is how long the next readiness wait of the run may take: under CheckOnce the
// caller keeps the deadline (one read); otherwise what is left of Timeout since the run's
// first wait.
func (r *applyRun) waitTimeout() time.Duration {
	t := r.opts.Timeout
	if t <= 0 {
		t = defaultTimeout
	}
	if r.opts.CheckOnce || !r.waves.ordered {
		return t
	}
	if r.waves.until.IsZero() {
		r.waves.until = time.Now().Add(t)
	}
	return max(time.Until(r.waves.until), time.Millisecond)
}

// indexOf is the place of the item id in the run's items.
func (r *applyRun) indexOf(id object.ObjMetadata) (int, bool) {
	if r.waves.index == nil {
		r.waves.index = make(map[object.ObjMetadata]int, len(r.items))
		for i, it := range r.items {
			r.waves.index[it.id] = i
		}
	}
	i, ok := r.waves.index[id]
	return i, ok
}

// notAppliedFrom names the items from start on, which a hold leaves unapplied: "ConfigMap
// apps/b (wave 1) not applied", "3 objects from wave 1 on not applied".
func (r *applyRun) notAppliedFrom(start int) string {
	first := r.items[start]
	if n := len(r.items) - start; n > 1 {
		return fmt.Sprintf("%d objects from wave %s on (%s first) not applied", n, first.pos.describeWave(), Describe(first.id))
	}
	return fmt.Sprintf("%s (wave %s) not applied", Describe(first.id), first.pos.describeWave())
}

// notApplied are the changes of the items a hold left unapplied: skipped, naming why. They
// stay in the inventory as written ahead (nothing of theirs is recorded or pruned).
func (r *applyRun) notApplied(h *hold) []Change {
	out := make([]Change, 0, len(r.items)-h.next)
	for _, it := range r.items[h.next:] {
		out = append(out, Change{ID: it.key, Object: it.id, Origin: it.origin, Action: ActionSkipped,
			Wave: it.pos.describeWave(), Message: "not applied: " + h.reason})
	}
	return out
}

// listObjects joins names, the first limit of them and a count of the others.
func listObjects(names []string, limit int) string {
	if len(names) <= limit {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:limit], ", "), len(names)-limit)
}

// findDependencies looks for the dependencies of items outside the set in the cluster,
// completing the namespace of a namespaced one written without it from defaultNamespace.
// One that does not exist is an error naming it and its dependent; nothing is written then.
// A dependency of a kind the watch cache already watches is read from it, so a no-op
// reconcile sends no request for it; any other is read from the API server: reading it
// through the cache would start an informer holding every object of its kind in the
// cluster (a dependency on one Pod would cache them all), for the life of the daemon.
func (e *Engine) findDependencies(ctx context.Context, items []*item, defaultNamespace string) error {
	if err := boundExternal(items); err != nil {
		return err
	}
	found := map[object.ObjMetadata]error{}
	var errs []error
	for _, it := range items {
		for i, d := range it.external {
			if m, err := e.mapper.RESTMapping(d.GroupKind); err == nil {
				switch {
				case m.Scope.Name() != meta.RESTScopeNameNamespace:
					d.Namespace = ""
				case d.Namespace == "":
					d.Namespace = defaultNamespace
				}
				it.external[i] = d
			}
			err, ok := found[d]
			if !ok {
				var reader client.Reader = e.client
				if e.cache != nil && e.cache.watchingKind(d.GroupKind) {
					reader = e.cache
				}
				live, gerr := e.getByID(ctx, reader, d)
				if err = gerr; err == nil && live == nil {
					err = errMissingDependency
				}
				found[d] = err
			}
			switch {
			case errors.Is(err, errMissingDependency):
				errs = append(errs, fmt.Errorf("%s depends on %s (annotation %s), which is neither in the set nor in the cluster",
					describeAt(it.origin, it.id), Describe(d), DependsOnAnnotation))
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: dependency %s: %w", describeAt(it.origin, it.id), Describe(d), err))
			}
		}
	}
	return errors.Join(errs...)
}

// MaxExternalDependencies bounds the distinct objects outside a set that its depends-on
// annotations name: each is read, and waited for, on every run (a repository cannot make a
// reconcile read an unbounded number of objects of any kind).
const MaxExternalDependencies = 32

// boundExternal refuses a set whose depends-on annotations name more than
// MaxExternalDependencies distinct objects outside it (terminal: nothing is applied).
func boundExternal(items []*item) error {
	seen := map[object.ObjMetadata]bool{}
	for _, it := range items {
		for _, d := range it.external {
			if seen[d] = true; len(seen) > MaxExternalDependencies {
				return terminal(fmt.Errorf("%s: the set's %s annotations name more than %d objects outside it (%s is one); nothing was applied or pruned: depend on fewer, or on objects of the set",
					describeAt(it.origin, it.id), DependsOnAnnotation, MaxExternalDependencies, Describe(d)))
			}
		}
	}
	return nil
}

// errMissingDependency marks a dependency findDependencies did not find.
var errMissingDependency = errors.New("dependency missing")
