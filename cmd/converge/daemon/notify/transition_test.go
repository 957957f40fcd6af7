package notify

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestTransitions: what each change of a Sync's settled state sends; a steady state, a
// reconcile in progress and a changed failure message send nothing.
func TestTransitions(t *testing.T) {
	const a, b = "main@sha1:aaaa", "main@sha1:bbbb"
	ready := func(rev string) State { return State{Ready: ReadyTrue, Revision: rev} }
	failed := func(rev string) State { return State{Ready: ReadyFalse, Revision: rev} }
	tests := []struct {
		name       string
		prev, next State
		want       []Transition
	}{
		{"steady Ready", ready(a), ready(a), nil},
		{"steady failure", failed(a), failed(a), nil},
		{"steady drift", State{Ready: ReadyTrue, Revision: a, Drifted: true}, State{Ready: ReadyTrue, Revision: a, Drifted: true}, nil},
		{"new Sync becomes Ready", State{}, ready(a), []Transition{BecameReady}},
		{"new Sync fails", State{}, failed(a), []Transition{Failed}},
		{"new Sync in progress", State{}, State{Ready: ReadyUnknown, Revision: a}, nil},
		{"Ready to failed", ready(a), failed(a), []Transition{Failed}},
		{"failed to Ready", failed(a), ready(a), []Transition{BecameReady}},
		{"new revision Ready", ready(a), ready(b), []Transition{BecameReady}},
		{"new revision fails too", failed(a), failed(b), []Transition{Failed}},
		{"Ready to in progress", ready(a), State{Ready: ReadyUnknown, Revision: b}, nil},
		{"drift starts", ready(a), State{Ready: ReadyTrue, Revision: a, Drifted: true}, []Transition{Drifted}},
		{"drift ends", State{Ready: ReadyTrue, Revision: a, Drifted: true}, ready(a), nil},
		{"rollback", failed(b), State{Ready: ReadyTrue, Revision: a, RolledBackFrom: b}, []Transition{RolledBack, BecameReady}},
		{"rollback kept", State{Ready: ReadyTrue, Revision: a, RolledBackFrom: b}, State{Ready: ReadyTrue, Revision: a, RolledBackFrom: b}, nil},
		{"rollback lifted", State{Ready: ReadyTrue, Revision: a, RolledBackFrom: b}, ready(a), nil},
		{"fails and drifts", ready(a), State{Ready: ReadyFalse, Revision: a, Drifted: true}, []Transition{Failed, Drifted}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Transitions(tt.prev, tt.next)); diff != "" {
				t.Errorf("Transitions (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSettleThroughProgress: a sequence of written states, each compared with the settled
// one before it, sends one BecameReady per recovery and per new revision, nothing for a
// re-check of the same revision.
func TestSettleThroughProgress(t *testing.T) {
	const a, b = "main@sha1:aaaa", "main@sha1:bbbb"
	seq := []struct {
		next State
		want []Transition
	}{
		{State{Ready: ReadyUnknown, Revision: a}, nil},
		{State{Ready: ReadyTrue, Revision: a}, []Transition{BecameReady}},
		{State{Ready: ReadyUnknown, Revision: a}, nil}, // drift correction re-checks readiness
		{State{Ready: ReadyTrue, Revision: a}, nil},
		{State{Ready: ReadyUnknown, Revision: b}, nil},
		{State{Ready: ReadyFalse, Revision: b}, []Transition{Failed}},
		{State{Ready: ReadyUnknown, Revision: b}, nil},
		{State{Ready: ReadyTrue, Revision: b}, []Transition{BecameReady}},
	}
	var prev State
	for i, s := range seq {
		if diff := cmp.Diff(s.want, Transitions(prev, s.next)); diff != "" {
			t.Errorf("step %d (%+v) (-want +got):\n%s", i, s.next, diff)
		}
		prev = Settle(prev, s.next)
	}
}

// TestCommitSHA: only a git revision names a commit.
func TestCommitSHA(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	for rev, want := range map[string]string{
		"main@sha1:" + sha: sha, "sha1:" + sha: sha, "v1.2.0@sha1:" + sha: sha, "feature/x@sha1:" + sha: sha,
		"v1.2.3@sha256:" + sha + sha[:24]: "", "sha256:" + sha + sha[:24]: "", "main@sha1:abc": "", "": "",
		"main@sha1:" + sha + "\nx": "", "main@sha1:" + strings.ToUpper(sha): "",
	} {
		got, err := CommitSHA(rev)
		if got != want || (want == "") != errors.Is(err, ErrNoCommit) {
			t.Errorf("CommitSHA(%q) = %q, %v; want %q", rev, got, err, want)
		}
	}
}
