package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// statusView says how printSyncs lays the Syncs out.
type statusView struct {
	// Wide (-o wide) adds OWNER and prints messages whole.
	Wide bool
	// AllNamespaces adds the NAMESPACE column, and OWNER: across namespaces the table is the
	// view of the whole fleet, where which replica holds a Sync matters.
	AllNamespaces bool
	// NoHeaders leaves out the header line.
	NoHeaders bool
	// Now is the clock AGE is measured against; zero means clock().
	Now time.Time
}

// tableWriter is the writer printers.GetNewTabWriter returns.
type tableWriter interface {
	io.Writer
	Flush() error
}

// column is one column of a table of R: its header, whether it shows, and its cell.
type column[R any] struct {
	header string
	show   bool
	cell   func(R) string
}

// writeTable writes rows under the columns that show to tw, kubectl's table writer
// (printers.GetNewTabWriter: left-aligned, three spaces apart, widths remembered across
// flushes, so the rows a watch adds line up), "<none>" for an empty cell.
func writeTable[R any](tw tableWriter, cols []column[R], rows []R, noHeaders bool) error {
	line := func(cell func(column[R]) string) {
		var cells []string
		for _, c := range cols {
			if c.show {
				cells = append(cells, cell(c))
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if !noHeaders {
		line(func(c column[R]) string { return c.header })
	}
	for _, r := range rows {
		line(func(c column[R]) string { return cmp.Or(c.cell(r), "<none>") })
	}
	return tw.Flush()
}

// syncColumns are the columns of `converge status`: kubectl get's (NAME, READY, a reason,
// AGE, MESSAGE) with flux get's REVISION (the last applied) and SUSPENDED.
func syncColumns(view statusView) []column[v1alpha1.Sync] {
	now := view.Now
	if now.IsZero() {
		now = clock()
	}
	return []column[v1alpha1.Sync]{
		{"NAMESPACE", view.AllNamespaces, func(s v1alpha1.Sync) string { return s.Namespace }},
		{"NAME", true, func(s v1alpha1.Sync) string { return s.Name }},
		{"READY", true, func(s v1alpha1.Sync) string {
			return readyOf(s, func(c *metav1.Condition) string { return string(c.Status) }, "Unknown")
		}},
		{"REASON", true, func(s v1alpha1.Sync) string {
			return readyOf(s, func(c *metav1.Condition) string { return c.Reason }, "")
		}},
		{"REVISION", true, func(s v1alpha1.Sync) string { return s.Status.LastAppliedRevision }},
		{"SUSPENDED", true, func(s v1alpha1.Sync) string { return boolCell(s.Spec.Suspend) }},
		{"AGE", true, func(s v1alpha1.Sync) string { return duration.HumanDuration(now.Sub(s.CreationTimestamp.Time)) }},
		{"OWNER", view.Wide || view.AllNamespaces, func(s v1alpha1.Sync) string { return s.Status.Owner }},
		{"MESSAGE", true, func(s v1alpha1.Sync) string { return syncMessage(s, view.Wide) }},
	}
}

// printSyncs writes the Syncs as the table of `converge status` (sorted as the API lists them).
func printSyncs(w io.Writer, items []v1alpha1.Sync, view statusView) error {
	return writeTable(printers.GetNewTabWriter(w), syncColumns(view), items, view.NoHeaders)
}

// readyOf is f of the Sync's Ready condition, or none when it has none.
func readyOf(s v1alpha1.Sync, f func(*metav1.Condition) string, none string) string {
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return f(c)
	}
	return none
}

func boolCell(b bool) string {
	if b {
		return "True"
	}
	return "False"
}

// maxMessage is where the table (not -o wide) cuts a message.
const maxTableMessage = 120

// syncMessage is the MESSAGE of s: the Ready condition's message, after what the reader
// must know first. A revision newer than REVISION that failed (or is still in progress) is
// named, since REVISION shows the last one applied; so is the revision spec.rollback pins
// the Sync to, when the message does not name it (a pin not applied yet, or refused); a generation the status does not
// describe yet is said. The table cuts the message after its first line and 120 characters,
// never what comes before it; full prints it all on one line.
func syncMessage(s v1alpha1.Sync, full bool) string {
	c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	if c == nil {
		return "not reconciled yet"
	}
	msg := c.Message
	if full {
		msg = joinLines(msg)
	} else {
		msg = cut(firstLine(msg), maxTableMessage)
	}
	st := s.Status
	if attempted := st.LastAttemptedRevision; attempted != "" && attempted != st.LastAppliedRevision &&
		!strings.Contains(c.Message, attempted) {
		switch c.Status {
		case "False":
			msg = fmt.Sprintf("revision %s failed: %s", attempted, msg)
		case "Unknown":
			msg = fmt.Sprintf("revision %s in progress: %s", attempted, msg)
		}
	}
	if rb := s.Spec.Rollback; rb != nil && !strings.Contains(msg, rb.Revision) {
		msg = fmt.Sprintf("pinned to %s by spec.rollback: %s", rb.Revision, msg)
	}
	if st.ObservedGeneration != s.Generation {
		msg = fmt.Sprintf("generation %d not observed yet (status describes %d): %s", s.Generation, st.ObservedGeneration, msg)
	}
	return msg
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// joinLines puts the lines of s on one line, "; " apart (a joined error has one per cause).
func joinLines(s string) string {
	var lines []string
	for l := range strings.Lines(s) {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// cut shortens s to at most n bytes, on a character boundary, and marks the cut with "…".
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
