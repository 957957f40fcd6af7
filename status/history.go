package status

import (
	"strings"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// recordHistory adds o to s.History, newest first, as Write's apply calls it once it knows
// the status is written anyway: history never costs a write of its own, so a no-op
// reconcile still writes nothing (I7). An outcome with the same generation, revision and
// Ready status and reason as the newest entry counts on that entry (Count, LastSeen);
// another one starts a new entry, and the oldest beyond v1alpha1.MaxHistory is dropped.
// An in-progress outcome (Ready=Unknown) is no outcome yet and is not recorded.
func recordHistory(s *v1alpha1.SyncStatus, o Outcome, now metav1.Time) {
	if o.Ready != metav1.ConditionTrue && o.Ready != metav1.ConditionFalse {
		return
	}
	e := historyEntry(s, o, now)
	if len(s.History) > 0 && sameOutcome(s.History[0], e) {
		s.History[0].Count++
		s.History[0].LastSeen = now
		return
	}
	h := make([]v1alpha1.HistoryEntry, 0, v1alpha1.MaxHistory)
	h = append(h, e)
	for _, old := range s.History {
		if len(h) == v1alpha1.MaxHistory {
			break
		}
		h = append(h, old)
	}
	s.History = h
}

// historyEntry is the first record of o, after the rest of o was merged into s.
func historyEntry(s *v1alpha1.SyncStatus, o Outcome, now metav1.Time) v1alpha1.HistoryEntry {
	reason := o.Reason
	if reason == "" {
		reason = "Unknown" // as setCondition records it
	}
	e := v1alpha1.HistoryEntry{
		Revision:   truncate(o.AttemptedRevision, maxHistoryRevision),
		Digest:     truncate(revisionDigest(o.AttemptedRevision), maxHistoryDigest),
		Generation: o.Generation,
		Ready:      o.Ready,
		Reason:     truncate(reason, maxHistoryReason),
		Message:    truncate(o.Message, v1alpha1.MaxHistoryMessage),
		FirstSeen:  now,
		LastSeen:   now,
		Count:      1,
	}
	if s.Summary != nil {
		sum := *s.Summary
		e.Summary = &sum
	}
	if o.Duration > 0 {
		e.Duration = &metav1.Duration{Duration: o.Duration}
	}
	return e
}

// Bounds of the history fields other than the message, in bytes (the CRD's maxLength).
const (
	maxHistoryRevision = 1024
	maxHistoryDigest   = 160
	maxHistoryReason   = 1024
)

// sameOutcome reports whether e, a new record, repeats the outcome of the newest entry.
func sameOutcome(newest, e v1alpha1.HistoryEntry) bool {
	return newest.Generation == e.Generation && newest.Revision == e.Revision &&
		newest.Ready == e.Ready && newest.Reason == e.Reason
}

// revisionDigest is the content digest a revision names: "sha1:<hex>" of "main@sha1:<hex>",
// "sha256:<hex>" of "v1.2.3@sha256:<hex>" or of "sha256:<hex>"; "" when it names none (a
// chart version without a digest, a failed fetch).
func revisionDigest(rev string) string {
	d := rev[strings.LastIndex(rev, "@")+1:]
	if !strings.Contains(d, ":") {
		return ""
	}
	return d
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
