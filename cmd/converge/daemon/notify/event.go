package notify

import (
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"
)

// Transition is what happened to a Sync, worth telling a team about.
type Transition string

const (
	// BecameReady: the Sync is Ready for a revision it was not Ready for before.
	BecameReady Transition = "BecameReady"
	// Failed: the Sync became not Ready, or a new revision failed.
	Failed Transition = "Failed"
	// Drifted: live objects started to differ from the revision (Report mode leaves them so).
	Drifted Transition = "Drifted"
	// RolledBack: the Sync went back from a revision to the last Ready one.
	RolledBack Transition = "RolledBack"
)

// Event is one transition of one Sync, the unit a Dispatcher delivers.
type Event struct {
	// Namespace and Name name the Sync.
	Namespace, Name string
	// UID identifies the Sync among those that held its name, for the caller's hooks; it is
	// not sent.
	UID string
	// Transition is what happened.
	Transition Transition
	// Revision is the source revision the transition is about, as in the Sync status:
	// "main@sha1:<hex>" for git, "v1.2.3@sha256:<hex>" for OCI artifacts and charts. For
	// RolledBack it is the revision that was left, so its commit status reads failure.
	Revision string
	// Reason is the Ready condition's reason (CamelCase, e.g. "HealthCheckFailed").
	Reason string
	// Message is the condition's message; each provider truncates it to its limit.
	Message string
	// Time is when the transition was observed; zero: when the request is built.
	Time time.Time
	// Cluster names the cluster the daemon runs in; a Provider's Cluster overrides it.
	Cluster string
}

// sha1Revision matches the git part of a revision: "sha1:<40 hex>", after an optional
// "<ref>@". An OCI or chart digest ("sha256:") names no commit.
var sha1Revision = regexp.MustCompile(`^(?:[^@]*@)?sha1:([0-9a-f]{40})$`)

// ErrNoCommit is wrapped when a revision names no git commit, so no commit status can be set.
var ErrNoCommit = errors.New("names no git commit")

// CommitSHA returns the git commit a revision names, or an error if it names none (an OCI
// artifact or a chart): such a revision cannot get a commit status.
func CommitSHA(revision string) (string, error) {
	m := sha1Revision.FindStringSubmatch(revision)
	if m == nil {
		return "", fmt.Errorf("revision %q: %w (want [ref@]sha1:<40 hex>)", revision, ErrNoCommit)
	}
	return m[1], nil
}

// title is the one-line summary every provider shows: "apps/web became Ready".
func (e Event) title() string {
	verb := map[Transition]string{BecameReady: "became Ready", Failed: "failed", Drifted: "drifted", RolledBack: "rolled back"}[e.Transition]
	if verb == "" {
		verb = string(e.Transition)
	}
	return fmt.Sprintf("%s/%s %s", e.Namespace, e.Name, verb)
}

// truncate cuts s to at most n characters (runes), ending with "…" when cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	return string([]rune(s)[:n-1]) + "…"
}
