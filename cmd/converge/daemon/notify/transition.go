package notify

// Ready is the status of a Sync's Ready condition: "True", "False" or "Unknown" (still
// progressing); empty when the Sync has no Ready condition yet.
type Ready string

// The Ready condition's statuses.
const (
	ReadyTrue    Ready = "True"
	ReadyFalse   Ready = "False"
	ReadyUnknown Ready = "Unknown"
)

// State is what Transitions compares: a Sync's status as read before a reconcile, or as
// written by it.
type State struct {
	// Ready is the Ready condition's status.
	Ready Ready
	// Revision is the revision the Ready condition is about (the last attempted one).
	Revision string
	// Drifted is the Drifted condition: live objects differ from the revision.
	Drifted bool
	// RolledBackFrom is the revision an automatic or manual rollback left, empty when the
	// Sync is not rolled back.
	RolledBackFrom string
}

// Transitions says what to send when a Sync's settled state goes from prev to next, in the
// order to send it; nil when nothing changed that a team needs to hear about. It is a pure
// function of two states taken from the status, so a no-op reconcile or a daemon restart
// sends nothing again.
//
// prev is the last settled state: its Ready is True or False (or empty for a Sync never
// settled). A reconcile in progress writes Ready=Unknown, which hides what came before;
// Settle carries the settled part over it, so True → Unknown → True for one revision sends
// nothing, while False → Unknown → True sends BecameReady.
//
//   - RolledBack when a rollback starts or leaves another revision.
//   - Failed when Ready becomes False, or stays False for a new revision: each failing commit
//     gets its commit status. A failure that only changes its reason or message is not sent.
//   - BecameReady when Ready becomes True, or stays True for a new revision.
//   - Drifted when drift starts; while it lasts nothing more is sent.
func Transitions(prev, next State) []Transition {
	var out []Transition
	if next.RolledBackFrom != "" && next.RolledBackFrom != prev.RolledBackFrom {
		out = append(out, RolledBack)
	}
	settledBefore := prev.Ready == ReadyTrue || prev.Ready == ReadyFalse
	sameAsBefore := settledBefore && next.Ready == prev.Ready && next.Revision == prev.Revision
	switch {
	case next.Ready == ReadyFalse && !sameAsBefore:
		out = append(out, Failed)
	case next.Ready == ReadyTrue && !sameAsBefore:
		out = append(out, BecameReady)
	}
	if next.Drifted && !prev.Drifted {
		out = append(out, Drifted)
	}
	return out
}

// Settle returns the state to compare the next one with: next, but while next.Ready is
// neither True nor False (a reconcile in progress), prev's Ready and Revision.
func Settle(prev, next State) State {
	if next.Ready != ReadyTrue && next.Ready != ReadyFalse {
		next.Ready, next.Revision = prev.Ready, prev.Revision
	}
	return next
}
