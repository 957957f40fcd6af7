package engine

import (
	"sigs.k8s.io/cli-utils/pkg/object"

	"github.com/converge-dev/converge/inventory"
)

// Action is what the engine did, or would do under DryRun, with one object.
type Action string

// The actions of a Change.
const (
	ActionCreated    Action = "created"
	ActionConfigured Action = "configured"
	ActionUnchanged  Action = "unchanged"
	ActionPruned     Action = "pruned"
	ActionSkipped    Action = "skipped"
	ActionFailed     Action = "failed"
)

// Change is the outcome for one object of the desired set (Result.Changes) or of the
// inventory (Result.Pruned).
type Change struct {
	// ID is the object's ns_name_group_kind, as stored in the inventory.
	ID string
	// Object identifies the object.
	Object object.ObjMetadata
	// Origin is where the object was rendered from (Set.Origins), "" when unknown or pruned.
	Origin string
	// Action is what happened.
	Action Action
	// Diff is a unified diff of the live object against the server's dry-run result, with
	// Secret values masked. Filled under DryRun or ApplyOptions.Diff.
	Diff string
	// Message explains skips, failures and dry-run shortcuts.
	Message string
	// Err is the error of a failed object, already prefixed with the object's origin and
	// name ("apps/web.yaml:3: ConfigMap apps/web: apply: …").
	Err error
	// Wave is the object's place in a set whose objects carry ordering annotations
	// (WaveAnnotation, DependsOnAnnotation): its wave, "1" or "-2", with its step when
	// depends-on orders objects of one wave, "0, step 2". Empty for an unordered set.
	Wave string
}

// describe names the change's object for messages, after its origin when known.
func (c Change) describe() string { return describeAt(c.Origin, c.Object) }

// ObjectHealth is the kstatus readiness of one applied object.
type ObjectHealth struct {
	// ID is the object's ns_name_group_kind.
	ID string
	// Object identifies the object.
	Object object.ObjMetadata
	// Status is the kstatus status: Current, InProgress, Failed, Terminating, NotFound or
	// Unknown.
	Status string
	// Message is kstatus' explanation of Status.
	Message string
}

// Result is the outcome of Apply or Delete. A partial failure returns both a Result and an
// error.
type Result struct {
	// Changes has one entry per object of the desired set, in apply order.
	Changes []Change
	// Pruned has one entry per prune candidate: pruned, skipped (not ours any more, prune
	// disabled, recreated by someone else) or failed.
	Pruned []Change
	// Health has one entry per applied object when ApplyOptions.Wait is set.
	Health []ObjectHealth
	// Inventory is what Apply recorded as the set's inventory at the end of the run (nil
	// under DryRun, after an aborted run, or when the record failed), for a caller that
	// keeps a recovery copy of it (ApplyOptions.Recover). It may be shared with the engine,
	// which remembers what it read (Options.Heads): read it, never modify it (Clone first).
	Inventory *inventory.Inventory
	// MigrationPending is set when the inventory's migration from its legacy ID is not
	// finished (Engine.Migrate): the objects it could not re-annotate and why (a refused
	// patch, an object both inventories of the legacy ID list). It does not fail the run,
	// which still treats the recorded ones as its own; the owner shows it (the Sync's Ready
	// message) so that a person can lift the refusal or settle the contested objects.
	// Removed in v0.2 with the migration.
	MigrationPending string
	// Held is set when the run stopped before a wave (or a depends-on step) because what it
	// waits for was not Ready: it names the objects not applied and those waited for, with
	// their waves. Health then holds the objects waited for; the ones not applied are in
	// Changes as skipped, nothing was pruned, and the inventory keeps every object. Under
	// CheckOnce a caller applies again later to go on.
	Held string
	// Left lists the objects of the inventory that left the set and stay because
	// ApplyOptions.Prune is off (they stay in the inventory too, so a later run with Prune
	// deletes them).
	Left []object.ObjMetadata
	// Drift lists the objects of the set that drifted from the set last applied, in apply
	// order, when the run detects drift (ApplyOptions.Drift): changed or deleted out of
	// band, corrected or only reported.
	Drift []DriftedObject
	// IgnoreUnmatched describes the ApplyOptions.Ignore rules that leave every object of the
	// set alone (their target selects none, or no selected object sets their paths, or, in
	// a run that reads every live object (not the watch cache's), their managers own no
	// field the render sets in the existing objects they select): not an error, reported by
	// the owner.
	IgnoreUnmatched []string
}

// Summary counts the actions of a Result.
type Summary struct {
	Created, Configured, Unchanged, Pruned, Skipped, Failed, NotReady int
}

// Summary counts r's changes by action and its health entries that are not Current.
func (r *Result) Summary() Summary {
	var s Summary
	if r == nil {
		return s
	}
	for _, list := range [][]Change{r.Changes, r.Pruned} {
		for _, c := range list {
			switch c.Action {
			case ActionCreated:
				s.Created++
			case ActionConfigured:
				s.Configured++
			case ActionUnchanged:
				s.Unchanged++
			case ActionPruned:
				s.Pruned++
			case ActionSkipped:
				s.Skipped++
			case ActionFailed:
				s.Failed++
			}
		}
	}
	for _, h := range r.Health {
		if h.Status != "Current" {
			s.NotReady++
		}
	}
	return s
}

// failed reports whether any change of the desired set failed.
func (r *Result) failed() bool {
	for _, c := range r.Changes {
		if c.Action == ActionFailed {
			return true
		}
	}
	return false
}
